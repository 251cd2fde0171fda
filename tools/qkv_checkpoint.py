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


def _parse_json(text, where):
    """One JSON value from `text`, or ValueError "<where> is not valid JSON (...)"."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
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
    tensors = {}
    for name, info in header.items():
        dtype, shape, begin, end = _entry(path, name, info, len(body))
        if dtype not in READ_TYPECODES:
            raise ValueError(f"{brief(path)}: tensor '{brief(name)}' is {dtype}; this reader takes F32 and F64 only")
        values = array.array(READ_TYPECODES[dtype])
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


def bpe_token_bytes(bpe, where):
    """The bytes of each BPE token from metadata 'bpe' ({"pattern", "merges"}):
    0..255 the bytes, 256 + k the concatenation of merge k's pair."""
    if not (isinstance(bpe, dict) and isinstance(bpe.get("pattern"), str) and isinstance(bpe.get("merges"), list)):
        raise ValueError(f"{where}: expected {{\"pattern\": a string, \"merges\": a list of [a, b] pairs}}")
    tokens = [bytes([b]) for b in range(256)]
    for k, m in enumerate(bpe["merges"]):
        ok = isinstance(m, list) and len(m) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in m)
        if not ok or not all(0 <= x < len(tokens) for x in m):
            raise ValueError(f"{where}: merge {k} is {brief(json.dumps(m))}, not a pair of tokens made before token {256 + k}")
        tokens.append(tokens[m[0]] + tokens[m[1]])
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


def attention_keys(config, kind, tensor_names, where="model_config"):
    """{"kv_heads", "rope_base", "rel_buckets", "rel_max_distance"} of a model_config, as docs/checkpoint-format.md
    lists them: kv_heads (grouped-query attention's key/value heads, an integer
    >= 1 dividing heads; absent: every head, returned as heads) and rope_base
    (rotary positions' base, a number in (1, 1e9]; absent: 0, no rotation).
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
    if base and kind == "bert":
        raise ValueError(f"{where}: key 'rope_base' is {brief(json.dumps(base))}: a bert reads "
                         f"its learned position table (leave the key out)")
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


def model_info(path):
    """The model a file describes: {"model_kind", "model_config", "model_prefix",
    "vocab" (list or None), "special_tokens", "tokenizer" (or None), "block"
    (block(): activation, norm, bias), "attention" (attention_keys():
    kv_heads, rope_base, rel_buckets, rel_max_distance; the relative-bias
    tables checked by relative_tables()), "experts" (moe_keys(): experts, experts_per_token,
    capacity_factor, aux_loss), for a vit "image" (vit_image()), and for a BPE tokenizer "bpe" (its merges
    and pattern) and "token_bytes" (each id's bytes, None for a special token)}.
    Raises ValueError naming the file and
    the key when a part is missing or disagrees."""
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
    if vocab is not None and not (isinstance(vocab, list) and all(isinstance(t, str) for t in vocab)):
        raise ValueError(f"{where}: metadata 'vocab' is not a JSON list of strings")
    sizes = VOCAB_KEYS[kind]
    if vocab is not None and any(config.get(k) != len(vocab) for k in sizes):
        got = ", ".join(f"{k} {brief(json.dumps(config.get(k)))}" for k in sizes)
        raise ValueError(f"{where}: metadata 'vocab' has {len(vocab)} tokens but model_config has {got}")
    special = _json_key(md, "special_tokens", path) if "special_tokens" in md else dict(DEFAULT_SPECIAL_TOKENS)
    if not (isinstance(special, dict) and all(isinstance(v, int) for v in special.values())):
        raise ValueError(f"{where}: metadata 'special_tokens' is not a JSON object of token ids")
    info = {"model_kind": kind, "model_config": config, "model_prefix": md.get("model_prefix", ""),
            "vocab": vocab, "special_tokens": special, "tokenizer": md.get("tokenizer"),
            "block": block(config, f"{where}: metadata 'model_config'"),
            "attention": attention_keys(config, kind, [n for n in header if n != "__metadata__"],
                                        f"{where}: metadata 'model_config'"),
            "experts": moe_keys(config, f"{where}: metadata 'model_config'")}
    relative_tables(kind, config, info["attention"],
                    {n: e["shape"] for n, e in header.items() if n != "__metadata__"},
                    info["model_prefix"], where)
    if kind == "vit":
        info["image"] = vit_image(config, f"{where}: metadata 'model_config'")
    if (md.get("tokenizer") == "bpe") != ("bpe" in md):
        raise ValueError(f"{where}: the file's parts disagree: metadata 'tokenizer' is "
                         f"'{brief(md.get('tokenizer', '(none)'))}' and 'bpe' is {'there' if 'bpe' in md else 'missing'}")
    if "bpe" in md:
        bpe = _json_key(md, "bpe", path)
        tokens = bpe_token_bytes(bpe, f"{where}: metadata 'bpe'")
        if vocab is None:
            raise ValueError(f"{where}: a BPE tokenizer needs metadata 'vocab'")
        n = len(vocab) - len(tokens)  # the special tokens come first
        if n < 3:
            raise ValueError(f"{where}: metadata 'vocab' has {len(vocab)} tokens, too few for 3 special tokens and the {len(tokens)} of 'bpe'")
        for i, t in enumerate(tokens):
            if vocab[n + i] != visible(t):
                raise ValueError(f"{where}: metadata 'vocab': entry {n + i} is '{brief(vocab[n + i])}' but BPE token {i} of 'bpe' is '{brief(visible(t))}'")
        info["bpe"] = bpe
        info["token_bytes"] = [None] * n + tokens
    return info


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: python3 tools/qkv_checkpoint.py FILE.safetensors")
    header = read_header(argv[1])
    md = header.pop("__metadata__", None) or {}
    info = model_info(argv[1]) if "model_kind" in md else None  # checked before a line is printed
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
    for name in sorted(header):
        print(f"  {brief(name):<52} {header[name]['dtype']} {header[name]['shape']}")


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
