#!/usr/bin/env python3
"""A synthetic key-value recall task whose answers lie far back in the
source, to measure what sparse and linear attention cost in quality
(docs/long-sequences.md, "Quality cost"; the design is argued in
datasets/retrieval/README.md).

A line is `source<TAB>target` in word tokens (`build/rel-f32/train --data
... --tokens word`). The source is SOURCE_LEN (128) tokens: the start marker
`^`, then lowercase filler words (a..p) among which the KEYS (8) key-value
pairs stand, each one word, the key's capital and its value digit (`C7`),
every key once, values drawn independently from 0..9. The target is the 8
values in key order A..H:

    ^ k c f Q7 ... (128 tokens) ...      ->   3 0 7 7 1 9 2 5
      (A3 somewhere, B0 somewhere, ..., H5 somewhere)

With `--model gpt` the model reads `source <s> target </s>`; the value of
key K is predicted at position SOURCE_LEN + index(K), so each target position
has one fixed key to find. The distance of an answer is that position minus
the pair's position.

Files (fixed seed, so the same files on every machine):
    train.tsv     TRAIN lines (30,000; 8.5 MB, not committed: written when
                  run), the pairs anywhere in positions 1..127
    dev_far.tsv   500 lines, every pair in positions 1..FAR_LAST (64): each
                  answer at distance 64 or more
    dev_near.tsv  500 lines, every pair in the last NEAR (24) positions
                  (104..127): each answer at distance 32 or less
    train_near.tsv  TRAIN lines (not committed), every pair in the last NEAR
                  positions as in dev_near: the control run's training set
No dev source is in either training file (checked while drawing).

Usage: python3 tools/make_retrieval_task.py [OUT_DIR] [--train N]
(default datasets/retrieval, 30000); standard library only.
"""
import os
import random
import sys

SEED = 26
SOURCE_LEN = 128
FILLER = list("abcdefghijklmnop")
KEYS = list("ABCDEFGH")
VALUES = list("0123456789")
FAR_LAST = 64
NEAR = 24
TRAIN = 30000
DEV = 500


def line(rng, first, last):
    """One (source, target): every pair at a position in [first, last]."""
    positions = rng.sample(range(first, last + 1), len(KEYS))
    values = [rng.choice(VALUES) for _ in KEYS]
    words = ["^"] + [rng.choice(FILLER) for _ in range(SOURCE_LEN - 1)]
    for p, key, value in zip(positions, KEYS, values):
        words[p] = key + value
    return " ".join(words), " ".join(values)


def draw(rng, n, first, last, seen):
    out = []
    while len(out) < n:
        s, t = line(rng, first, last)
        if s in seen:
            continue
        seen.add(s)
        out.append((s, t))
    return out


def main():
    args = sys.argv[1:]
    train_n = TRAIN
    if "--train" in args:
        i = args.index("--train")
        train_n = int(args[i + 1])
        del args[i:i + 2]
    out_dir = args[0] if args else os.path.join("datasets", "retrieval")
    rng = random.Random(SEED)
    seen = set()
    # The dev sets are drawn first, so --train N changes train.tsv only.
    far = draw(rng, DEV, 1, FAR_LAST, seen)
    near = draw(rng, DEV, SOURCE_LEN - NEAR, SOURCE_LEN - 1, seen)
    train = draw(rng, train_n, 1, SOURCE_LEN - 1, seen)
    # Drawn last, so adding it changed none of the files above.
    train_near = draw(rng, train_n, SOURCE_LEN - NEAR, SOURCE_LEN - 1, seen)
    os.makedirs(out_dir, exist_ok=True)
    for name, rows in (("dev_far.tsv", far), ("dev_near.tsv", near), ("train.tsv", train),
                       ("train_near.tsv", train_near)):
        with open(os.path.join(out_dir, name), "w", encoding="utf-8", newline="\n") as f:
            for s, t in rows:
                f.write(s + "\t" + t + "\n")
    print(f"wrote {out_dir}: train.tsv {len(train)}, dev_far.tsv {len(far)}, "
          f"dev_near.tsv {len(near)}, train_near.tsv {len(train_near)} lines")


if __name__ == "__main__":
    main()
