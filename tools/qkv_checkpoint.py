#!/usr/bin/env python3
"""Reads and writes qkv model files and training checkpoints with the
standard library only (no numpy, torch or safetensors package). The format is
described in docs/checkpoint-format.md; in short:

    [8 bytes]  N, the header length, unsigned 64-bit little-endian
    [N bytes]  JSON header, padded with spaces to a multiple of 8
    [rest]     the tensors' F32 numbers, little-endian, back to back in name order

    (read() also takes F64 tensors, as array('d'); any other dtype is refused.
    Every fault of a file is a ValueError naming the file and the tensor or
    key; on the command line, one "error:" line and exit status 1.)

    tensors, metadata = read("runs/reverse/model.safetensors")
    shape, values = tensors["model.encoder.layers.0.self_attn.w_q.weight"]
    write("copy.safetensors", tensors, metadata)   # the same bytes qkv writes
    info = model_info("copy.safetensors")          # model_kind, model_config, vocab, ...

    python3 tools/qkv_checkpoint.py FILE           # prints keys, model and tensor shapes
    python3 tools/qkv_checkpoint.py --help         # what it checks, and what it does not

model_info() (and so the command line) refuses what qkv's loader and the
trainer refuse of a model file: model_config read strictly, its sizes
against the tensors, the tensors exactly the model's, a 'labels' key outside
a classifier, ... (HELP lists them, and what is left to train --load); the
command line also refuses a non-finite weight.
"""

import array
import json
import math
import os
import stat
import struct
import sys

DEFAULT_SPECIAL_TOKENS = {"pad": 0, "bos": 1, "eos": 2}


# The bytes per element of each safetensors dtype; read() converts F32 and F64.
DTYPE_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
               "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
READ_TYPECODES = {"F32": "f", "F64": "d"}  # array.array typecodes
MAX_RANK = 8  # qkv's kMaxRank


def brief(value):
    """`value` as an error message quotes it, by qkv's rule (brief() in
    core/error.h): a control character or a byte that is not UTF-8 shows as
    \\xNN, and a value longer than about 60 bytes is cut there, at a character
    boundary, followed by "... (N bytes)"."""
    if isinstance(value, bytes):
        data = value
    else:  # a lone surrogate (JSON's "\\ud800") is not UTF-8; one from a path stands for its byte
        data = b"".join(bytes([ord(c) - 0xDC00]) if 0xDC80 <= ord(c) <= 0xDCFF
                        else c.encode("utf-8", "surrogatepass") for c in str(value))
    out, size, i = [], 0, 0
    while i < len(data) and size < 60:
        c = data[i]
        n = 1 if c < 0x80 else 2 if 0xC2 <= c <= 0xDF else 3 if 0xE0 <= c <= 0xEF else 4 if 0xF0 <= c <= 0xF4 else 0
        try:
            ch = data[i:i + n].decode("utf-8") if n else None
        except UnicodeDecodeError:
            ch = None
        if ch is None or ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0:
            out.append(f"\\x{c:02x}")
            size, i = size + 4, i + 1
        else:
            out.append(ch)
            size, i = size + n, i + n
    text = "".join(out)
    return text if i >= len(data) else f"{text}... ({len(data)} bytes)"


def _unique_keys(pairs):
    """A JSON object's keys, refusing one that appears twice (json.loads keeps the last)."""
    obj = {}
    for k, v in pairs:
        if k in obj:
            raise ValueError(f"has the key '{brief(k)}' twice in one object (which one is meant?)")
        obj[k] = v
    return obj


def _no_constant(name):
    """NaN, Infinity and -Infinity: Python's json reads them, JSON (and qkv's reader) does not."""
    raise ValueError(f"holds {name}, which is not JSON (a number is finite)")


def _parse_json(text, where):
    """One JSON value from `text`, or ValueError "<where> is not valid JSON (...)"."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where} is not valid JSON ({e.msg} at character {e.pos})") from None
    except ValueError as e:
        raise ValueError(f"{where} {e}") from None
    except RecursionError:
        raise ValueError(f"{where} nests lists or objects too deeply") from None


def _open_regular(path):
    """The file at `path`, opened for reading, refused unless it is a regular
    file: it is opened without blocking (a FIFO would wait for a writer) and
    checked before a byte is read."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{brief(path)}: not a regular file (a FIFO, device or directory)")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _entry(path, name, info, data_size):
    """A tensor's header entry, checked as qkv's reader checks it: (dtype, shape, begin, end)."""
    where = f"{brief(path)}: tensor '{brief(name)}'"
    if not name:
        raise ValueError(f"{brief(path)}: a tensor has an empty name")
    if not isinstance(info, dict):
        raise ValueError(f"{where}: entry is not an object")
    for field in ("dtype", "shape", "data_offsets"):
        if field not in info:
            raise ValueError(f"{where}: entry has no '{field}'")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_SIZES:
        raise ValueError(f"{where}: unknown dtype '{brief(dtype)}'")
    if (not isinstance(shape, list) or len(shape) > MAX_RANK
            or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**63 for d in shape)):
        raise ValueError(f"{where}: shape {brief(json.dumps(shape))} is not a list of at most {MAX_RANK} non-negative integers")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)):
        raise ValueError(f"{where}: data_offsets {brief(json.dumps(offsets))} is not [begin, end] of non-negative integers")
    begin, end = offsets
    if not begin <= end <= data_size:
        raise ValueError(f"{where}: data_offsets [{begin}, {end}] are not within the data section ({data_size} bytes)")
    need = DTYPE_SIZES[dtype] * math.prod(shape)
    if end - begin != need:
        raise ValueError(f"{where}: data_offsets [{begin}, {end}] hold {end - begin} bytes but {dtype} {shape} needs {need}")
    return dtype, shape, begin, end


def _load(path, with_data):
    """(header dict with every tensor entry checked, data section bytes or None).
    Raises ValueError naming the file (and the tensor or key) on any fault."""
    with _open_regular(path) as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError(f"{brief(path)}: {len(head)} bytes, too short for a safetensors file")
        (n,) = struct.unpack("<Q", head)
        size = os.fstat(f.fileno()).st_size
        if n > size - 8:
            raise ValueError(f"{brief(path)}: header length {n} is beyond the end of the file ({size} bytes)")
        try:
            text = f.read(n).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"{brief(path)}: the header is not UTF-8 (byte {e.start})") from None
        header = _parse_json(text, f"{brief(path)}: the header")
        if not isinstance(header, dict):
            raise ValueError(f"{brief(path)}: the header is not a JSON object")
        metadata = header.get("__metadata__")
        if metadata is not None and not (isinstance(metadata, dict)
                                         and all(isinstance(v, str) for v in metadata.values())):
            raise ValueError(f"{brief(path)}: __metadata__ is not an object of strings")
        data_size = size - 8 - n
        entries = {name: _entry(path, name, info, data_size) for name, info in header.items() if name != "__metadata__"}
        # The ranges tile the data section: no overlap, no gap, no tail.
        cursor, prev = 0, None
        for name, (_, _, begin, end) in sorted(entries.items(), key=lambda e: (e[1][2], e[1][3], e[0])):
            if begin != cursor:
                what = "overlap with" if begin < cursor else "leave a gap after"
                other = f"tensor '{brief(prev)}'" if prev is not None else "the header"
                raise ValueError(f"{brief(path)}: tensor '{brief(name)}': data_offsets [{begin}, {end}] {what} {other}")
            cursor, prev = end, name
        if cursor != data_size:
            raise ValueError(f"{brief(path)}: {data_size - cursor} bytes after the last tensor belong to no tensor")
        return header, f.read() if with_data else None


def read_header(path):
    """The JSON header alone (tensor entries and "__metadata__"), every entry
    checked: no tensor is read."""
    return _load(path, False)[0]


def read(path):
    """Returns (tensors: {name: (shape list, array.array)}, metadata: {str: str}).
    F32 tensors come as array('f'), F64 as array('d'); a file holding another
    dtype (F16, BF16, integers) is refused naming the tensor. write() writes F32."""
    header, body = _load(path, True)
    metadata = header.pop("__metadata__", None) or {}
    tensors = {name: _tensor(path, name, info, body) for name, info in header.items()}
    return tensors, metadata


def read_tensors(path, names):
    """As read(), the tensors `names` alone (every entry of the header checked)."""
    header, body = _load(path, True)
    out = {name: _tensor(path, name, header[name], body) for name in names}
    return out, header.get("__metadata__") or {}


def _tensor(path, name, info, body):
    """(shape, values) of one header entry, F32 or F64, in this machine's byte order."""
    dtype, shape, begin, end = _entry(path, name, info, len(body))
    if dtype not in READ_TYPECODES:
        raise ValueError(f"{brief(path)}: tensor '{brief(name)}' is {dtype}; this reader takes F32 and F64 only")
    values = array.array(READ_TYPECODES[dtype])
    values.frombytes(body[begin:end])
    if sys.byteorder == "big":
        values.byteswap()
    return shape, values


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
    return _parse_json(metadata[key], f"{brief(path)}: metadata '{brief(key)}'")


# Each family's vocabulary-sized keys in model_config: one token list serves them all.
# The vit reads pixels, not tokens: it has none.
VOCAB_KEYS = {"seq2seq": ["src_vocab", "tgt_vocab"], "gpt": ["vocab"], "encoder": ["vocab"],
              "bert": ["vocab"], "vit": []}


def _gpt2_bytes_to_unicode():
    """GPT-2's byte -> character table: '!'..'~', 0xA1..0xAC and 0xAE..0xFF
    keep their number; the other 68 bytes take U+0100, U+0101, ... in order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, n = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


BYTE_TO_CHAR = _gpt2_bytes_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


def visible(token_bytes):
    """A BPE token's bytes as its `vocab` entry (GPT-2's mapping, one character a byte)."""
    return "".join(BYTE_TO_CHAR[b] for b in token_bytes)


def bytes_of(entry):
    """A BPE `vocab` entry back to its bytes (the inverse of visible)."""
    return bytes(CHAR_TO_BYTE[c] for c in entry)


# The most bytes bpe_token_bytes() expands a file's merges to: merges that
# double a token each time would otherwise ask for 2^(merges) bytes.
MAX_BPE_BYTES = 1 << 30


def bpe_token_lengths(bpe, where):
    """The byte length of each BPE token from metadata 'bpe' ({"pattern",
    "merges"}), counted without building a token: 0..255 one byte each,
    256 + k the sum of merge k's pair (capped at 2^62). Every merge is checked
    to name two tokens made before it."""
    if not (isinstance(bpe, dict) and isinstance(bpe.get("pattern"), str) and isinstance(bpe.get("merges"), list)):
        raise ValueError(f"{where}: expected {{\"pattern\": a string, \"merges\": a list of [a, b] pairs}}")
    lengths = [1] * 256
    for k, m in enumerate(bpe["merges"]):
        ok = isinstance(m, list) and len(m) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in m)
        if not ok or not all(0 <= x < len(lengths) for x in m):
            raise ValueError(f"{where}: merge {k} is {brief(json.dumps(m))}, not a pair of tokens made before token {256 + k}")
        lengths.append(min(lengths[m[0]] + lengths[m[1]], 1 << 62))
    return lengths


def bpe_token_bytes(bpe, where, max_bytes=MAX_BPE_BYTES):
    """The bytes of each BPE token from metadata 'bpe' ({"pattern", "merges"}):
    0..255 the bytes, 256 + k the concatenation of merge k's pair. Refused
    (ValueError naming `where`) when the tokens would hold more than
    `max_bytes` bytes in all, before any is built."""
    total = sum(bpe_token_lengths(bpe, where))
    if total > max_bytes:
        raise ValueError(f"{where}: the merges make tokens of {total} bytes in all, more than "
                         f"{max_bytes} (a merge that doubles a token each time?)")
    tokens = [bytes([b]) for b in range(256)]
    for a, b in bpe["merges"]:
        tokens.append(tokens[a] + tokens[b])
    return tokens


# The block's model_config keys every family shares, as docs/checkpoint-format.md
# lists them: the values each may take, and the default of a file written
# before the key existed (None: the key is required).
BLOCK_KEYS = {
    "activation": (("relu", "gelu", "swiglu"), None),
    "norm": (("layer", "rms"), "layer"),
    "bias": ((True, False), True),
}


def swiglu_hidden(d_ff):
    """SwiGLU's hidden width for a block of d_ff: int(2 d_ff / 3) rounded up to
    a multiple of 8 (nn::swiglu_hidden)."""
    return (max(2 * d_ff // 3, 1) + 7) // 8 * 8


def block(config, where="model_config"):
    """{"activation", "norm", "bias"} of a model_config, the defaults filled in
    for keys an older file lacks. Raises ValueError naming the key for a value
    the page does not list."""
    out = {}
    for key, (choices, default) in BLOCK_KEYS.items():
        if key not in config:
            if default is None:
                raise ValueError(f"{where}: missing key '{key}'")
            out[key] = default
            continue
        value = config[key]
        if not any(value is c if isinstance(c, bool) else (isinstance(value, str) and value == c)
                   for c in choices):
            listed = ", ".join(json.dumps(c) for c in choices)
            raise ValueError(f"{where}: key '{key}' is {brief(json.dumps(value))} (expected {listed})")
        out[key] = value
    return out


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


# What each family reads instead of rotary positions: its loader refuses
# rope_base, as the C++ loader does (checkpoint/config_json.h).
NO_ROPE = {
    "seq2seq": "a seq2seq adds a position table or T5's relative bias",
    "encoder": "an encoder adds sinusoidal positions or T5's relative bias",
    "bert": "a bert reads learned positions",
    "vit": "a vit's patches read a learned position table",
}


def attention_keys(config, kind, tensor_names, where="model_config"):
    """{"kv_heads", "rope_base", "rel_buckets", "rel_max_distance"} of a model_config, as docs/checkpoint-format.md
    lists them: kv_heads (grouped-query attention's key/value heads, an integer
    >= 1 dividing heads; absent: every head, returned as heads) and rope_base
    (rotary positions' base, a number in (1, 1e9]; absent: 0, no rotation).
    A family other than gpt refuses rope_base (NO_ROPE).
    A gpt with rope_base has no position table: its tensor `pos_embed.weight`
    (under the file's prefix, among tensor_names) is refused. rel_buckets
    (T5's relative position bias: an even integer >= 4; absent: 0, none) and
    rel_max_distance (an integer above rel_buckets / 2, at most 2^30; absent:
    128): each stack's table `rel_bias` (heads, rel_buckets); a bert or a vit
    refuses them. Raises ValueError naming the key."""
    heads = config.get("heads")
    kv = config.get("kv_heads", heads)
    if "kv_heads" in config and not (_is_int(kv) and kv >= 1 and _is_int(heads) and heads % kv == 0):
        raise ValueError(f"{where}: key 'kv_heads' is {brief(json.dumps(kv))}: "
                         f"must be an integer dividing 'heads' {brief(json.dumps(heads))}")
    base = config.get("rope_base", 0)
    if "rope_base" in config and not (isinstance(base, (int, float)) and not isinstance(base, bool)
                                      and 1 < base <= 1e9):
        raise ValueError(f"{where}: key 'rope_base' is {brief(json.dumps(base))}: must be a number in (1, 1e9]")
    if base and kind in NO_ROPE:
        raise ValueError(f"{where}: key 'rope_base' is {brief(json.dumps(base))}: {NO_ROPE[kind]}; "
                         f"rotary positions are a gpt's (leave the key out)")
    if base and kind == "gpt":
        table = [n for n in tensor_names if n.endswith("pos_embed.weight")]
        if table:
            raise ValueError(f"{where}: key 'rope_base' is {brief(json.dumps(base))} (rotary positions), "
                             f"but the file has a position table '{brief(table[0])}'")
    rel = config.get("rel_buckets", 0)
    dist = config.get("rel_max_distance", 128)
    if "rel_buckets" in config and not (_is_int(rel) and rel >= 4 and rel % 2 == 0):
        raise ValueError(f"{where}: key 'rel_buckets' is {brief(json.dumps(rel))}: "
                         f"must be an even integer >= 4")
    if "rel_max_distance" in config and "rel_buckets" not in config:
        raise ValueError(f"{where}: key 'rel_max_distance' without 'rel_buckets'")
    if "rel_max_distance" in config and not (_is_int(dist) and rel // 2 < dist <= 2 ** 30):
        raise ValueError(f"{where}: key 'rel_max_distance' is {brief(json.dumps(dist))}: "
                         f"must be an integer above rel_buckets / 2 = {rel // 2}, at most 2^30")
    if rel and kind in ("bert", "vit"):
        raise ValueError(f"{where}: key 'rel_buckets' is {rel}: a {kind} reads its learned "
                         f"position table (leave the key out)")
    return {"kv_heads": kv, "rope_base": base, "rel_buckets": rel, "rel_max_distance": dist}


# Each family's relative-bias tables (docs/checkpoint-format.md): one per stack.
REL_TABLES = {"seq2seq": ["encoder.rel_bias", "decoder.rel_bias"], "gpt": ["rel_bias"],
              "encoder": ["encoder.rel_bias"]}


def relative_tables(kind, config, att, shapes, prefix, where):
    """The relative-bias tensors a file of `kind` holds agree with its
    model_config: with rel_buckets, each stack's table (REL_TABLES, under the
    file's prefix) of shape (heads, rel_buckets); without, none. shapes: the
    file's tensor names and shapes. Raises ValueError naming the tensor."""
    rel, heads = att["rel_buckets"], config.get("heads")
    for table in REL_TABLES.get(kind, []):
        name = prefix + table
        if rel and name not in shapes:
            raise ValueError(f"{where}: model_config has rel_buckets {rel}, but the file has no "
                             f"tensor '{brief(name)}' (its stack's relative-bias table)")
        if rel and list(shapes[name]) != [heads, rel]:
            raise ValueError(f"{where}: tensor '{brief(name)}' has shape {list(shapes[name])}, "
                             f"not [heads, rel_buckets] = [{heads}, {rel}]")
        if not rel and name in shapes:
            raise ValueError(f"{where}: the file has a relative-bias table '{brief(name)}', but "
                             f"model_config has no rel_buckets")


MOE_KEYS = ("experts", "experts_per_token", "capacity_factor", "aux_loss")


def moe_keys(config, where="model_config"):
    """{"experts", "experts_per_token", "capacity_factor", "aux_loss"} of a
    model_config, as docs/checkpoint-format.md lists them: a mixture of experts
    in every FFN (nn/moe.h) when `experts` E >= 2 is there (with all four
    keys: k an integer in 1..E, capacity_factor > 0, aux_loss >= 0); absent
    (every file before the keys): a dense FFN, returned as experts 0. Each
    layer's FFN tensors are then ffn.router.weight (E, D) and ffn.experts.<e>.
    followed by the dense block's names. Raises ValueError naming the key."""
    if "experts" not in config:
        extra = [k for k in MOE_KEYS[1:] if k in config]
        if extra:
            raise ValueError(f"{where}: key '{extra[0]}' without 'experts'")
        return {"experts": 0, "experts_per_token": 1, "capacity_factor": 1.25, "aux_loss": 0.01}
    for k in MOE_KEYS:
        if k not in config:
            raise ValueError(f"{where}: key 'experts' without '{k}'")
    e, k, cf, aux = (config[key] for key in MOE_KEYS)
    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if not (_is_int(e) and e >= 2):
        raise ValueError(f"{where}: key 'experts' is {brief(json.dumps(e))}: must be an integer >= 2")
    if not (_is_int(k) and 1 <= k <= e):
        raise ValueError(f"{where}: key 'experts_per_token' is {brief(json.dumps(k))}: must be an integer in 1..{e}")
    if not (number(cf) and cf > 0):
        raise ValueError(f"{where}: key 'capacity_factor' is {brief(json.dumps(cf))}: must be a number > 0")
    if not (number(aux) and aux >= 0):
        raise ValueError(f"{where}: key 'aux_loss' is {brief(json.dumps(aux))}: must be a number >= 0")
    return {"experts": e, "experts_per_token": k, "capacity_factor": cf, "aux_loss": aux}


def vit_image(config, where="model_config"):
    """{"image", "channels", "patch", "classes", "patches"} of a vit model_config,
    as docs/checkpoint-format.md lists them: integers >= 1, `patch` dividing
    `image`; patches = (image / patch)^2. Raises ValueError naming the key."""
    out = {}
    for key in ("image", "channels", "patch", "classes"):
        if key not in config:
            raise ValueError(f"{where}: missing key '{key}'")
        if not (_is_int(config[key]) and config[key] >= 1):
            raise ValueError(f"{where}: key '{key}' is {brief(json.dumps(config[key]))}: must be an integer >= 1")
        out[key] = config[key]
    if out["image"] % out["patch"]:
        raise ValueError(f"{where}: key 'image' is {out['image']}, not a multiple of 'patch' {out['patch']}")
    out["patches"] = (out["image"] // out["patch"]) ** 2
    return out


# ---- model_config read as qkv's codecs read it (checkpoint/*_codec.cpp) ---------------
#
# Each family's fields, each with its JSON type (read_json_field in
# checkpoint/model_file.h), then the keys every family shares
# (checkpoint/config_json.h), then the family's own rules.

INT, UINT, REAL, DOUBLE, BOOL, STR = "int64", "uint64", "float32", "float64", "bool", "string"
_WANT = {INT: "an integer", UINT: "an integer", REAL: "a number", DOUBLE: "a number",
         BOOL: "a boolean", STR: "a string"}
_STACK_FIELDS = [("d_model", INT), ("heads", INT), ("layers", INT), ("d_ff", INT),
                 ("dropout", REAL), ("pre_norm", BOOL), ("seed", UINT)]
FAMILY_FIELDS = {
    "seq2seq": [("src_vocab", INT), ("tgt_vocab", INT), ("d_model", INT), ("heads", INT),
                ("encoder_layers", INT), ("decoder_layers", INT), ("d_ff", INT), ("dropout", REAL),
                ("pre_norm", BOOL), ("tie_weights", BOOL), ("learned_positions", BOOL),
                ("max_positions", INT), ("seed", UINT)],
    "gpt": [("vocab", INT), ("d_model", INT), ("heads", INT), ("layers", INT), ("d_ff", INT),
            ("max_positions", INT), ("dropout", REAL), ("pre_norm", BOOL), ("tie_weights", BOOL),
            ("seed", UINT)],
    "encoder": [("vocab", INT), ("classes", INT)] + _STACK_FIELDS,
    "bert": [("vocab", INT), ("max_positions", INT), ("head", STR)] + _STACK_FIELDS,
    "vit": [("image", INT), ("channels", INT), ("patch", INT), ("classes", INT)] + _STACK_FIELDS,
}
# The fields a file may leave out, with their defaults (bert's alone).
OPTIONAL_FIELDS = {"bert": [("segments", INT, 2), ("classes", INT, 0), ("sep_id", INT, 2),
                            ("mask_id", INT, 3)]}
ACTIVATIONS = ("relu", "gelu", "swiglu")
ATTENTION_KERNELS = ("standard", "memory-efficient", "sparse", "linear", "auto")
NORMS = ("layer", "rms")


def _json_type(v):
    """nlohmann::json's type_name() of a value, for messages."""
    if v is None:
        return "null"
    return {bool: "boolean", int: "number", float: "number", str: "string", list: "array",
            dict: "object"}[type(v)]


def _float32(x):
    """x as a C++ float holds it (a value beyond its range is infinite)."""
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def _field(j, key, kind, where):
    """One field of the JSON object j, strictly: present, of its JSON type,
    an integer within its C++ type; as read_json_field reads it."""
    if not isinstance(j, dict):
        raise ValueError(f"{where}: expected a JSON object holding '{key}'")
    if key not in j:
        raise ValueError(f"{where}: missing key '{key}'")
    v = j[key]
    number = isinstance(v, (int, float)) and not isinstance(v, bool)
    ok = {INT: _is_int(v), UINT: _is_int(v), REAL: number, DOUBLE: number,
          BOOL: isinstance(v, bool), STR: isinstance(v, str)}[kind]
    if not ok:
        raise ValueError(f"{where}: key '{key}' has the wrong type (expected {_WANT[kind]}, "
                         f"got {_json_type(v)} {brief(json.dumps(v))})")
    if (kind == INT and not -2**63 <= v < 2**63) or (kind == UINT and not 0 <= v < 2**64):
        raise ValueError(f"{where}: key '{key}' is out of range ({brief(json.dumps(v))})")
    if kind == REAL:
        return _float32(v)
    if kind == DOUBLE:
        return float(v)
    return v


def model_config(kind, config, where="model_config"):
    """The model_config of a `kind` file read as qkv reads it
    (from_json_with in checkpoint/config_json.h and the family's codec): every
    field of FAMILY_FIELDS present with its type; the shared keys (activation,
    window, global_every, scaled, attention, d_k, norm, bias, kv_heads,
    rope_base, rel_buckets, rel_max_distance, experts, experts_per_token,
    capacity_factor, aux_loss) read with their defaults and ranges; bert's
    optional fields and its rules. Returns every value by its key (floats as
    the C++ float/double holds them). Raises ValueError naming the key."""
    if kind not in FAMILY_FIELDS:
        raise ValueError(f"{where}: unknown model kind '{brief(kind)}'")
    if isinstance(config, dict) and "max_len" in config:  # upgrade_model_config: its old name
        if "max_positions" in config:
            raise ValueError(f"{where}: holds both 'max_positions' and 'max_len', its old name")
        config = {("max_positions" if k == "max_len" else k): v for k, v in config.items()}
    c = {key: _field(config, key, t, where) for key, t in FAMILY_FIELDS[kind]}
    if "max_positions" in config and "max_positions" not in c:  # the trainer reads it of any family
        _field(config, "max_positions", INT, where)
    act = _field(config, "activation", STR, where)
    if act not in ACTIVATIONS:
        raise ValueError(f"{where}: key 'activation' is '{brief(act)}' (expected relu, gelu or swiglu)")
    c["activation"] = act
    has = config.__contains__
    c["window"] = _field(config, "window", INT, where) if has("window") else 128
    c["global_every"] = _field(config, "global_every", INT, where) if has("global_every") else 64
    c["scaled"] = _field(config, "scaled", BOOL, where) if has("scaled") else True
    c["attention"] = _field(config, "attention", STR, where) if has("attention") else "standard"
    if c["attention"] not in ATTENTION_KERNELS:
        raise ValueError(f"{where}: key 'attention' is '{brief(c['attention'])}' "
                         f"(expected standard, memory-efficient, sparse, linear or auto)")
    c["d_k"] = _field(config, "d_k", INT, where) if has("d_k") else 0
    if has("d_k") and c["d_k"] < 1:
        raise ValueError(f"{where}: key 'd_k' is {c['d_k']}: must be >= 1 (leave it out for d_model / heads)")
    c["norm"] = _field(config, "norm", STR, where) if has("norm") else "layer"
    if c["norm"] not in NORMS:
        raise ValueError(f"{where}: key 'norm' is '{brief(c['norm'])}' (expected layer or rms)")
    c["bias"] = _field(config, "bias", BOOL, where) if has("bias") else True
    c["kv_heads"] = _field(config, "kv_heads", INT, where) if has("kv_heads") else 0
    heads = c["heads"]
    if has("kv_heads") and (c["kv_heads"] < 1 or heads < 1 or heads % c["kv_heads"]):
        raise ValueError(f"{where}: key 'kv_heads' is {c['kv_heads']}: must divide 'heads' "
                         f"{heads} (leave it out for every head)")
    c["rope_base"] = _field(config, "rope_base", REAL, where) if has("rope_base") else 0.0
    if has("rope_base") and not 1 < c["rope_base"] <= _float32(1e9):
        raise ValueError(f"{where}: key 'rope_base' is {brief(json.dumps(config['rope_base']))}: "
                         f"must be in (1, 1e9] (leave it out for no rotation)")
    c["rel_buckets"], c["rel_max_distance"] = 0, 128
    if has("rel_buckets"):
        c["rel_buckets"] = rel = _field(config, "rel_buckets", INT, where)
        if has("rel_max_distance"):
            c["rel_max_distance"] = _field(config, "rel_max_distance", INT, where)
        if rel < 4 or rel % 2:
            raise ValueError(f"{where}: key 'rel_buckets' is {rel}: must be even and >= 4 "
                             f"(leave it out for no relative positions)")
        if not rel // 2 < c["rel_max_distance"] <= 1 << 30:
            raise ValueError(f"{where}: key 'rel_max_distance' is {c['rel_max_distance']}: must "
                             f"exceed rel_buckets / 2 = {rel // 2} and be at most 2^30")
    elif has("rel_max_distance"):
        raise ValueError(f"{where}: key 'rel_max_distance' without 'rel_buckets'")
    c["experts"], c["experts_per_token"], c["capacity_factor"], c["aux_loss"] = 0, 1, 1.25, 0.01
    if has("experts"):
        c["experts"] = e = _field(config, "experts", INT, where)
        for k in MOE_KEYS[1:]:
            if not has(k):
                raise ValueError(f"{where}: key 'experts' without '{k}' (a mixture of experts has all four)")
        c["experts_per_token"] = k = _field(config, "experts_per_token", INT, where)
        c["capacity_factor"] = cf = _field(config, "capacity_factor", DOUBLE, where)
        c["aux_loss"] = aux = _field(config, "aux_loss", DOUBLE, where)
        keys = f"{where}: keys 'experts', 'experts_per_token', 'capacity_factor', 'aux_loss'"
        if e < 2:
            raise ValueError(f"{keys}: experts {e}: a mixture needs at least 2 experts")
        if not 1 <= k <= e:
            raise ValueError(f"{keys}: experts per token {k}: must be in 1..{e} (the number of experts)")
        if not (cf > 0 and math.isfinite(cf)):
            raise ValueError(f"{keys}: capacity factor {cf}: must be a positive number")
        if not (aux >= 0 and math.isfinite(aux)):
            raise ValueError(f"{keys}: aux loss {aux}: must be a number >= 0")
    else:
        for k in MOE_KEYS[1:]:
            if has(k):
                raise ValueError(f"{where}: key '{k}' without 'experts' (leave it out for a dense FFN)")
    if c["window"] < 1 or c["global_every"] < 0:
        raise ValueError(f"{where}: key 'window' must be >= 1 and 'global_every' >= 0, got "
                         f"{c['window']} and {c['global_every']}")
    for key, t, default in OPTIONAL_FIELDS.get(kind, []):
        c[key] = _field(config, key, t, where) if has(key) else default
    if kind == "bert":
        if c["head"] not in ("mlm", "classify", "qa"):
            raise ValueError(f"{where}: key 'head' is '{brief(c['head'])}' "
                             "(expected mlm, classify or qa)")
        if c["head"] == "classify" and c["classes"] < 1:
            raise ValueError(f"{where}: key 'classes' is {c['classes']}: head classify needs at least 1")
        for key in ("sep_id", "mask_id"):
            if not 0 <= c[key] < c["vocab"]:
                raise ValueError(f"{where}: key '{key}' is {c[key]}: outside the vocabulary [0, {c['vocab']})")
        if c["rope_base"] != 0:
            raise ValueError(f"{where}: key 'rope_base': a bert reads learned positions (leave it out)")
    # Rotary positions are a gpt's, and not beside a relative bias (checkpoint/config_json.h).
    if c["rope_base"] != 0 and c["rel_buckets"]:
        raise ValueError(f"{where}: key 'rope_base': this file's positions are T5's relative bias "
                         f"('rel_buckets'); a file has one kind of positions (leave one of them out)")
    return c


def runs_on(c, where="model_config"):
    """What qkv's attention needs to run the configuration c (model_config()),
    which its first forward pass (and train, when it loads the file) refuses
    otherwise: rotary positions, shared key/value heads and relative
    positions only with the standard, memory-efficient or auto kernel, and
    rotary positions on an even d_k. Raises ValueError naming the key."""
    softmax = c["attention"] in ("standard", "memory-efficient", "auto")
    for key, used in (("rope_base", c["rope_base"]), ("kv_heads", c["kv_heads"]),
                      ("rel_buckets", c["rel_buckets"])):
        if used and not softmax:
            raise ValueError(f"{where}: key 'attention' is '{c['attention']}', but the {c['attention']} "
                             f"kernel takes no '{key}' (standard, memory-efficient or auto do)")
    d_k = c["d_k"] if c["d_k"] > 0 else c["d_model"] // max(c["heads"], 1)
    if c["rope_base"] and d_k % 2:
        raise ValueError(f"{where}: key 'rope_base': rotary positions turn pairs of a head's d_k "
                         f"numbers, and d_k = {d_k} is odd (d_model / heads, or 'd_k')")


# ---- the configuration against the file's tensors (checkpoint/config_fits.cpp) ---------


def _shape_text(shape):
    return "(" + ",".join(str(d) for d in shape) + ")"


def _number_text(v):
    """A count or a value for a message, as config_fits.cpp's number_text."""
    if v == math.floor(v) and abs(v) < 1e15:
        return f"{v:.0f}"
    return f"{v:.6g}"


class _ConfigFit:
    """check_config_fits's reading of one file: each check names the file,
    the config key and the tensor it was compared with."""

    def __init__(self, path, shapes, prefix):
        self.path, self.shapes, self.prefix = path, shapes, prefix

    def fail(self, msg):
        raise ValueError(f"{brief(self.path)}: {msg}")

    @staticmethod
    def key_is(key, v):
        return f"model_config key '{key}' is {v}"

    def tensor_name(self, name):
        return f"'{brief(self.prefix + name)}'"

    def at_least(self, key, v, lo):
        if v < lo:
            self.fail(f"{self.key_is(key, v)}: must be at least {lo}")

    def matrix(self, name, key):
        full = self.prefix + name
        if full not in self.shapes:
            self.fail(f"model_config key '{key}' cannot be checked: the file has no tensor {self.tensor_name(name)}")
        shape = self.shapes[full]
        if len(shape) != 2:
            self.fail(f"tensor {self.tensor_name(name)} has shape {_shape_text(shape)}, not a matrix "
                      f"(model_config key '{key}' is checked against it)")
        return shape

    def size_is(self, name, shape, dim, key, v):
        if shape[dim] != v:
            self.fail(f"{self.key_is(key, v)} but tensor {self.tensor_name(name)} has shape {_shape_text(shape)}")

    def layers_are(self, stack, key, layers):
        start = self.prefix + stack
        found = 0
        for n in self.shapes:
            if not n.startswith(start):
                continue
            index = n[len(start):].split(".", 1)[0]
            if not index or len(index) > 9 or not index.isdigit() or not index.isascii():
                continue
            found = max(found, int(index) + 1)
        if found != layers:
            named = (f"none named '{brief(start)}<i>.*'" if found == 0 else
                     f"'{brief(start)}0.*'" + (f" to '{brief(start)}{found - 1}.*'" if found > 1 else ""))
            self.fail(f"{self.key_is(key, layers)} but the file has tensors for {found} ({named})")

    def ffn_fits(self, name, d_ff, F, d_model):
        self.at_least("d_ff", d_ff, 1)
        w1 = self.matrix(name, "d_ff")
        if w1[0] != F:
            hidden = f" (a SwiGLU hidden width of {F})" if F != d_ff else ""
            self.fail(f"{self.key_is('d_ff', d_ff)}{hidden} but tensor {self.tensor_name(name)} has shape {_shape_text(w1)}")
        self.size_is(name, w1, 1, "d_model", d_model)

    def dropout_ok(self, p):
        if not 0 <= p < 1:
            self.fail(f"model_config key 'dropout' is {_number_text(p) if math.isfinite(p) else p}: must be in [0, 1)")

    def heads_ok(self, heads, d_model):
        self.at_least("heads", heads, 1)
        if d_model % heads:
            self.fail(f"{self.key_is('heads', heads)}, which does not divide d_model {d_model}")

    def d_k_fits(self, name, heads, d_model, d_k):
        dk = d_k if d_k > 0 else d_model // heads
        wq = self.matrix(name, "d_k")
        if wq[0] != heads * dk or wq[1] != d_model:
            self.fail(f"model_config keys 'heads' {heads}, 'd_k' {dk}{'' if d_k > 0 else ' (d_model / heads)'} "
                      f"and 'd_model' {d_model} make (heads*d_k, d_model) but tensor {self.tensor_name(name)} "
                      f"has shape {_shape_text(wq)}")

    # Two checks qkv makes later, in load_state_dict (a shape) or count_fits
    # (the numbers): made here by name, so that the message names the key.
    def kv_heads_fit(self, name, c):
        """kv_heads K against the first self-attention's W_K (K * d_k, D)."""
        if not c["kv_heads"]:
            return
        dk = c["d_k"] if c["d_k"] > 0 else c["d_model"] // c["heads"]
        wk = self.matrix(name, "kv_heads")
        if wk[0] != c["kv_heads"] * dk:
            self.fail(f"{self.key_is('kv_heads', c['kv_heads'])} (key/value heads of d_k {dk}) but "
                      f"tensor {self.tensor_name(name)} has shape {_shape_text(wk)}")

    def experts_fit(self, name, c):
        """experts E against the first FFN's router (E, D)."""
        if c["experts"] > 0:
            router = self.matrix(name, "experts")
            self.size_is(name, router, 0, "experts", c["experts"])

    def count_fits(self, model_numbers):
        in_file = sum(math.prod(s) for n, s in self.shapes.items() if n.startswith(self.prefix))
        if model_numbers > 2 * in_file + (1 << 20):
            self.fail(f"model_config describes a model of {_number_text(model_numbers)} parameters but "
                      f"the file holds {_number_text(in_file)} numbers under the prefix '{brief(self.prefix)}'")


def _ffn_rows(c):
    """The FFN's hidden width (nn::ffn_hidden) for any d_ff a file may hold."""
    d_ff = c["d_ff"]
    if d_ff < 1 or d_ff > 1 << 50:
        return d_ff
    return swiglu_hidden(d_ff) if c["activation"] == "swiglu" else d_ff


def _ffn_first(c):
    block = "ffn.experts.0." if c["experts"] > 0 else "ffn."
    return block + ("gate.weight" if c["activation"] == "swiglu" else "linear1.weight")


def _norm_numbers(c):
    return (1 if c["norm"] == "rms" else 2) * float(c["d_model"])


def _layer_numbers(c, attentions):
    D, H = float(c["d_model"]), float(c["heads"])
    E = H * c["d_k"] if c["d_k"] > 0 else D
    K = float(c["kv_heads"]) if c["kv_heads"] > 0 else H

    def attention(E, Ek, Dv):
        return (E + Ek + Dv + D) * D + ((E + Ek + Dv + D) if c["bias"] else 0)
    F = float(_ffn_rows(c))
    one = 3 * D * F if c["activation"] == "swiglu" else 2 * D * F + ((F + D) if c["bias"] else 0)
    ffn = float(c["experts"]) * (one + D) if c["experts"] > 0 else one
    return (attention(E, E / H * K, D / H * K) + (attentions - 1) * attention(E, E, D)
            + (attentions + 1) * _norm_numbers(c) + ffn)


def parameter_count(kind, c):
    """How many numbers a model of this configuration holds (config_fits.cpp's
    parameter_count), as a float: a hostile configuration may describe more than 2^63."""
    D = float(c["d_model"])
    rel = c["rel_buckets"] > 0
    if kind == "seq2seq":
        n = float(c["src_vocab"]) * D + float(c["tgt_vocab"]) * D
        if c["learned_positions"] and not rel:
            n += 2 * float(c["max_positions"]) * D
        if rel:
            n += 2 * float(c["heads"]) * c["rel_buckets"]
        n += c["encoder_layers"] * _layer_numbers(c, 1) + c["decoder_layers"] * _layer_numbers(c, 2)
        if c["pre_norm"]:
            n += 2 * _norm_numbers(c)
        return n + float(c["tgt_vocab"]) * (1 if c["tie_weights"] else D + 1)
    if kind == "gpt":
        n = float(c["vocab"]) * D + (0 if c["rope_base"] > 0 or rel else float(c["max_positions"]) * D)
        n += c["layers"] * _layer_numbers(c, 1)
        if rel:
            n += float(c["heads"]) * c["rel_buckets"]
        if c["pre_norm"]:
            n += _norm_numbers(c)
        return n + (0 if c["tie_weights"] else float(c["vocab"]) * D)
    if kind == "encoder":
        n = float(c["vocab"]) * D + c["layers"] * _layer_numbers(c, 1)
        if c["pre_norm"]:
            n += _norm_numbers(c)
        if rel:
            n += float(c["heads"]) * c["rel_buckets"]
        return n + float(c["classes"]) * (D + 1)
    if kind == "vit":
        P = float(c["patch"])
        side = float(c["image"] // c["patch"]) if c["patch"] > 0 else 0.0
        n = D * c["channels"] * P * P + D + D + (side * side + 1) * D
        n += c["layers"] * _layer_numbers(c, 1)
        if c["pre_norm"]:
            n += _norm_numbers(c)
        return n + float(c["classes"]) * (D + 1)
    # bert
    n = (float(c["vocab"]) + c["segments"] + c["max_positions"]) * D + _norm_numbers(c)
    n += c["layers"] * _layer_numbers(c, 1)
    if c["pre_norm"]:
        n += _norm_numbers(c)
    if c["head"] == "qa":
        return n + 2 * (D + 1)
    n += D * D + D
    if c["head"] == "mlm":
        return n + _norm_numbers(c) + float(c["vocab"])
    return n + float(c["classes"]) * (D + 1)


def check_config_fits(path, kind, c, shapes, prefix):
    """The configuration c (model_config()) against the file's tensor shapes
    ({name: shape}) under `prefix`, as qkv's check_config_fits does before it
    builds a model: the sizes against the embeddings, heads against d_model,
    d_k against the first W_Q, d_ff against the first FFN weight, the layer
    counts against the layer indices of the names, the position tables,
    dropout in [0, 1), and the parameters the configuration implies against
    the numbers the file holds. Raises ValueError naming the file, the key
    and the tensor."""
    fit = _ConfigFit(path, shapes, prefix)
    D = c["d_model"]
    fit.at_least("d_model", D, 1)
    if kind == "vit":
        for key in ("image", "channels", "patch", "classes"):
            fit.at_least(key, c[key], 1)
        if c["image"] % c["patch"]:
            fit.fail(f"{fit.key_is('image', c['image'])}, not a multiple of 'patch' {c['patch']}")
        proj = fit.matrix("patch.weight", "patch")
        fit.size_is("patch.weight", proj, 0, "d_model", D)
        if proj[1] != c["channels"] * c["patch"] * c["patch"]:
            fit.fail(f"model_config keys 'channels' {c['channels']} and 'patch' {c['patch']} make patches "
                     f"of C*P*P numbers but tensor {fit.tensor_name('patch.weight')} has shape {_shape_text(proj)}")
        table = fit.matrix("pos_embed", "image")
        side = c["image"] // c["patch"]
        if table[0] != side * side + 1 or table[1] != D:
            fit.fail(f"model_config keys 'image' {c['image']} and 'patch' {c['patch']} make (image/patch)^2 + 1 "
                     f"= {side * side + 1} positions but tensor {fit.tensor_name('pos_embed')} has shape {_shape_text(table)}")
        head = fit.matrix("head.weight", "classes")
        fit.size_is("head.weight", head, 0, "classes", c["classes"])
    elif kind == "encoder":
        fit.at_least("vocab", c["vocab"], 1)
        fit.at_least("classes", c["classes"], 1)
        emb = fit.matrix("embed.weight", "d_model")
        fit.size_is("embed.weight", emb, 1, "d_model", D)
        fit.size_is("embed.weight", emb, 0, "vocab", c["vocab"])
        head = fit.matrix("head.weight", "classes")
        fit.size_is("head.weight", head, 0, "classes", c["classes"])
    elif kind == "seq2seq":
        for name, key in (("src_embed.weight", "src_vocab"), ("tgt_embed.weight", "tgt_vocab")):
            fit.at_least(key, c[key], 1)
            emb = fit.matrix(name, "d_model")
            fit.size_is(name, emb, 1, "d_model", D)
            fit.size_is(name, emb, 0, key, c[key])
    elif kind == "gpt":
        fit.at_least("vocab", c["vocab"], 1)
        emb = fit.matrix("tok_embed.weight", "d_model")
        fit.size_is("tok_embed.weight", emb, 1, "d_model", D)
        fit.size_is("tok_embed.weight", emb, 0, "vocab", c["vocab"])
    elif kind == "bert":
        fit.at_least("vocab", c["vocab"], 1)
        emb = fit.matrix("embed.weight", "d_model")
        fit.size_is("embed.weight", emb, 1, "d_model", D)
        fit.size_is("embed.weight", emb, 0, "vocab", c["vocab"])
        fit.at_least("segments", c["segments"], 1)
        seg = fit.matrix("segment_embed.weight", "segments")
        fit.size_is("segment_embed.weight", seg, 0, "segments", c["segments"])
        fit.size_is("segment_embed.weight", seg, 1, "d_model", D)
        fit.at_least("max_positions", c["max_positions"], 1)
        table = fit.matrix("pos_embed.weight", "max_positions")
        fit.size_is("pos_embed.weight", table, 0, "max_positions", c["max_positions"])
        fit.size_is("pos_embed.weight", table, 1, "d_model", D)
        if c["head"] == "mlm":
            dense = fit.matrix("mlm.dense.weight", "head")
            fit.size_is("mlm.dense.weight", dense, 0, "d_model", D)
        elif c["head"] == "qa":
            qa = fit.matrix("qa_outputs.weight", "head")
            fit.size_is("qa_outputs.weight", qa, 1, "d_model", D)
        else:
            fit.at_least("classes", c["classes"], 1)
            cls = fit.matrix("classifier.weight", "classes")
            fit.size_is("classifier.weight", cls, 0, "classes", c["classes"])
            fit.size_is("classifier.weight", cls, 1, "d_model", D)
    fit.heads_ok(c["heads"], D)
    if kind == "seq2seq":
        fit.at_least("encoder_layers", c["encoder_layers"], 1)
        fit.at_least("decoder_layers", c["decoder_layers"], 1)
        fit.layers_are("encoder.layers.", "encoder_layers", c["encoder_layers"])
        fit.layers_are("decoder.layers.", "decoder_layers", c["decoder_layers"])
        for name in ("encoder.layers.0.self_attn.w_q.weight", "decoder.layers.0.self_attn.w_q.weight",
                     "decoder.layers.0.cross_attn.w_q.weight"):
            fit.d_k_fits(name, c["heads"], D, c["d_k"])
        for stack in ("encoder.layers.0.", "decoder.layers.0."):
            fit.kv_heads_fit(stack + "self_attn.w_k.weight", c)
            fit.experts_fit(stack + "ffn.router.weight", c)
            fit.ffn_fits(stack + _ffn_first(c), c["d_ff"], _ffn_rows(c), D)
        if c["learned_positions"] and not c["rel_buckets"]:
            for name in ("src_pos.weight", "tgt_pos.weight"):
                table = fit.matrix(name, "max_positions")
                fit.size_is(name, table, 0, "max_positions", c["max_positions"])
                fit.size_is(name, table, 1, "d_model", D)
        else:
            fit.at_least("max_positions", c["max_positions"], 0)
    elif kind == "gpt":
        fit.at_least("layers", c["layers"], 0)
        fit.layers_are("layers.", "layers", c["layers"])
        if c["layers"] > 0:
            fit.d_k_fits("layers.0.self_attn.w_q.weight", c["heads"], D, c["d_k"])
            fit.kv_heads_fit("layers.0.self_attn.w_k.weight", c)
            fit.experts_fit("layers.0.ffn.router.weight", c)
            fit.ffn_fits("layers.0." + _ffn_first(c), c["d_ff"], _ffn_rows(c), D)
        if c["rope_base"] > 0 or c["rel_buckets"]:
            fit.at_least("max_positions", c["max_positions"], 1)
        else:
            table = fit.matrix("pos_embed.weight", "max_positions")
            fit.size_is("pos_embed.weight", table, 0, "max_positions", c["max_positions"])
            fit.size_is("pos_embed.weight", table, 1, "d_model", D)
    else:  # encoder, bert, vit: one stack
        fit.at_least("layers", c["layers"], 1)
        fit.layers_are("encoder.layers.", "layers", c["layers"])
        fit.d_k_fits("encoder.layers.0.self_attn.w_q.weight", c["heads"], D, c["d_k"])
        fit.kv_heads_fit("encoder.layers.0.self_attn.w_k.weight", c)
        fit.experts_fit("encoder.layers.0.ffn.router.weight", c)
        fit.ffn_fits("encoder.layers.0." + _ffn_first(c), c["d_ff"], _ffn_rows(c), D)
    fit.dropout_ok(c["dropout"])
    fit.count_fits(parameter_count(kind, c))


# ---- every tensor the model holds (docs/checkpoint-format.md, "A model file") ----------


def model_tensors(kind, c):
    """(name, shape) of every parameter a `kind` model of configuration c
    (model_config()) holds, in named_parameters() order: the names and shapes
    a file must hold under its prefix, no more, no fewer. A generator: call it
    after check_config_fits(), which bounds how many there are."""
    D, H, F = c["d_model"], c["heads"], _ffn_rows(c)
    dk = c["d_k"] if c["d_k"] > 0 else D // H
    K = c["kv_heads"] if c["kv_heads"] > 0 else H
    bias, rel = c["bias"], c["rel_buckets"]

    def linear(name, out, inp, with_bias=True):
        yield f"{name}.weight", [out, inp]
        if with_bias:
            yield f"{name}.bias", [out]

    def norm(name):
        yield f"{name}.weight", [D]
        if c["norm"] == "layer":
            yield f"{name}.bias", [D]

    def attention(name, kv):
        yield from linear(f"{name}.w_q", H * dk, D, bias)
        yield from linear(f"{name}.w_k", kv * dk, D, bias)
        yield from linear(f"{name}.w_v", D // H * kv, D, bias)
        yield from linear(f"{name}.w_o", D, D, bias)

    def dense(name):
        if c["activation"] == "swiglu":
            yield from linear(f"{name}.gate", F, D, False)
            yield from linear(f"{name}.up", F, D, False)
            yield from linear(f"{name}.down", D, F, False)
        else:
            yield from linear(f"{name}.linear1", F, D, bias)
            yield from linear(f"{name}.linear2", D, F, bias)

    def ffn(name):
        if c["experts"] > 0:
            yield from linear(f"{name}.router", c["experts"], D, False)
            for e in range(c["experts"]):
                yield from dense(f"{name}.experts.{e}")
        else:
            yield from dense(name)

    def encoder_layer(name):
        yield from attention(f"{name}.self_attn", K)
        yield from norm(f"{name}.norm1")
        yield from ffn(f"{name}.ffn")
        yield from norm(f"{name}.norm2")

    def decoder_layer(name):
        yield from attention(f"{name}.self_attn", K)
        yield from norm(f"{name}.norm1")
        yield from attention(f"{name}.cross_attn", H)
        yield from norm(f"{name}.norm2")
        yield from ffn(f"{name}.ffn")
        yield from norm(f"{name}.norm3")

    def stack(name, layers, layer=encoder_layer):
        if rel:
            yield f"{name}.rel_bias", [H, rel]
        for i in range(layers):
            yield from layer(f"{name}.layers.{i}")
        if c["pre_norm"]:
            yield from norm(f"{name}.norm")

    if kind == "seq2seq":
        yield "src_embed.weight", [c["src_vocab"], D]
        yield "tgt_embed.weight", [c["tgt_vocab"], D]
        if c["learned_positions"] and not rel:
            yield "src_pos.weight", [c["max_positions"], D]
            yield "tgt_pos.weight", [c["max_positions"], D]
        yield from stack("encoder", c["encoder_layers"])
        yield from stack("decoder", c["decoder_layers"], decoder_layer)
        if not c["tie_weights"]:
            yield "lm_head.weight", [c["tgt_vocab"], D]
        yield "lm_head.bias", [c["tgt_vocab"]]
    elif kind == "gpt":
        if rel:
            yield "rel_bias", [H, rel]
        yield "tok_embed.weight", [c["vocab"], D]
        if not (c["rope_base"] > 0 or rel):
            yield "pos_embed.weight", [c["max_positions"], D]
        for i in range(c["layers"]):
            yield from encoder_layer(f"layers.{i}")
        if c["pre_norm"]:
            yield from norm("norm")
        if not c["tie_weights"]:
            yield "lm_head.weight", [c["vocab"], D]
    elif kind == "encoder":
        yield "embed.weight", [c["vocab"], D]
        yield from stack("encoder", c["layers"])
        yield from linear("head", c["classes"], D)
    elif kind == "bert":
        yield "embed.weight", [c["vocab"], D]
        yield "segment_embed.weight", [c["segments"], D]
        yield "pos_embed.weight", [c["max_positions"], D]
        yield from norm("embed_norm")
        yield from stack("encoder", c["layers"])
        if c["head"] == "mlm":
            yield "mlm.bias", [c["vocab"]]
            yield from linear("mlm.dense", D, D)
            yield from norm("mlm.norm")
        elif c["head"] == "qa":
            yield from linear("qa_outputs", 2, D)
        else:
            yield from linear("pooler", D, D)
            yield from linear("classifier", c["classes"], D)
    elif kind == "vit":
        side = c["image"] // c["patch"]
        yield "cls_token", [1, 1, D]
        yield "pos_embed", [side * side + 1, D]
        yield from linear("patch", D, c["channels"] * c["patch"] * c["patch"])
        yield from stack("encoder", c["layers"])
        yield from linear("head", c["classes"], D)


# Parameters renamed since files were first written: (today's prefix, the old one).
RENAMED_PARAMETERS = [("lm_head.", "generator.")]


def check_tensors(path, kind, c, header, prefix):
    """The file's tensors under `prefix` are exactly the model's (model_tensors()),
    with its shapes, as qkv's load_state_dict requires: a missing, unexpected
    or misshapen tensor is refused, naming it."""
    in_file = {n: e["shape"] for n, e in header.items() if n != "__metadata__" and n.startswith(prefix)}
    missing, n_missing = [], 0
    for name, shape in model_tensors(kind, c):
        full = prefix + name
        if full not in in_file:
            for now, before in RENAMED_PARAMETERS:
                if name.startswith(now) and prefix + before + name[len(now):] in in_file:
                    full = prefix + before + name[len(now):]
        if full not in in_file:
            n_missing += 1
            if len(missing) < 3:
                missing.append(prefix + name)
            continue
        if list(in_file[full]) != shape:
            raise ValueError(f"{brief(path)}: tensor '{brief(full)}' has shape {_shape_text(in_file[full])} "
                             f"but the model expects {_shape_text(shape)}")
        del in_file[full]
    unexpected = list(in_file)

    def names(what, shown, count):
        s = f"{what} tensor " if count == 1 else f"{what} {count} tensors: "
        s += ", ".join(f"'{brief(n)}'" for n in shown[:3])
        return s + (f" and {count - 3} more" if count > 3 else "")
    parts = ([names("missing", missing, n_missing)] if n_missing else []) + \
        ([names("unexpected", unexpected, len(unexpected))] if unexpected else [])
    if parts:
        raise ValueError(f"{brief(path)}: {'; '.join(parts)}")


def _optimizer_kinds(path, md):
    """(train_config's optimizer, the names of its buffers), or (None, None)
    for an optimizer train does not know."""
    if "train_config" not in md:
        raise ValueError(f"{brief(path)}: metadata has no 'train_config'")
    run = _json_key(md, "train_config", path)
    if not isinstance(run, dict):
        raise ValueError(f"{brief(path)}: metadata 'train_config': expected a JSON object")
    opt, momentum = run.get("optimizer", "adam"), run.get("momentum", 0.9)
    if opt in ("adam", "adamw"):
        return opt, ["exp_avg", "exp_avg_sq"]
    if opt == "sgd" and isinstance(momentum, (int, float)) and not isinstance(momentum, bool):
        return opt, ["momentum"] if momentum != 0 else []
    return None, None


def check_optimizer_state(path, kind, c, header, md):
    """A training checkpoint's optimizer state (the tensors 'optim.*') against
    its model, as the optimizer's load_state_dict reads it
    (optim/optimizer.cpp): 'optim.step' of one number, 'optim.param_steps'
    of one per parameter, and the buffers of train_config's optimizer (adam,
    adamw: exp_avg.<i>, exp_avg_sq.<i>; sgd with momentum: momentum.<i>),
    none (before the first step) or one of each kind per parameter i, of
    parameter i's shape (i counts in named_parameters() order). Raises
    ValueError naming the file and the tensor. The numbers (counts, signs)
    are not read here."""
    if "format" not in md:
        return
    opt, kinds = _optimizer_kinds(path, md)
    if opt is None:
        return  # an optimizer train does not know: train --load names it
    params = list(model_tensors(kind, c))
    P = len(params)
    where = f"{brief(path)}: the {opt} optimizer's state:"
    state = {n: e["shape"] for n, e in header.items() if n.startswith("optim.")}
    present = {k: 0 for k in kinds}
    for full, shape in state.items():
        name = full[len("optim."):]
        if name == "step":
            if math.prod(shape) != 1:
                raise ValueError(f"{where} tensor '{full}' has shape {_shape_text(shape)}, not one step count")
            continue
        if name == "param_steps":
            if list(shape) != [P]:
                raise ValueError(f"{where} tensor '{full}' has shape {_shape_text(shape)}, but the model "
                                 f"has {P} parameters (expected ({P}))")
            continue
        kind_, _, index = name.rpartition(".")
        if kind_ not in kinds or not (index.isascii() and index.isdigit() and len(index) <= 18):
            known = ", ".join(["'optim.step'", "'optim.param_steps'"] + [f"'optim.{k}.<i>'" for k in kinds])
            raise ValueError(f"{where} tensor '{brief(full)}' is not one of its names ({known})")
        i = int(index)
        if i >= P:
            raise ValueError(f"{where} tensor '{brief(full)}': parameter index {i} out of range: the "
                             f"model has {P} parameters")
        if list(shape) != params[i][1]:
            raise ValueError(f"{where} tensor '{brief(full)}' has shape {_shape_text(shape)}, but "
                             f"parameter {i} ('{brief(params[i][0])}') is {_shape_text(params[i][1])}")
        present[kind_] += 1
    for name in ("step", "param_steps"):
        if f"optim.{name}" not in state:
            raise ValueError(f"{where} no tensor 'optim.{name}'")
    if any(present.values()):
        for k in kinds:
            for i in range(P):
                if f"optim.{k}.{i}" not in state:
                    raise ValueError(f"{where} no tensor 'optim.{k}.{i}' (the file has {present[k]} of "
                                     f"{P} 'optim.{k}.<i>' tensors)")


def check_step(path, md):
    """A training checkpoint's counts, which the optimizer's load_state_dict
    reads: 'optim.step' a step count equal to metadata 'step', each of
    'optim.param_steps' a count, and none above 0 when the file has no
    buffers (a step leaves them for every parameter). Reads those numbers."""
    header = read_header(path)
    if "format" not in md or "optim.step" not in header or "optim.param_steps" not in header:
        return
    tensors, _ = read_tensors(path, ["optim.step", "optim.param_steps"])
    value = tensors["optim.step"][1][0]
    if not (value >= 0 and value == int(value)):
        raise ValueError(f"{brief(path)}: tensor 'optim.step' holds {value:g}, not a step count")
    if md.get("step") != str(int(value)):
        raise ValueError(f"{brief(path)}: the file's parts disagree: metadata 'step' is "
                         f"'{brief(md.get('step', '(none)'))}' but the optimizer state (optim.step) "
                         f"is at step {int(value)}")
    counts = tensors["optim.param_steps"][1]
    for i, v in enumerate(counts):
        if not (v >= 0 and v == int(v)):
            raise ValueError(f"{brief(path)}: tensor 'optim.param_steps': element {i} is {v:g}, not a step count")
    opt, kinds = _optimizer_kinds(path, md)
    if kinds and not any(n.startswith(f"optim.{k}.") for n in header for k in kinds):
        moved = next((i for i, v in enumerate(counts) if v), None)
        if moved is not None:
            raise ValueError(f"{brief(path)}: tensor 'optim.param_steps': parameter {moved} has had "
                             f"{counts[moved]:g} updates but the file has no 'optim.{kinds[0]}.<i>' tensors")


# The dtypes qkv's reader takes (io/safetensors.cpp); any other is refused.
QKV_DTYPES = ("F32", "F64", "F16", "BF16")


def check_labels(path, kind, c, md):
    """Metadata 'labels', as the trainer reads it (trainer/checkpoint.cpp,
    file_shape): only a model with a classifier head has it (a bert with head
    classify, a vit); there a JSON list of distinct strings, one per class."""
    # a bert's mlm head classifies nothing, whatever 'classes' says
    classes = c["classes"] if kind == "vit" or (kind == "bert" and c["head"] == "classify") else 0
    where = f"{brief(path)}: metadata 'labels'"
    if "labels" not in md:
        return None
    if classes == 0:
        raise ValueError(f"{where}: this {brief(kind)} model has no classifier head (model_config), "
                         f"so label names do not belong in its file")
    labels = _json_key(md, "labels", path)
    if not isinstance(labels, list) or not labels or len(labels) > 1 << 20:
        raise ValueError(f"{where} is not a list of label names")
    for n in labels:
        if not isinstance(n, str):
            raise ValueError(f"{where} holds {brief(json.dumps(n))}, not a label name (a string)")
    if len(labels) != classes:
        raise ValueError(f"{brief(path)}: the file's parts disagree: metadata 'labels' names "
                         f"{len(labels)} labels but model_config's classes is {classes}")
    seen = set()
    for n in labels:
        if n in seen:
            raise ValueError(f"{where} names '{brief(n)}' twice (each class has its own name)")
        seen.add(n)
    return labels


def _nonfinite_flags(dtype, data):
    """One byte per element of `data` (little-endian `dtype` numbers): 1 where
    the number is NaN or infinite (its exponent bits all ones), else 0. Runs
    at C speed (slices, translate, one big-integer AND)."""
    size = DTYPE_SIZES[dtype]
    hi, lo = data[size - 1::size], data[size - 2::size]
    # (mask of the high byte, mask of the next byte): all exponent bits set.
    hi_mask, lo_mask = {"F32": (0x7F, 0x80), "BF16": (0x7F, 0x80), "F16": (0x7C, 0x00),
                        "F64": (0x7F, 0xF0)}[dtype]
    hi = hi.translate(bytes(int(b & hi_mask == hi_mask) for b in range(256)))
    if not lo_mask:
        return hi
    lo = lo.translate(bytes(int(b & lo_mask == lo_mask) for b in range(256)))
    both = int.from_bytes(hi, "little") & int.from_bytes(lo, "little")
    return both.to_bytes(len(hi), "little")


# F64 numbers are read into floats: one of this magnitude or more becomes infinite.
FLOAT32_OVERFLOW = 2.0**128 - 2.0**103


def check_finite(path, prefix=""):
    """Every number of the file's tensors under `prefix` is finite, as qkv's loader requires (train refuses such a
    file unless --allow-nonfinite): reads the data. F64 numbers too large for
    a float are refused as qkv would read them, infinite. Raises ValueError
    naming the tensor and the index of its first non-finite number."""
    header, body = _load(path, True)
    for name, info in header.items():
        if name == "__metadata__" or not name.startswith(prefix):
            continue
        dtype, shape, begin, end = _entry(path, name, info, len(body))
        if dtype not in QKV_DTYPES:
            continue
        flags = _nonfinite_flags(dtype, body[begin:end])
        if dtype == "F64":  # finite doubles beyond a float's range become infinite
            values = array.array("d", body[begin:end])
            if sys.byteorder == "big":
                values.byteswap()
            big = bytes(int(not abs(v) < FLOAT32_OVERFLOW) for v in values)
            flags = (int.from_bytes(flags, "little") | int.from_bytes(big, "little")).to_bytes(len(flags), "little")
        first = flags.find(1)
        if first < 0:
            continue
        count = flags.count(1)
        size = DTYPE_SIZES[dtype]
        raw = body[begin + first * size:begin + (first + 1) * size]
        value = {"F32": lambda b: struct.unpack("<f", b)[0], "F64": lambda b: struct.unpack("<d", b)[0],
                 "F16": lambda b: struct.unpack("<e", b)[0],
                 "BF16": lambda b: struct.unpack("<f", b"\0\0" + b)[0]}[dtype](raw)
        at, rest = [], first
        for d in reversed(shape):
            at.append(rest % d if d else 0)
            rest = rest // d if d else 0
        shown = str(value) if not math.isfinite(value) else f"{value:g} (beyond a float)"
        raise ValueError(f"{brief(path)}: tensor '{brief(name)}' holds {shown} at index "
                         f"{_shape_text(at[::-1])} of shape {_shape_text(shape)} ({count} non-finite "
                         f"value{'' if count == 1 else 's'} in it; train --allow-nonfinite loads it anyway)")


def _special_tokens(md, path):
    """Metadata 'special_tokens' as qkv reads it (nn::special_tokens): an
    object with integer ids "pad", "bos", "eos" (each >= 0) and optionally
    "unk"; the defaults when absent. The trainer requires pad 0, bos 1, eos 2."""
    if "special_tokens" not in md:
        return dict(DEFAULT_SPECIAL_TOKENS)
    special = _json_key(md, "special_tokens", path)
    where = f"{brief(path)}: metadata 'special_tokens'"
    for key in ("pad", "bos", "eos") + (("unk",) if isinstance(special, dict) and "unk" in special else ()):
        _field(special, key, INT, where)
    for key, want in DEFAULT_SPECIAL_TOKENS.items():
        if special[key] < 0:
            raise ValueError(f"{where}: key '{key}' is {special[key]} (a token id is >= 0)")
        if special[key] != want:
            raise ValueError(f"{where}: key '{key}' must be {want} (the vocabulary's <pad>, <s>, "
                             f"</s> are ids 0, 1, 2)")
    return special


def model_info(path):
    """The model a file describes: {"model_kind", "model_config", "model_prefix",
    "vocab" (list or None), "special_tokens", "tokenizer" (or None), "block"
    (block(): activation, norm, bias), "attention" (attention_keys():
    kv_heads, rope_base, rel_buckets, rel_max_distance; the relative-bias
    tables checked by relative_tables()), "experts" (moe_keys(): experts, experts_per_token,
    capacity_factor, aux_loss), "config" (model_config(): every key with its
    default filled in), "labels" (a classifier's label names, or None), for a
    vit "image" (vit_image()), and for a BPE tokenizer "bpe" (its merges
    and pattern) and "token_bytes" (each id's bytes, None for a special token)}.

    It reads the header only, and checks what qkv's loader and the trainer
    (train --load, --init-from) check before they use a file
    (docs/checkpoint-format.md, "What a reader checks"): model_config read
    strictly (model_config()), its sizes against the tensors
    (check_config_fits()), the tensors exactly the model's names and shapes
    (check_tensors()), only dtypes qkv reads, metadata 'labels' only in a
    classifier (check_labels()), 'vocab', 'special_tokens', 'tokenizer' and
    'bpe' as the trainer reads them, and a training checkpoint's 'format',
    'model_prefix' and optimizer state's names and shapes
    (check_optimizer_state()). NOT_CHECKED lists what it leaves to qkv.
    Raises ValueError naming the file and the key (or the tensor) when a
    part is missing or disagrees."""
    header = read_header(path)
    md = header.get("__metadata__") or {}
    where = brief(path)
    for key in ("model_kind", "model_config"):
        if key not in md:
            raise ValueError(f"{where}: metadata has no '{key}'")
    kind, config = md["model_kind"], _json_key(md, "model_config", path)
    if kind not in VOCAB_KEYS:
        raise ValueError(f"{where}: metadata 'model_kind' is '{brief(kind)}' (expected {', '.join(VOCAB_KEYS)})")
    if not isinstance(config, dict):
        raise ValueError(f"{where}: metadata 'model_config' is not a JSON object")
    vocab = _json_key(md, "vocab", path) if "vocab" in md else None
    if "vocab" in md and not (isinstance(vocab, list) and all(isinstance(t, str) for t in vocab)):
        raise ValueError(f"{where}: metadata 'vocab' is not a JSON list of strings")
    sizes = VOCAB_KEYS[kind]
    if vocab is not None and any(config.get(k) != len(vocab) for k in sizes):
        got = ", ".join(f"{k} {brief(json.dumps(config.get(k)))}" for k in sizes)
        raise ValueError(f"{where}: metadata 'vocab' has {len(vocab)} tokens but model_config has {got}")
    if vocab is not None and not sizes and len(vocab) != 3:
        raise ValueError(f"{where}: metadata 'vocab' has {len(vocab)} tokens, but a {kind} reads no "
                         f"tokens: its vocabulary is the 3 special tokens (or leave the key out)")
    if vocab is not None and vocab[:3] != ["<pad>", "<s>", "</s>"]:
        raise ValueError(f"{where}: metadata 'vocab' must start with <pad>, <s>, </s> "
                         f"(it starts {brief(json.dumps(vocab[:3]))})")
    special = _special_tokens(md, path)
    prefix = md.get("model_prefix", "")
    info = {"model_kind": kind, "model_config": config, "model_prefix": prefix,
            "vocab": vocab, "special_tokens": special, "tokenizer": md.get("tokenizer"),
            "block": block(config, f"{where}: metadata 'model_config'"),
            "attention": attention_keys(config, kind, [n for n in header if n != "__metadata__"],
                                        f"{where}: metadata 'model_config'"),
            "experts": moe_keys(config, f"{where}: metadata 'model_config'")}
    shapes = {n: e["shape"] for n, e in header.items() if n != "__metadata__"}
    relative_tables(kind, config, info["attention"], shapes, prefix, where)
    if kind == "vit":
        info["image"] = vit_image(config, f"{where}: metadata 'model_config'")
    # As qkv builds the model: the configuration read strictly, checked
    # against the tensors, then every tensor the model has, no more.
    if "format" in md:
        if md["format"] not in ("qkv-train-v3", "qkv-train-v2"):
            raise ValueError(f"{where}: checkpoint format '{brief(md['format'])}' is not the "
                             f"'qkv-train-v3' (or v2) qkv reads")
        if prefix != "model.":
            raise ValueError(f"{where}: metadata 'model_prefix' is '{brief(prefix)}', but a training "
                             f"checkpoint keeps its weights under 'model.'")
    cfg = info["config"] = model_config(kind, config, f"{where}: metadata 'model_config'")
    runs_on(cfg, f"{where}: metadata 'model_config'")
    check_config_fits(path, kind, cfg, shapes, prefix)
    check_tensors(path, kind, cfg, header, prefix)
    for name, e in header.items():
        if name != "__metadata__" and e["dtype"] not in QKV_DTYPES:
            raise ValueError(f"{where}: tensor '{brief(name)}': dtype {e['dtype']} is not supported "
                             f"(qkv reads F32, F64, F16 and BF16)")
    info["labels"] = check_labels(path, kind, cfg, md)
    check_optimizer_state(path, kind, cfg, header, md)
    if "tokenizer" in md and md["tokenizer"] not in ("char", "word", "bpe"):
        raise ValueError(f"{where}: metadata 'tokenizer' is '{brief(md['tokenizer'])}' (expected char, word or bpe)")
    if (md.get("tokenizer") == "bpe") != ("bpe" in md):
        raise ValueError(f"{where}: the file's parts disagree: metadata 'tokenizer' is "
                         f"'{brief(md.get('tokenizer', '(none)'))}' and 'bpe' is {'there' if 'bpe' in md else 'missing'}")
    if "bpe" in md:
        bpe = _json_key(md, "bpe", path)
        lengths = bpe_token_lengths(bpe, f"{where}: metadata 'bpe'")
        if vocab is None:
            raise ValueError(f"{where}: a BPE tokenizer needs metadata 'vocab'")
        n = len(vocab) - len(lengths)  # the special tokens come first
        if n < 3:
            raise ValueError(f"{where}: metadata 'vocab' has {len(vocab)} tokens, too few for 3 special tokens and the {len(lengths)} of 'bpe'")
        # The lengths first: no token is built longer than its entry (merges
        # that double a token each time would ask for 2^merges bytes).
        for i, size in enumerate(lengths):
            if len(vocab[n + i]) != size:
                raise ValueError(f"{where}: metadata 'vocab': entry {n + i} is '{brief(vocab[n + i])}' but BPE token {i} of 'bpe' is {size} bytes long")
        tokens = bpe_token_bytes(bpe, f"{where}: metadata 'bpe'", max_bytes=sum(lengths))
        for i, t in enumerate(tokens):
            if vocab[n + i] != visible(t):
                raise ValueError(f"{where}: metadata 'vocab': entry {n + i} is '{brief(vocab[n + i])}' but BPE token {i} of 'bpe' is '{brief(visible(t))}'")
        info["bpe"] = bpe
        info["token_bytes"] = [None] * n + tokens
    elif vocab is not None and len(set(vocab)) != len(vocab):
        seen = set()
        twice = next(t for t in vocab if t in seen or seen.add(t))
        raise ValueError(f"{where}: metadata 'vocab' holds '{brief(twice)}' twice (a token has one id)")
    return info


# What model_info() and the command line leave to qkv: said in --help and in
# the listing of a training checkpoint.
NOT_CHECKED = ("not checked here (train --load checks them): a training checkpoint's train_config "
               "settings, the signs of the second moments, the random streams and the data "
               "files' hashes; the train program's own limits on the architecture; whether the "
               "BPE pattern compiles")


USAGE = "usage: python3 tools/qkv_checkpoint.py FILE.safetensors   (--help: what it checks)"

HELP = f"""{USAGE}

Lists a safetensors file: its tensors, its metadata keys and, for a qkv
model file or training checkpoint (metadata 'model_kind'), its model. A file
qkv's loader would refuse is refused instead, in one line on stderr naming
the file and the key or tensor, with exit status 1. Checked, as qkv checks
them (docs/checkpoint-format.md, "What a reader checks"):

  - the bytes: the header's length, JSON, entries, dtypes and offsets;
  - model_config: every field of the family with its JSON type, every key's
    range (kv_heads, rope_base, rel_buckets, experts, ...), bert's head,
    classes, sep_id and mask_id;
  - the configuration against the tensors: its sizes against the
    embeddings, layers, attention and FFN weights and position tables, and
    the tensors under model_prefix exactly the model's names and shapes
    (none missing, none left over);
  - every weight finite (this reads the numbers; train --allow-nonfinite
    loads such a file anyway);
  - metadata 'labels' only in a classifier (a bert with head classify, a
    vit), one distinct name per class; 'vocab' starting <pad>, <s>, </s>,
    distinct, as long as the model's vocabulary; 'special_tokens' 0, 1, 2;
    'tokenizer' char, word or bpe, and 'bpe' agreeing with it and with
    'vocab' (the merges counted before any is expanded);
  - what the attention needs to run: rope_base, kv_heads and rel_buckets
    only with the standard, memory-efficient or auto kernel, rope_base on an
    even d_k;
  - a training checkpoint's 'format', its prefix 'model.', its optimizer
    state's names and shapes (train_config's optimizer: exp_avg.<i> and
    exp_avg_sq.<i>, or momentum.<i>, of parameter i's shape, for every
    parameter or none), its counts (optim.step equal to 'step',
    optim.param_steps).

Not checked here (train --load checks them): a training checkpoint's
train_config settings (their ranges, context against max_positions, ...),
the signs of Adam's second moments, the random streams and the data
files' hashes; the train program's own limits on the architecture, beyond
what the model takes (d_model at most 16384, layers 1..128, at most 1024
experts, global_every >= 1, a seq2seq's encoder_layers equal to its
decoder_layers and src_vocab to tgt_vocab, ...); whether the BPE pattern
compiles. A listing of a training checkpoint ends with a line saying so."""


def main(argv):
    if len(argv) == 2 and argv[1] in ("-h", "--help"):
        print(HELP)
        return
    if len(argv) != 2:
        sys.exit(USAGE)
    header = read_header(argv[1])
    md = header.pop("__metadata__", None) or {}
    info = model_info(argv[1]) if "model_kind" in md else None  # checked before a line is printed
    if info is not None:  # the numbers too: the model's (and a checkpoint's optimizer state)
        check_finite(argv[1], prefix="" if "format" in md else info["model_prefix"])
        check_step(argv[1], md)
    print(f"{argv[1]}: {len(header)} tensors, {sum(math.prod(e['shape']) for e in header.values())} numbers")
    print("metadata keys:", " ".join(brief(k) for k in sorted(md)) or "(none)")
    if "format" in md:
        print("format:", brief(md["format"]), " step:", brief(md.get("step", "?")))
    if info is not None:
        vocab = info["vocab"]
        print("model_kind:", info["model_kind"])
        print("model_config:", json.dumps(info["model_config"], sort_keys=True))
        blk = info["block"]
        hidden = f" (hidden {swiglu_hidden(info['model_config'].get('d_ff', 1))})"
        print(f"block: {blk['norm']} norm, {blk['activation']}{hidden * (blk['activation'] == 'swiglu')},",
              "biases" if blk["bias"] else "no biases")
        att, heads = info["attention"], info["model_config"].get("heads")
        print(f"attention: {heads} heads, {att['kv_heads']} key/value heads,",
              f"rotary positions (rope_base {att['rope_base']})" if att["rope_base"] else "no rotation")
        if att["rel_buckets"]:
            print(f"relative positions: {att['rel_buckets']} buckets, max distance "
                  f"{att['rel_max_distance']}")
        if "image" in info:
            im = info["image"]
            print(f"image: {im['channels']} x {im['image']} x {im['image']} in {im['patch']} x {im['patch']} "
                  f"patches ({im['patches']} + the class token), {im['classes']} classes")
        print("vocab:", "(none)" if vocab is None else f"{len(vocab)} tokens {[brief(t) for t in vocab[:12]]}{' ...' * (len(vocab) > 12)}")
        print("special_tokens:", json.dumps(info["special_tokens"]), " tokenizer:", brief(info["tokenizer"] or "(none)"))
        if "bpe" in info:
            print(f"bpe: {len(info['bpe']['merges'])} merges, pattern {brief(info['bpe']['pattern'])}")
        if info["labels"] is not None:
            labels = info["labels"]
            print(f"labels: {len(labels)} {[brief(t) for t in labels[:12]]}{' ...' * (len(labels) > 12)}")
    for name in sorted(header):
        print(f"  {brief(name):<52} {header[name]['dtype']} {header[name]['shape']}")
    if "format" in md:
        print(NOT_CHECKED)


def cli(argv):
    """The command line: main() with every error as one line on stderr
    naming the file (and the tensor or key); returns the exit status."""
    try:
        main(argv)
        return 0
    except OSError as e:
        where = brief(e.filename) if e.filename is not None else brief(argv[1])
        print(f"error: {where}: {e.strerror or brief(e)}", file=sys.stderr)
    except ValueError as e:  # the reader's own messages name the file and the key
        print(f"error: {e}", file=sys.stderr)
    except Exception as e:  # a fault this reader did not foresee: still one line
        print(f"error: {brief(argv[1])}: cannot be read ({type(e).__name__}: {brief(e)})", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(cli(sys.argv))
