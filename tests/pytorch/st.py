"""Minimal safetensors reader/writer (numpy only, no pip package needed).

File layout (https://github.com/huggingface/safetensors, "format" section):

    [8 bytes]  N = header length, unsigned 64-bit little-endian
    [N bytes]  JSON header, UTF-8, padded with spaces to a multiple of 8:
                 {"<name>": {"dtype": "F32", "shape": [..],
                             "data_offsets": [begin, end]},
                  ...,
                  "__metadata__": {"<key>": "<string value>", ...}}
    [rest]     raw tensor bytes, little-endian, C order; data_offsets are
               relative to the first byte after the header.

The writer lays tensors out in sorted name order, back to back, so the file is
byte-for-byte deterministic for the same inputs. qkv fixtures only use F32, but
the reader also understands a few other common dtypes.
"""

import json
import struct

import numpy as np

# safetensors dtype string <-> numpy little-endian dtype
_DTYPES = {
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
    "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "U8": np.dtype("u1"),
}
_NAMES = {v: k for k, v in _DTYPES.items()}


def save_file(tensors, path, metadata=None):
    """Write {name: array} to `path`.

    Arrays are stored with their own dtype, which must be one of _DTYPES
    (callers in this directory always pass float32). `metadata` maps str to
    str; non-string values are converted with str().
    """
    header = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name])
        dt = arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype
        if dt not in _NAMES:
            raise TypeError(f"{name}: unsupported dtype {arr.dtype}")
        raw = arr.astype(dt, copy=False).tobytes(order="C")
        header[name] = {
            "dtype": _NAMES[dt],
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}

    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # pad to a multiple of 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def load_file(path):
    """Read a safetensors file. Returns (tensors: {name: np.ndarray}, metadata: dict)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"{path}: header length {n} exceeds file size")
    header = json.loads(data[8 : 8 + n].decode("utf-8"))
    body = data[8 + n :]

    metadata = header.pop("__metadata__", {}) or {}
    tensors = {}
    for name, info in header.items():
        dt = _DTYPES[info["dtype"]]
        begin, end = info["data_offsets"]
        shape = tuple(info["shape"])
        count = int(np.prod(shape)) if shape else 1
        if end - begin != count * dt.itemsize or end > len(body):
            raise ValueError(f"{path}: bad data_offsets for {name}")
        tensors[name] = np.frombuffer(body[begin:end], dtype=dt).reshape(shape).copy()
    return tensors, metadata
