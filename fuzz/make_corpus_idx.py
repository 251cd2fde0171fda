#!/usr/bin/env python3
"""Writes the seed corpus of fuzz/fuzz_idx.cpp to fuzz/corpus/idx/.

Valid IDX files (1-d labels, 3-d images, a dim of 0), raw and gzip-compressed,
and one broken file per defect read_idx refuses: a bad magic, another element
type, no dims, a header cut short, data short and long, a corrupt gzip stream.
The gzip files carry no name and mtime 0, so the bytes are the same every run.
Run from the repository root: python3 fuzz/make_corpus_idx.py
"""
import gzip
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "idx")


def idx(dims, data, kind=0x08):
    return bytes([0, 0, kind, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + data


def gz(b):
    return gzip.compress(b, mtime=0)


labels = idx([5], bytes([3, 1, 4, 1, 5]))
images = idx([2, 3, 4], bytes(range(24)))
seeds = {
    "labels.idx": labels,
    "images.idx": images,
    "labels.idx.gz": gz(labels),
    "images.idx.gz": gz(images),
    "empty.idx": idx([0, 28, 28], b""),
    "bad_magic.idx": b"\x01\x02\x08\x01" + struct.pack(">I", 1) + b"\x00",
    "float_type.idx": idx([1], b"\x00\x00\x80\x3f", kind=0x0D),
    "no_dims.idx": bytes([0, 0, 8, 0]),
    "cut_header.idx": idx([2, 3], b"")[:6],
    "short_data.idx.gz": gz(idx([2, 3], bytes(5))),
    "long_data.idx": idx([2, 3], bytes(7)),
    "huge_dims.idx": idx([0xFFFFFFFF, 0xFFFFFFFF], b""),
}
corrupt = bytearray(gz(images))
for i in range(10, len(corrupt) - 8):
    corrupt[i] ^= 0x55
seeds["corrupt.idx.gz"] = bytes(corrupt)

os.makedirs(OUT, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
print("wrote %d seeds to %s" % (len(seeds), OUT))
