#!/usr/bin/env python3
"""Reads a safetensors file written by qkv with the standard library only
(json + struct: no torch, numpy or safetensors package) and prints one line
per tensor:

    <name> <dtype> <shape> first=<value> sum=<value>

then "ok: N tensors". Exits 1 with a message on anything malformed. This is
the independent check that other tools can read qkv checkpoints; the format is
described in tests/pytorch/st.py.

    python3 tests/pytorch/check_qkv_checkpoint.py model.safetensors
"""

import json
import struct
import sys

# dtype -> (struct code, bytes per element)
FORMATS = {"F32": ("f", 4), "F64": ("d", 8)}


def fail(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def main(argv):
    if len(argv) != 2:
        fail("usage: check_qkv_checkpoint.py FILE.safetensors")
    path = argv[1]
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        fail(f"{path}: shorter than 8 bytes")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        fail(f"{path}: header length {n} exceeds the file")
    if n % 8 != 0:
        fail(f"{path}: header length {n} is not a multiple of 8")
    header = json.loads(data[8 : 8 + n].decode("utf-8"))
    body = data[8 + n :]
    metadata = header.pop("__metadata__", None) or {}

    covered = 0
    for name in sorted(header):
        info = header[name]
        dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in FORMATS:
            fail(f"{path}: {name}: unexpected dtype {dtype}")
        code, size = FORMATS[dtype]
        count = 1
        for d in shape:
            count *= d
        if begin != covered:
            fail(f"{name}: data_offsets {begin} should be {covered} (sorted, back to back)")
        if end - begin != count * size or end > len(body):
            fail(f"{path}: {name}: data_offsets [{begin},{end}] do not fit shape {shape}")
        values = struct.unpack(f"<{count}{code}", body[begin:end])
        first = values[0] if values else "none"
        print(f"{name} {dtype} {tuple(shape)} first={first} sum={sum(values)}")
        covered = end
    if covered != len(body):
        fail(f"{path}: {len(body) - covered} bytes after the last tensor")
    for key in sorted(metadata):
        print(f"metadata {key}={metadata[key]}")
    print(f"ok: {len(header)} tensors")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
