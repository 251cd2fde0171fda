#!/usr/bin/env python3
"""Does pre-training help at this scale? BERT on Debian's package descriptions.

`make bert-experiment` runs it after `make packages` (datasets/make_packages.py):

 1. pre-trains one BERT by masked language modelling on pretrain.txt (the
    training split's descriptions, no held-out source), BPE tokens learned
    from that text;
 2. for each size (500 and 2,000 labelled examples) and seed (1, 2, 3): draws
    that many examples of train.tsv (a shuffle from the seed), and fine-tunes
    a classifier on them twice, with the same steps and settings:
      - pre-trained: --init-from the masked LM (its encoder; the pooler and
        the classifier fresh),
      - from scratch: --tokenizer-from the masked LM (the same tokens, every
        weight fresh);
 3. scores each on test.tsv once, at the end (--eval-only --valid test.tsv),
    beside the bag-of-words linear classifier trained by qkv
    (build/rel-f32/bow_classify) on the same subsets and the majority class.

Model selection (steps, learning rate) was done on valid.tsv; the test split
is read only by step 3. Prints a Markdown table (docs/bert.md holds the one
measured) and writes every number to OUT/results.json.

Every flag, input and output is checked before any work: a bad value, a
pre-trained file that is not one (garbage, no train_config, a directory), or
an output that is not a regular file (a FIFO would block) is refused in one
line naming the flag or the file (and the key), with exit status 1.
"""
import argparse
import json
import math
import os
import random
import re
import stat
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qkv_checkpoint as qc  # noqa: E402  (the checked safetensors reader, the output rule)

ARCH = ["--d-model", "128", "--heads", "4", "--layers", "4", "--d-ff", "512"]


def run(cmd, log):
    t0 = time.time()
    with open(log, "w") as f:
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n  see {log}")
    return time.time() - t0, open(log).read()


def number(pattern, text, what):
    m = re.search(pattern, text, re.M)
    if not m:
        sys.exit(f"no {what} in the output")
    return float(m.group(1))


def write_subset(lines, n, seed, path):
    """The first n of `lines` shuffled by `seed`, written to path: the labelled
    subset of a size and seed (t5_packages.py draws the same ones)."""
    rows = list(lines)
    random.Random(seed).shuffle(rows)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(rows[:n]) + "\n")
    return path


def median_cell(rows, key):
    """A table cell: the median of rows' `key` and each seed's figure."""
    v = [r[key] for r in rows if key in r]
    if not v:
        return "not run"
    return f"{statistics.median(v):.1f}% ({', '.join(f'{x:.1f}' for x in v)})"


# ---- checking the command line and the files before any work ------------------------

# train's ranges (trainer/config.cpp, trainer/run.cpp): --steps in [1, 10^9],
# --threads in [0, 1024]; its cosine schedule warms up within --steps.
MAX_STEPS = 10**9
PRETRAIN_WARMUP = 400  # the pre-training's warm-up at 4,000 steps and more


def pretrain_warmup(steps):
    """The pre-training's warm-up for `steps` steps: 400 (the setting measured
    at 4,000 steps), a tenth of the steps below 4,000 (the cosine schedule
    needs it within the steps)."""
    return min(PRETRAIN_WARMUP, steps // 10)


class Refused(Exception):
    """A flag, input or output refused before any work: one line."""


def shown(value, limit=40):
    """`value` quoted for a message: a control character (or an undecodable
    byte of the command line) as \\xNN, and cut after `limit` characters."""
    out = []
    for c in str(value):
        o = ord(c)
        if 0xDC80 <= o <= 0xDCFF:  # a byte of argv that is not UTF-8
            out.append(f"\\x{o - 0xDC00:02x}")
        elif o < 0x20 or 0x7F <= o < 0xA0 or 0xD800 <= o <= 0xDFFF:
            out.append(f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}")
        else:
            out.append(c)
    text = "".join(out)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(str(value))} characters)"


def whole_numbers(flag, text, low, high, example):
    """The comma-separated whole numbers of `flag`, each in [low, high], none twice."""
    parts = text.split(",")
    if not all(re.fullmatch(r"[0-9]+", p.strip()) for p in parts):
        raise Refused(f"{flag} '{shown(text)}': not a comma-separated list of whole numbers "
                      f"(such as {example})")
    for p in parts:  # a number of 20 digits or more is out of range (and not read: int() of
        # 5,000 digits is refused by Python itself)
        if len(p.strip().lstrip("0")) >= 20 or not low <= int(p) <= high:
            top = "10^9" if high == 10**9 else "2^63 - 1" if high == 2**63 - 1 else str(high)
            which = f"{shown(p.strip())} is not" if len(parts) > 1 else "not"
            raise Refused(f"{flag} '{shown(text)}': {which} in [{low}, {top}]")
    values = [int(p) for p in parts]
    twice = [v for i, v in enumerate(values) if v in values[:i]]
    if twice:
        raise Refused(f"{flag} '{shown(text)}': {twice[0]} is given twice")
    return values


def whole_number(flag, text, low, high):
    if (not re.fullmatch(r"\s*[0-9]+\s*", text) or len(text.strip().lstrip("0")) >= 20
            or not low <= int(text) <= high):
        top = "10^9" if high == 10**9 else str(high)
        raise Refused(f"{flag} '{shown(text)}': not a whole number in [{low}, {top}]")
    return int(text)


def epochs_of(flag, text):
    try:
        e = float(text)
    except ValueError:
        e = None
    if e is None or not math.isfinite(e) or e <= 0:
        raise Refused(f"{flag} '{shown(text)}': not a finite number > 0 (such as 20)")
    if e > 10000:  # the steps must stay a count train takes (--steps <= 10^9)
        raise Refused(f"{flag} '{shown(text)}': more than 10000 passes over the examples")
    return e


def finetune_steps(epochs, n):
    """A fine-tune's steps: `epochs` passes over n examples, 32 a batch, at least 50."""
    return max(50, round(epochs * n / 32))


def regular_input(path):
    """path, an input the tool reads itself: refused unless a regular file
    (a FIFO would block the read; stat does not open it)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise Refused(f"{shown(path, 80)}: no such file") from None
    if stat.S_ISDIR(st.st_mode):
        raise Refused(f"{shown(path, 80)}: is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise Refused(f"{shown(path, 80)}: is not a regular file (a FIFO, device or socket)")
    return path


def output_file(path, out):
    """path, a file the tool writes under --out: missing or a regular file
    (qkv's rule for outputs, qkv_checkpoint._output_target): a FIFO, device,
    directory or dangling link is refused before any work."""
    try:
        qc._output_target(path)
    except ValueError as e:
        raise Refused(f"{shown(e, 160)} (an output of --out {shown(out)})") from None


def output_dir(path, out=None):
    """path, a folder written to (--out itself, out None, or train's --out
    under --out `out`): missing or a folder."""
    if os.path.lexists(path) and not os.path.isdir(path):
        kind = ("a file" if os.path.isfile(path) else
                "a dangling link" if not os.path.exists(path) else "a FIFO, device or socket")
        if out is None:
            raise Refused(f"--out {shown(path, 80)}: is {kind}, not a folder")
        raise Refused(f"{shown(path, 80)}: is {kind}, not a folder (an output of --out {shown(out)})")


def program(bin_dir, name):
    path = os.path.join(bin_dir, name)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise Refused(f"--bin {shown(bin_dir)}: has no program '{name}' (build it: make)")
    return path


def reading_of(path):
    """The --reading a pre-trained file was made with, from its train_config.
    The file is checked first (qkv_checkpoint's reader: a regular file, a
    safetensors header) and refused, naming it and the key, unless it is a
    training checkpoint of a bert."""
    try:
        md = qc.read_header(path).get("__metadata__") or {}
    except ValueError as e:
        raise Refused(f"pre-trained file {shown(e, 200)}") from None
    where = shown(path, 80)
    for key in ("model_kind", "train_config"):
        if key not in md:
            raise Refused(f"{where}: metadata has no '{key}': not a checkpoint of train's "
                          f"pre-training (give another --out)")
    if md["model_kind"] != "bert":
        raise Refused(f"{where}: metadata 'model_kind' is '{shown(md['model_kind'])}', not "
                      f"'bert' (give another --out)")
    try:
        run = qc._parse_json(md["train_config"], f"{where}: metadata 'train_config'")
    except ValueError as e:
        raise Refused(shown(e, 200)) from None
    if not isinstance(run, dict):
        raise Refused(f"{where}: metadata 'train_config' is not a JSON object")
    for key in ("line_by_line", "group_by_length"):
        if not isinstance(run.get(key, False), bool):
            raise Refused(f"{where}: metadata 'train_config' key '{key}' is "
                          f"{shown(json.dumps(run[key]))}, not true or false")
    if not run.get("line_by_line"):
        return "windows"
    return "grouped-lines" if run.get("group_by_length") else "lines"


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors (an unknown flag, a flag without its value) are one line."""

    def error(self, message):
        self.exit(2, f"bert_packages: {shown(message, 120)} (--help lists the flags)\n")


def main():
    ap = OneLineParser(description=__doc__.split("\n")[0],
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--bin", default="build/rel-f32", help="the folder of train and bow_classify")
    ap.add_argument("--data", default="build/datasets/packages",
                    help="the set of make packages: pretrain.txt, train.tsv, valid.tsv, test.tsv")
    ap.add_argument("--out", default="runs/bert-packages", help="the folder every output goes to")
    ap.add_argument("--sizes", default="500,2000",
                    help="comma-separated numbers of labelled examples to fine-tune on")
    ap.add_argument("--seeds", default="1,2,3", help="comma-separated seeds, one run each")
    ap.add_argument("--pretrain-steps", default="4000",
                    help=f"pre-training steps (1 to 10^9); its warm-up is min({PRETRAIN_WARMUP}, "
                    "steps // 10) steps: 400 from 4,000 steps on, a tenth below (train's cosine "
                    "schedule warms up within the steps)")
    ap.add_argument("--finetune-epochs", default="20",
                    help="passes over the labelled examples (a number > 0); a fine-tune takes "
                    "max(50, epochs * examples / 32) steps of 32, a tenth of them warm-up")
    ap.add_argument("--threads", default="2", help="train's --threads (0: all cores)")
    ap.add_argument("--reading", default="windows",
                    help="windows, lines or grouped-lines: pre-train on windows of the text "
                    "(--no-line-by-line; 32 windows a batch, lr 1e-3), or one description a "
                    "sequence (--line-by-line; 128 lines a batch, lr 5e-4), grouped by length or "
                    "not (--group-by-length)")
    a = ap.parse_args()

    # Every flag, before any work.
    sizes = whole_numbers("--sizes", a.sizes, 1, 10**9, "500,2000")
    seeds = whole_numbers("--seeds", a.seeds, 0, 2**63 - 1, "1,2,3")
    pretrain_steps = whole_number("--pretrain-steps", a.pretrain_steps, 1, MAX_STEPS)
    epochs = epochs_of("--finetune-epochs", a.finetune_epochs)
    threads = str(whole_number("--threads", a.threads, 0, 1024))
    if a.reading not in ("windows", "lines", "grouped-lines"):
        raise Refused(f"--reading '{shown(a.reading)}': expected windows, lines or grouped-lines")
    for n in sizes:
        if finetune_steps(epochs, n) > MAX_STEPS:
            raise Refused(f"--finetune-epochs '{shown(a.finetune_epochs)}': makes "
                          f"{finetune_steps(epochs, n):.3g} fine-tuning steps at --sizes {n} "
                          f"(train takes at most 10^9)")

    # The programs, the inputs and every output, before any work.
    train = program(a.bin, "train")
    bow = program(a.bin, "bow_classify")
    output_dir(a.out)
    mlm = os.path.join(a.out, "mlm")
    mlm_file = os.path.join(mlm, "model.safetensors")
    output_dir(mlm, a.out)
    pretrained = os.path.lexists(mlm_file)
    if pretrained:
        have = reading_of(mlm_file)
        if have != a.reading:
            raise Refused(f"{shown(mlm_file, 80)} was pre-trained with --reading {have}, "
                          f"not {a.reading}: give another --out")
    else:
        output_file(mlm_file, a.out)  # train writes it: not a dangling link
        output_file(os.path.join(a.out, "mlm.log"), a.out)
        regular_input(os.path.join(a.data, "pretrain.txt"))
    train_tsv = regular_input(os.path.join(a.data, "train.tsv"))
    test = regular_input(os.path.join(a.data, "test.tsv"))
    valid = regular_input(os.path.join(a.data, "valid.tsv"))
    for n in sizes:
        for seed in seeds:
            output_file(os.path.join(a.out, f"train{n}_seed{seed}.tsv"), a.out)
            output_file(os.path.join(a.out, f"bow{n}_{seed}.log"), a.out)
            for kind in ("pretrained", "scratch"):
                d = os.path.join(a.out, f"{kind}{n}_seed{seed}")
                output_dir(d, a.out)
                output_file(d + ".log", a.out)
                output_file(d + ".test.log", a.out)
    output_file(os.path.join(a.out, "results.json"), a.out)
    try:
        lines = open(train_tsv, encoding="utf-8").read().splitlines()
    except UnicodeDecodeError as e:
        raise Refused(f"{shown(train_tsv, 80)}: not UTF-8 (byte {e.start})") from None
    if max(sizes) > len(lines):
        raise Refused(f"--sizes '{shown(a.sizes)}': {shown(train_tsv, 80)} has only "
                      f"{len(lines):,} examples, fewer than {max(sizes):,}")

    os.makedirs(a.out, exist_ok=True)
    results = {"command": " ".join(sys.argv), "rows": []}
    if not pretrained:
        # One description a sequence holds about 13 tokens, so its batch is
        # 128 lines (about as many tokens as 32 windows of 64), at a smaller
        # learning rate: with 32 lines at lr 1e-3 it learned no more than
        # the commonest token (docs/bert.md, "One description a sequence").
        reading = (["--no-line-by-line", "--batch", "32", "--lr", "1e-3"] if a.reading == "windows"
                   else ["--line-by-line", "--batch", "128", "--lr", "5e-4"])
        if a.reading == "grouped-lines":
            reading.append("--group-by-length")
        secs, out = run([train, "--model", "bert", "--objective", "mlm", "--format", "text",
                         "--data", os.path.join(a.data, "pretrain.txt"), "--tokens", "bpe",
                         *reading, "--bpe-vocab", "2048", *ARCH, "--context", "64",
                         "--steps", str(pretrain_steps),
                         "--warmup", str(pretrain_warmup(pretrain_steps)),
                         "--eval-every", "1000", "--threads", threads, "--out", mlm],
                        os.path.join(a.out, "mlm.log"))
        results["pretrain"] = {
            "seconds": round(secs),
            "masked_accuracy": number(r"^held-out masked-token accuracy: ([0-9.]+)%", out,
                                      "masked-token accuracy")}
        print(f"pre-trained in {secs:.0f} s: held-out masked-token accuracy "
              f"{results['pretrain']['masked_accuracy']}%", flush=True)
    for n in sizes:
        for seed in seeds:
            subset = write_subset(lines, n, seed, os.path.join(a.out, f"train{n}_seed{seed}.tsv"))
            steps = finetune_steps(epochs, n)
            row = {"examples": n, "seed": seed, "steps": steps}
            for kind, start in (("pretrained", ["--init-from", mlm_file]),
                                ("scratch", ["--model", "bert", "--tokenizer-from", mlm_file,
                                             *ARCH, "--context", "64"])):
                d = os.path.join(a.out, f"{kind}{n}_seed{seed}")
                secs, _ = run([train, *start, "--objective", "classify", "--data", subset,
                               "--valid", valid, "--batch", "32", "--steps", str(steps),
                               "--warmup", str(steps // 10), "--lr", "5e-4", "--seed", str(seed),
                               "--eval-every", "0", "--threads", threads, "--out", d],
                              d + ".log")
                _, out = run([train, "--load", os.path.join(d, "model.safetensors"), "--eval-only",
                              "--valid", test, "--threads", threads], d + ".test.log")
                row[kind] = number(r"^held-out accuracy: ([0-9.]+)%", out, "test accuracy")
                row[kind + "_seconds"] = round(secs)
            _, out = run([bow, "--train", train_tsv, "--test", test, "--train-limit",
                          str(n), "--seed", str(seed)], os.path.join(a.out, f"bow{n}_{seed}.log"))
            row["bow"] = 100 * number(r"^test accuracy ([0-9.]+)", out, "bag-of-words accuracy")
            row["majority"] = 100 * number(r"majority class '[^']*' ([0-9.]+)", out, "majority")
            results["rows"].append(row)
            print(json.dumps(row), flush=True)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    print("\n| examples | pre-trained BERT | BERT from scratch | bag of words | majority |")
    print("|---:|---|---|---|---:|")
    for n in sorted({r["examples"] for r in results["rows"]}):
        rs = [r for r in results["rows"] if r["examples"] == n]
        print(f"| {n:,} | {median_cell(rs, 'pretrained')} | {median_cell(rs, 'scratch')} | "
              f"{median_cell(rs, 'bow')} | {rs[0]['majority']:.1f}% |")


def cli():
    """main() with every refusal, and any file that cannot be read or
    written, as one line on stderr naming the flag or the file; exit status 1."""
    try:
        main()
    except Refused as e:
        sys.exit(f"bert_packages: {e}")
    except OSError as e:
        where = shown(e.filename, 80) if e.filename is not None else "a file"
        sys.exit(f"bert_packages: {where}: {e.strerror or shown(e, 120)}")


if __name__ == "__main__":
    cli()
