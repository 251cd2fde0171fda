#!/usr/bin/env python3
"""Reads and writes qkv model files and training checkpoints with the
standard library only (no numpy, torch or safetensors package). The format is
described in docs/checkpoint-format.md; in short:

    [8 bytes]  N, the header length, unsigned 64-bit little-endian
    [N bytes]  JSON header, padded with spaces to a multiple of 8
    [rest]     the tensors' F32 numbers, little-endian, back to back in name order

    tensors, metadata = read("runs/reverse/model.safetensors")
    shape, values = tensors["model.encoder.layers.0.self_attn.w_q.weight"]
    write("copy.safetensors", tensors, metadata)   # the same bytes qkv writes
    info = model_info("copy.safetensors")          # model_kind, model_config, vocab, ...

    python3 tools/qkv_checkpoint.py FILE           # prints keys, model and tensor shapes
"""

import array
import json
import math
import os
import struct
import sys

DEFAULT_SPECIAL_TOKENS = {"pad": 0, "bos": 1, "eos": 2}


def _load(path, with_data):
    """(header dict, data section bytes or None)."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError(f"{path}: {len(head)} bytes, too short for a safetensors file")
        (n,) = struct.unpack("<Q", head)
        if n > os.fstat(f.fileno()).st_size - 8:
            raise ValueError(f"{path}: header length {n} is beyond the end of the file")
        try:
            header = json.loads(f.read(n).decode("utf-8"))
        except ValueError as e:
            raise ValueError(f"{path}: the header is not valid JSON ({e})") from None
        if not isinstance(header, dict):
            raise ValueError(f"{path}: the header is not a JSON object")
        return header, f.read() if with_data else None


def read_header(path):
    """The JSON header alone (tensor entries and "__metadata__"): no tensor is read."""
    return _load(path, False)[0]


def read(path):
    """Returns (tensors: {name: (shape list, array.array('f'))}, metadata: {str: str})."""
    header, body = _load(path, True)
    metadata = header.pop("__metadata__", None) or {}
    tensors = {}
    for name, info in header.items():
        if info["dtype"] != "F32":
            raise ValueError(f"{path}: tensor '{name}' is {info['dtype']}; this reader takes F32 only")
        shape, (begin, end) = list(info["shape"]), info["data_offsets"]
        if not 0 <= begin <= end <= len(body) or end - begin != 4 * math.prod(shape):
            raise ValueError(f"{path}: tensor '{name}': data_offsets [{begin},{end}] do not fit shape {shape}")
        values = array.array("f")
        values.frombytes(body[begin:end])
        if sys.byteorder == "big":
            values.byteswap()
        tensors[name] = (shape, values)
    return tensors, metadata


def _output_target(path):
    """The file write(path) replaces, by qkv's rule for outputs
    (io/output_file.h): path itself when missing or a regular file; a symlink
    is written through to the regular file its chain ends at (at most 40
    links); a directory, device, FIFO, socket, dangling link or loop is
    refused with a ValueError naming path."""
    import stat  # here, so that the writer's rule stays in one place
    cur, seen = path, set()
    for hops in range(41):
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            if hops == 0:
                return cur
            raise ValueError(f"{path}: is a symlink to a missing file {cur}") from None
        if stat.S_ISREG(st.st_mode):
            return cur
        if stat.S_ISLNK(st.st_mode):
            if (st.st_dev, st.st_ino) in seen:
                raise ValueError(f"{path}: is a symlink loop ({cur} leads back to itself)")
            seen.add((st.st_dev, st.st_ino))
            cur = os.path.join(os.path.dirname(cur), os.readlink(cur))
            continue
        kinds = [(stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                 (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")]
        kind = next((k for test, k in kinds if test(st.st_mode)), "a special file")
        via = "is " if hops == 0 else f"is a symlink to {cur}, "
        raise ValueError(f"{path}: {via}{kind}, not a {'file path' if kind == 'a directory' else 'regular file'}")
    raise ValueError(f"{path}: is a chain of more than 40 symlinks")


def write(path, tensors, metadata=None):
    """Writes {name: (shape, numbers)} and {str: str} metadata as qkv does:
    names in sorted order, F32, the header as compact ASCII JSON (each entry's
    keys dtype, shape, data_offsets; the metadata keys sorted) padded with
    spaces to a multiple of 8 bytes. The file is replaced atomically; a
    symlink is written through and a device or FIFO refused, as qkv does
    (_output_target)."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):  # code-point order = the UTF-8 byte order qkv sorts by
        shape, numbers = tensors[name]
        values = array.array("f", numbers)
        if len(values) != math.prod(shape):
            raise ValueError(f"{path}: tensor '{name}' has {len(values)} numbers, shape {list(shape)} needs {math.prod(shape)}")
        if sys.byteorder == "big":
            values.byteswap()
        blobs.append(values.tobytes())
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + len(blobs[-1])]}
        offset += len(blobs[-1])
    if metadata:
        if not all(isinstance(v, str) for v in metadata.values()):
            raise TypeError(f"{path}: every metadata value must be a string (JSON as json.dumps(...))")
        header["__metadata__"] = {k: metadata[k] for k in sorted(metadata)}
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    text += b" " * (-len(text) % 8)
    target = _output_target(path)
    tmp = f"{target}.tmp.{os.getpid()}"
    try:
        with open(tmp, "xb") as f:
            f.write(struct.pack("<Q", len(text)) + text)
            for blob in blobs:
                f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        if _output_target(path) != target:  # checked again: the path changed meanwhile
            raise ValueError(f"{path}: changed while it was written; not written")
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _json_key(metadata, key, path):
    try:
        return json.loads(metadata[key])
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: metadata '{key}' is not valid JSON ({e})") from None


def model_info(path):
    """The model a file describes: {"model_kind", "model_config", "model_prefix",
    "vocab" (list or None), "special_tokens", "tokenizer" (or None)}. Raises
    ValueError naming the file and the key when a part is missing or disagrees."""
    md = read_header(path).get("__metadata__") or {}
    for key in ("model_kind", "model_config"):
        if key not in md:
            raise ValueError(f"{path}: metadata has no '{key}'")
    kind, config = md["model_kind"], _json_key(md, "model_config", path)
    if kind not in ("seq2seq", "gpt"):
        raise ValueError(f"{path}: metadata 'model_kind' is '{kind}' (expected seq2seq or gpt)")
    if not isinstance(config, dict):
        raise ValueError(f"{path}: metadata 'model_config' is not a JSON object")
    vocab = _json_key(md, "vocab", path) if "vocab" in md else None
    if vocab is not None and not (isinstance(vocab, list) and all(isinstance(t, str) for t in vocab)):
        raise ValueError(f"{path}: metadata 'vocab' is not a JSON list of strings")
    sizes = ["vocab"] if kind == "gpt" else ["src_vocab", "tgt_vocab"]  # one list for source and target
    if vocab is not None and any(config.get(k) != len(vocab) for k in sizes):
        got = ", ".join(f"{k} {config.get(k)}" for k in sizes)
        raise ValueError(f"{path}: metadata 'vocab' has {len(vocab)} tokens but model_config has {got}")
    special = _json_key(md, "special_tokens", path) if "special_tokens" in md else dict(DEFAULT_SPECIAL_TOKENS)
    return {"model_kind": kind, "model_config": config, "model_prefix": md.get("model_prefix", ""),
            "vocab": vocab, "special_tokens": special, "tokenizer": md.get("tokenizer")}


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: python3 tools/qkv_checkpoint.py FILE.safetensors")
    header = read_header(argv[1])
    md = header.pop("__metadata__", None) or {}
    print(f"{argv[1]}: {len(header)} tensors, {sum(math.prod(e['shape']) for e in header.values())} numbers")
    print("metadata keys:", " ".join(sorted(md)) or "(none)")
    if "format" in md:
        print("format:", md["format"], " step:", md.get("step", "?"))
    if "model_kind" in md:
        info = model_info(argv[1])
        vocab = info["vocab"]
        print("model_kind:", info["model_kind"])
        print("model_config:", json.dumps(info["model_config"], sort_keys=True))
        print("vocab:", "(none)" if vocab is None else f"{len(vocab)} tokens {vocab[:12]}{' ...' * (len(vocab) > 12)}")
        print("special_tokens:", json.dumps(info["special_tokens"]), " tokenizer:", info["tokenizer"] or "(none)")
    for name in sorted(header):
        print(f"  {name:<52} {header[name]['dtype']} {header[name]['shape']}")


if __name__ == "__main__":
    try:
        main(sys.argv)
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
