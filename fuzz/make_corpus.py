#!/usr/bin/env python3
"""Writes the seed corpus of fuzz/fuzz_safetensors.cpp to fuzz/corpus/safetensors/.

Valid files cover every dtype the reader converts (F32, F64, F16, BF16), ranks
0 to 4, a zero-size tensor, metadata (including non-ASCII text and null),
non-finite values and header padding; the broken ones each hold one defect
the reader must refuse. Run from the repository root: python3 fuzz/make_corpus.py
"""
import json
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "safetensors")


def st(entries, metadata=None, pad=True, header_text=None):
    """entries: list of (name, dtype, shape, raw bytes); laid out back to back."""
    header, data, off = {}, b"", 0
    for name, dtype, shape, raw in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        data += raw
        off += len(raw)
    if metadata is not None:
        header["__metadata__"] = metadata
    text = header_text if header_text is not None else json.dumps(header, separators=(",", ":"), ensure_ascii=False)
    h = text.encode("utf-8")
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


def f32(*v): return struct.pack("<%df" % len(v), *v)
def f64(*v): return struct.pack("<%dd" % len(v), *v)
def f16(*v): return struct.pack("<%de" % len(v), *v)
def bf16(*v): return b"".join(struct.pack("<f", x)[2:] for x in v)


seeds = {
    # ---- valid ----
    "valid_f32_two.st": st([("a", "F32", [2], f32(1.5, -2)), ("b", "F32", [1, 2], f32(0.25, 4))]),
    "valid_all_dtypes.st": st([("d", "F64", [2, 2], f64(1, -2, 3.5, 1e-300)),
                               ("h", "F16", [3], f16(1, -0.5, 65504)),
                               ("k", "BF16", [2, 1], bf16(3.0, -1e30)),
                               ("w", "F32", [1, 2, 1, 2], f32(1, 2, 3, 4))],
                              metadata={"step": "12", "note": "tiny"}),
    "valid_scalar_empty.st": st([("s", "F32", [], f32(7)), ("z", "F32", [0, 3], b""),
                                 ("zz", "F64", [4, 0], b"")]),
    "valid_metadata_unicode.st": st([("x.y.z", "F32", [3], f32(0, 1, 2))],
                                    metadata={"name": "Ünïcødé ✓", "empty": "", "q": "\"quoted\""}),
    "valid_nonfinite.st": st([("n", "F32", [3], f32(float("nan"), float("inf"), -float("inf"))),
                              ("h", "F16", [2], f16(float("inf"), float("nan")))]),
    "valid_empty_header.st": st([]),
    "valid_metadata_only.st": st([], metadata={"format": "x"}),
    "valid_null_metadata.st": st([("a", "F16", [1], f16(2))], header_text=
                                 '{"a":{"dtype":"F16","shape":[1],"data_offsets":[0,2]},"__metadata__":null}'),
    "valid_unpadded.st": st([("a", "BF16", [2, 2], bf16(1, 2, 3, 4))], pad=False),
    # ---- broken ----
    "bad_truncated_data.st": st([("a", "F32", [4], f32(1, 2, 3, 4))])[:-3],
    "bad_overlap.st": st([], header_text='{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                                          '"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}') + f32(1, 2, 3),
    "bad_shape_overflow.st": st([], header_text='{"w":{"dtype":"F32","shape":[4294967296,4294967296,16],'
                                                 '"data_offsets":[0,8]}}') + f32(1, 2),
    "bad_zero_hides_overflow.st": st([], header_text='{"w":{"dtype":"F32","shape":[0,4294967296,4294967296,4294967296],'
                                                      '"data_offsets":[0,0]}}'),
    "bad_header_absurd.st": struct.pack("<Q", 2**64 - 1) + b"{}",
    "bad_duplicate.st": st([], header_text='{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                                            '"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}') + f32(1, 2),
    "bad_json.st": st([], header_text='{"a": {"dtype": '),
    "bad_deep.st": st([], header_text='{"a":' + "[" * 40 + "]" * 40 + "}"),
    "bad_dtype_i64.st": st([("i", "I64", [1], struct.pack("<q", 5))]),
    "bad_gap_tail.st": st([("a", "F32", [1], f32(1))]) + b"\0\0\0\0",
    "bad_metadata_number.st": st([], metadata={"step": 12}),
}

os.makedirs(OUT, exist_ok=True)
for name, data in sorted(seeds.items()):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
print("wrote %d seeds to %s" % (len(seeds), OUT))
