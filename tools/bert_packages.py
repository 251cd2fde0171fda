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
"""
import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time

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


def reading_of(path):
    """The --reading a pre-trained file was made with, from its train_config."""
    with open(path, "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    run = json.loads(header["__metadata__"]["train_config"])
    if not run.get("line_by_line"):
        return "windows"
    return "grouped-lines" if run.get("group_by_length") else "lines"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/rel-f32")
    ap.add_argument("--data", default="build/datasets/packages")
    ap.add_argument("--out", default="runs/bert-packages")
    ap.add_argument("--sizes", default="500,2000")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--pretrain-steps", type=int, default=4000)
    ap.add_argument("--finetune-epochs", type=float, default=20)
    ap.add_argument("--threads", default="2")
    ap.add_argument("--reading", choices=["windows", "lines", "grouped-lines"], default="windows",
                    help="pre-train on windows of the text (--no-line-by-line; 32 windows a "
                    "batch, lr 1e-3), or one description a sequence (--line-by-line; 128 "
                    "lines a batch, lr 5e-4), grouped by length or not (--group-by-length)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    train = os.path.join(a.bin, "train")
    results = {"command": " ".join(sys.argv), "rows": []}
    mlm = os.path.join(a.out, "mlm")
    mlm_file = os.path.join(mlm, "model.safetensors")
    have = reading_of(mlm_file) if os.path.exists(mlm_file) else a.reading
    if have != a.reading:
        sys.exit(f"bert_packages: {mlm_file} was pre-trained with --reading {have}, "
                 f"not {a.reading}: give another --out")
    if not os.path.exists(mlm_file):
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
                         "--steps", str(a.pretrain_steps), "--warmup", "400",
                         "--eval-every", "1000", "--threads", a.threads, "--out", mlm],
                        os.path.join(a.out, "mlm.log"))
        results["pretrain"] = {
            "seconds": round(secs),
            "masked_accuracy": number(r"^held-out masked-token accuracy: ([0-9.]+)%", out,
                                      "masked-token accuracy")}
        print(f"pre-trained in {secs:.0f} s: held-out masked-token accuracy "
              f"{results['pretrain']['masked_accuracy']}%", flush=True)
    lines = open(os.path.join(a.data, "train.tsv"), encoding="utf-8").read().splitlines()
    test = os.path.join(a.data, "test.tsv")
    valid = os.path.join(a.data, "valid.tsv")
    for n in [int(x) for x in a.sizes.split(",")]:
        for seed in [int(x) for x in a.seeds.split(",")]:
            subset = write_subset(lines, n, seed, os.path.join(a.out, f"train{n}_seed{seed}.tsv"))
            steps = max(50, round(a.finetune_epochs * n / 32))
            row = {"examples": n, "seed": seed, "steps": steps}
            for kind, start in (("pretrained", ["--init-from", mlm_file]),
                                ("scratch", ["--model", "bert", "--tokenizer-from", mlm_file,
                                             *ARCH, "--context", "64"])):
                d = os.path.join(a.out, f"{kind}{n}_seed{seed}")
                secs, _ = run([train, *start, "--objective", "classify", "--data", subset,
                               "--valid", valid, "--batch", "32", "--steps", str(steps),
                               "--warmup", str(steps // 10), "--lr", "5e-4", "--seed", str(seed),
                               "--eval-every", "0", "--threads", a.threads, "--out", d],
                              d + ".log")
                _, out = run([train, "--load", os.path.join(d, "model.safetensors"), "--eval-only",
                              "--valid", test, "--threads", a.threads], d + ".test.log")
                row[kind] = number(r"^held-out accuracy: ([0-9.]+)%", out, "test accuracy")
                row[kind + "_seconds"] = round(secs)
            _, out = run([os.path.join(a.bin, "bow_classify"), "--train",
                          os.path.join(a.data, "train.tsv"), "--test", test, "--train-limit",
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


if __name__ == "__main__":
    main()
