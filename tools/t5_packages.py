#!/usr/bin/env python3
"""Does span-corruption pre-training help? T5's way on Debian's package descriptions.

`make t5-experiment` runs it after `make packages` (datasets/make_packages.py).
The set and the subsets are BERT's (tools/bert_packages.py: the same seeds
shuffle train.tsv the same way), framed as T5 frames classification: the
description is the source text and the section's name the target text, so
the encoder-decoder answers with a word, scored right only when it is the
section exactly.

 1. pre-trains one encoder-decoder by span corruption (--objective span) on
    pretrain.txt (the training split's descriptions, no held-out source),
    BPE tokens learned from that text;
 2. for each size (500 and 2,000 labelled examples) and seed (1, 2, 3),
    fine-tunes on that many "description<TAB>section" pairs twice, with the
    same steps and settings:
      - pre-trained: --init-from the span model (every tensor; the same
        model, so nothing is fresh),
      - from scratch: --tokenizer-from the span model (the same tokens, every
        weight fresh);
 3. scores each on test.tsv once, at the end (--eval-only --valid test.tsv,
    greedy exact-sequence accuracy), beside BERT's classifier from the same
    subsets when runs/bert-packages/results.json is there.

Prints a Markdown table (docs/t5.md holds the one measured) and writes every
number to OUT/results.json.
"""
import argparse
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bert_packages import median_cell, number, run, write_subset  # noqa: E402

# Two encoder and two decoder layers of BERT's width: about BERT's 4 layers'
# parameters (a decoder layer adds cross-attention).
ARCH = ["--d-model", "128", "--heads", "4", "--layers", "2", "--d-ff", "512"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/rel-f32")
    ap.add_argument("--data", default="build/datasets/packages")
    ap.add_argument("--out", default="runs/t5-packages")
    ap.add_argument("--bert", default="runs/bert-packages/results.json")
    ap.add_argument("--sizes", default="500,2000")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--pretrain-steps", type=int, default=4000)
    ap.add_argument("--finetune-epochs", type=float, default=20)
    ap.add_argument("--flags", default="", help="more flags for every model, e.g. '--preset t5'")
    ap.add_argument("--threads", default="2")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    train = os.path.join(a.bin, "train")
    arch = ARCH + a.flags.split()
    results = {"command": " ".join(sys.argv), "rows": []}
    # The span model is kept and reused; its folder is named for the flags, so
    # that a run with other flags never fine-tunes from another architecture.
    span = os.path.join(a.out, "span" + "".join(
        "_" + re.sub(r"[^A-Za-z0-9.]+", "", f) for f in a.flags.split()))
    span_file = os.path.join(span, "model.safetensors")
    if not os.path.exists(span_file):
        secs, out = run([train, "--model", "seq2seq", "--objective", "span", "--format", "text",
                         "--data", os.path.join(a.data, "pretrain.txt"), "--tokens", "bpe",
                         "--bpe-vocab", "2048", *arch, "--context", "64", "--batch", "32",
                         "--steps", str(a.pretrain_steps), "--warmup", "400", "--lr", "1e-3",
                         "--eval-every", "1000", "--threads", a.threads, "--out", span],
                        os.path.join(a.out, "span.log"))
        results["pretrain"] = {
            "seconds": round(secs),
            "span_accuracy": number(r"^held-out span-target accuracy: ([0-9.]+)%", out,
                                    "span-target accuracy")}
        print(f"pre-trained in {secs:.0f} s: held-out span-target accuracy "
              f"{results['pretrain']['span_accuracy']}%", flush=True)
    bert = {}
    if os.path.exists(a.bert):
        for r in json.load(open(a.bert))["rows"]:
            bert[(r["examples"], r["seed"])] = r
    lines = open(os.path.join(a.data, "train.tsv"), encoding="utf-8").read().splitlines()
    test = os.path.join(a.data, "test.tsv")
    valid = os.path.join(a.data, "valid.tsv")
    for n in [int(x) for x in a.sizes.split(",")]:
        for seed in [int(x) for x in a.seeds.split(",")]:
            subset = write_subset(lines, n, seed,  # bert_packages.py's subsets
                                  os.path.join(a.out, f"train{n}_seed{seed}.tsv"))
            steps = max(50, round(a.finetune_epochs * n / 32))
            row = {"examples": n, "seed": seed, "steps": steps}
            for kind, start in (("pretrained", ["--init-from", span_file]),
                                ("scratch", ["--model", "seq2seq", "--tokenizer-from", span_file,
                                             *arch])):
                d = os.path.join(a.out, f"{kind}{n}_seed{seed}")
                t0 = time.time()
                run([train, *start, "--data", subset, "--valid", valid, "--batch", "32",
                     "--steps", str(steps), "--warmup", str(steps // 10), "--lr", "5e-4",
                     "--seed", str(seed), "--eval-every", "0", "--threads", a.threads,
                     "--out", d], d + ".log")
                _, out = run([train, "--load", os.path.join(d, "model.safetensors"), "--eval-only",
                              "--valid", test, "--threads", a.threads], d + ".test.log")
                row[kind] = number(r"^held-out exact-sequence accuracy: ([0-9.]+)%", out,
                                   "test accuracy")
                row[kind + "_seconds"] = round(time.time() - t0)
            if (n, seed) in bert:
                row["bert_pretrained"] = bert[(n, seed)]["pretrained"]
            results["rows"].append(row)
            print(json.dumps(row), flush=True)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    print("\n| examples | span-pre-trained T5 | T5 from scratch | pre-trained BERT |")
    print("|---:|---|---|---|")
    for n in sorted({r["examples"] for r in results["rows"]}):
        rs = [r for r in results["rows"] if r["examples"] == n]
        print(f"| {n:,} | {median_cell(rs, 'pretrained')} | {median_cell(rs, 'scratch')} | "
              f"{median_cell(rs, 'bert_pretrained')} |")


if __name__ == "__main__":
    main()
