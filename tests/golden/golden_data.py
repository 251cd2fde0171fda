#!/usr/bin/env python3
"""The input data of the golden set of 20e1205 (tests/golden/make_golden.sh).

    golden_data.py OUT_DIR

writes into OUT_DIR the small files the set's runs train on; the training
checkpoints name them (by their hash), so they are committed beside the
golden files, and resuming a checkpoint reads these very bytes:

    corpus.txt     text (--format text): gpt, llama, bert's mlm, t5's span
    pairs.tsv      source<TAB>target, the target the source's words reversed
    tags.tsv       words<TAB>one tag per word (the encoder: a label per token)
    classify.tsv   text<TAB>label (bert's classify)
    images/        8x8 images of four patterns, IDX files as MNIST's (vit)

Everything comes from a fixed linear congruential stream, not from Python's
random module, so the bytes depend on nothing but this file.
"""
import os
import struct
import sys


class Stream:
    """Numerical Recipes' 32-bit LCG: the same numbers on every Python."""

    def __init__(self, seed):
        self.x = seed & 0xFFFFFFFF

    def next(self, n):
        self.x = (1664525 * self.x + 1013904223) & 0xFFFFFFFF
        return (self.x >> 8) % n


ADJ = ["red", "small", "quick", "old", "good", "bad"]
NOUN = ["cat", "dog", "bird", "tree", "house"]
VERB = ["runs", "sees", "eats", "sits"]
TAG = {**{w: "A" for w in ADJ}, **{w: "N" for w in NOUN}, **{w: "V" for w in VERB}}


def sentence(s):
    """'adj? noun verb adj? noun' as a list of words."""
    words = []
    if s.next(2):
        words.append(ADJ[s.next(len(ADJ))])
    words.append(NOUN[s.next(len(NOUN))])
    words.append(VERB[s.next(len(VERB))])
    if s.next(2):
        words.append(ADJ[s.next(len(ADJ))])
    words.append(NOUN[s.next(len(NOUN))])
    return words


def write(path, text):
    with open(path, "w", encoding="ascii", newline="\n") as f:
        f.write(text)


def idx(path, magic, dims, payload):
    with open(path, "wb") as f:
        f.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims))
        f.write(bytes(payload))


def images(out, n=32, side=8):
    """Four classes (a row, a column, the diagonal, a frame) in noise."""
    s = Stream(4)
    pixels, labels = [], []
    for i in range(n):
        label = i % 4
        at = 1 + s.next(side - 2)
        for r in range(side):
            for c in range(side):
                on = (label == 0 and r == at) or (label == 1 and c == at) or \
                     (label == 2 and r == c) or \
                     (label == 3 and (r in (1, side - 2) or c in (1, side - 2)))
                pixels.append(200 + s.next(56) if on else s.next(60))
        labels.append(label)
    os.makedirs(os.path.join(out, "images"), exist_ok=True)
    idx(os.path.join(out, "images", "train-images-idx3-ubyte"), 0x803, [n, side, side], pixels)
    idx(os.path.join(out, "images", "train-labels-idx1-ubyte"), 0x801, [n], labels)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: golden_data.py OUT_DIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    s = Stream(1)
    write(os.path.join(out, "corpus.txt"),
          "".join(" ".join(sentence(s)) + ".\n" for _ in range(60)))
    pairs, tags, classify = [], [], []
    for _ in range(48):
        w = sentence(s)
        pairs.append(" ".join(w) + "\t" + " ".join(reversed(w)))
        tags.append(" ".join(w) + "\t" + " ".join(TAG[x] for x in w))
    for i in range(48):
        w = sentence(s)
        w.insert(0, "good" if i % 2 else "bad")
        classify.append(" ".join(w) + "\t" + ("pos" if i % 2 else "neg"))
    write(os.path.join(out, "pairs.tsv"), "\n".join(pairs) + "\n")
    write(os.path.join(out, "tags.tsv"), "\n".join(tags) + "\n")
    write(os.path.join(out, "classify.tsv"), "\n".join(classify) + "\n")
    images(out)


if __name__ == "__main__":
    main()
