#!/usr/bin/env python3
"""Builds BERT's labelled text set from the machine's own apt package lists:
each binary package's one-line description, labelled with its Section.

    python3 datasets/make_packages.py --out DIR [--lists /var/lib/apt/lists] [--small N]

Reads every binary Packages list of the lists folder (as apt stores them:
plain, .gz, .xz or .lz4; `/usr/lib/apt/apt-helper cat-file` decompresses any
of them) and, when there are any, its Translation-en files. For each binary
package stanza it takes Package, Source (default: the package's own name; a
version in parentheses is dropped), Section (the archive area contrib/,
non-free/ or non-free-firmware/ dropped) and the Description's first line,
the short description. Where a list carries only Description-md5 (an archive
that moves descriptions out to Translation-en), the short description is the
first line of the Translation-en entry with that md5; a stanza with neither is
counted in info.json and skipped.

Which sections, and why (SECTIONS below). The task should be about the
words of a description, not its giveaways. Left out:
  - libs, libdevel, oldlibs, debug, introspection: what such a package is
    follows from its name (lib*, *-dev, *-dbg, gir1.2-*) and its description
    says it in a fixed phrase ("development files", "debugging symbols",
    "GObject introspection data");
  - doc, localization, fonts: the description names the kind itself
    ("documentation", "translations", "font");
  - the language ecosystems (python, perl, ruby, rust, golang, javascript,
    java, haskell, gnu-r, php, ocaml, lisp, cli-mono) and interpreters: the
    section is the programming language the package is written in or for,
    and the description nearly always names it ("Python 3 module", "Perl
    module", "Rust crate"), as the package's name does (python3-*, lib*-perl,
    librust-*, golang-*, node-*);
  - tasks, metapackages: a handful of sources each, descriptions that list
    other packages;
  - utils, misc, devel, x11, gnome, kde, xfce: catch-alls, or sorted by the
    desktop a program belongs to rather than by what it does;
  - the small ones (fewer than ~200 binary packages in Debian 12's main).
Kept: twelve sections named for what a program is for (SECTIONS).

The split is by a sha256 of the SOURCE package's name, never the binary's:
the binaries of one source (0ad, 0ad-data, 0ad-data-common) share
near-identical descriptions, and split by binary name they would leak from
training into test. sha256(source) read as a number, mod 10: 0-7 train, 8
valid, 9 test. Exact repeats of (description, section) are kept once, under
the smallest (source, package) that has them, before the split.

Writes DIR/train.tsv, valid.tsv and test.tsv ("description<TAB>section" lines,
sorted), DIR/pretrain.txt (for masked-language-model pre-training: the
descriptions of every package whose source falls in the training split, of any
section, not only the chosen ones, less any description that is also in
valid.tsv or test.tsv; distinct, sorted, one per line) and DIR/info.json (the
lists read with their sha256 and their Release file's Date:, the counts per
section and split, and the choices above). The same lists give the same bytes.

--small N keeps, in each split, the N examples with the smallest sha256 of
their line (and pretrain.txt holds the kept training descriptions only), for
quick runs.
"""
import argparse
import gzip
import hashlib
import json
import lzma
import os
import pathlib
import re
import subprocess
import sys

SECTIONS = ["admin", "database", "editors", "games", "graphics", "mail", "math", "net",
            "science", "sound", "text", "video"]
DROPPED = {
    "named by the package's name and a fixed phrase":
        ["libs", "libdevel", "oldlibs", "debug", "introspection"],
    "the description names the kind itself": ["doc", "localization", "fonts"],
    "a programming language, named in the description and the package name":
        ["python", "perl", "ruby", "rust", "golang", "javascript", "java", "haskell", "gnu-r",
         "php", "ocaml", "lisp", "cli-mono", "interpreters"],
    "few sources, descriptions that list other packages": ["tasks", "metapackages"],
    "catch-alls, or sorted by desktop rather than purpose":
        ["utils", "misc", "devel", "x11", "gnome", "kde", "xfce"],
}
AREAS = ("contrib/", "non-free-firmware/", "non-free/")
SPLITS = ("train", "valid", "test")
APT_HELPER = "/usr/lib/apt/apt-helper"
COMPRESSED = (".lz4", ".gz", ".xz", ".bz2", ".zst", ".lzma")


class Refused(Exception):
    """A one-line message for the user (no traceback)."""


def base_name(path):
    """The list's name without its compression suffix."""
    name = path.name
    for ext in COMPRESSED:
        if name.endswith(ext):
            return name[: -len(ext)]
    return name


def read_list(path):
    """A list file's text, decompressed by apt-helper (any of apt's formats);
    without apt-helper, plain, .gz and .xz through Python's own modules."""
    if os.access(APT_HELPER, os.X_OK):
        r = subprocess.run([APT_HELPER, "cat-file", str(path)], capture_output=True)
        if r.returncode != 0:
            raise Refused(f"{path}: apt-helper cat-file failed: "
                          f"{r.stderr.decode('utf-8', 'replace').strip()[:200]}")
        data = r.stdout
    elif path.suffix == ".gz":
        data = gzip.open(path).read()
    elif path.suffix == ".xz":
        data = lzma.open(path).read()
    elif path.suffix in COMPRESSED:
        raise Refused(f"{path}: {path.suffix} needs {APT_HELPER} (the apt package)")
    else:
        data = path.read_bytes()
    return data.decode("utf-8", "replace")


def stanzas(text):
    """Each stanza of a deb822 file as {field: value}; a continuation line is
    appended to its field's value after a newline."""
    out, cur, key = [], {}, None
    for line in text.split("\n"):
        if not line.strip():
            if cur:
                out.append(cur)
            cur, key = {}, None
        elif line[0] in " \t":
            if key:
                cur[key] += "\n" + line.strip()
        elif ":" in line:
            key, value = line.split(":", 1)
            cur[key] = value.strip()
    if cur:
        out.append(cur)
    return out


def one_line(s):
    """Whitespace (tabs included) collapsed to single spaces."""
    return " ".join(s.split())


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def split_of(source):
    """train, valid or test by the sha256 of the source package's name."""
    bucket = int(hashlib.sha256(source.encode("utf-8")).hexdigest(), 16) % 10
    return "train" if bucket < 8 else "valid" if bucket == 8 else "test"


def release_date(lists, name):
    """The Date: of the InRelease (or Release) file whose prefix the list's
    name begins with (the longest such), and that file's name."""
    best = None
    for p in lists.iterdir():
        for kind in ("InRelease", "Release"):
            if p.name.endswith("_" + kind) and p.is_file():
                prefix = p.name[: -len(kind)]
                if name.startswith(prefix) and (best is None or len(prefix) > len(best[0])):
                    best = (prefix, p)
    if best is None:
        return None, None
    for line in best[1].read_text("utf-8", "replace").split("\n"):
        if line.startswith("Date:"):
            return best[1].name, line[5:].strip()
    return best[1].name, None


def build(lists, small):
    if not lists.is_dir():
        raise Refused(f"--lists {lists}: not a folder (run apt-get update first, or name another)")
    files = sorted(p for p in lists.iterdir() if p.is_file())
    packages = [p for p in files if base_name(p).endswith("_Packages")]
    translations = [p for p in files if base_name(p).endswith("_Translation-en")]
    if not packages:
        raise Refused(f"--lists {lists}: no binary Packages lists there (run apt-get update first)")

    # Translation-en: Description-md5 -> the short description.
    by_md5 = {}
    for p in translations:
        for s in stanzas(read_list(p)):
            if "Description-md5" in s and "Description-en" in s:
                by_md5.setdefault(s["Description-md5"], one_line(s["Description-en"].split("\n")[0]))

    lists_info, rows = [], []  # rows: (description, section, source, package)
    skipped = {"no description": 0}
    for p in packages:
        text = read_list(p)
        release, date = release_date(lists, base_name(p))
        count = 0
        for s in stanzas(text):
            if "Package" not in s:
                continue
            count += 1
            package = s["Package"]
            source = re.sub(r"\s*\(.*\)\s*$", "", s.get("Source", package)).strip() or package
            section = s.get("Section", "")
            for area in AREAS:
                if section.startswith(area):
                    section = section[len(area):]
            desc = one_line(s["Description"].split("\n")[0]) if s.get("Description") else ""
            if not desc:
                desc = by_md5.get(s.get("Description-md5", ""), "")
            if not desc:
                skipped["no description"] += 1
                continue
            rows.append((desc, section, source, package))
        lists_info.append({"file": p.name, "sha256": sha256_file(p), "bytes": p.stat().st_size,
                           "stanzas": count, "release_file": release, "date": date})

    # Exact (description, section) repeats kept once, under the smallest
    # (source, package); then each example goes to its source's split.
    first = {}
    for desc, section, source, package in sorted(rows, key=lambda r: (r[2], r[3], r[0], r[1])):
        first.setdefault((desc, section), source)
    chosen = set(SECTIONS)
    split = {name: [] for name in SPLITS}
    pretrain = set()
    for (desc, section), source in first.items():
        part = split_of(source)
        if section in chosen:
            split[part].append((desc, section))
        if part == "train":
            pretrain.add(desc)
    if small:
        for name in SPLITS:
            split[name] = sorted(split[name], key=lambda e: hashlib.sha256(
                f"{e[0]}\t{e[1]}".encode("utf-8")).hexdigest())[:small]
        pretrain = {desc for desc, _ in split["train"]}
    held = {desc for name in ("valid", "test") for desc, _ in split[name]}
    pretrain = sorted(pretrain - held)
    for name in SPLITS:
        split[name].sort()

    counts = {sec: {name: 0 for name in SPLITS} for sec in SECTIONS}
    for name in SPLITS:
        for _, sec in split[name]:
            counts[sec][name] += 1
    info = {
        "script": "datasets/make_packages.py",
        "lists": lists_info,
        "translations": [{"file": p.name, "sha256": sha256_file(p)} for p in translations],
        "sections": SECTIONS,
        "sections_dropped": DROPPED,
        "counts": counts,
        "totals": {name: len(split[name]) for name in SPLITS},
        "pretrain_lines": len(pretrain),
        "stanzas_read": len(rows) + skipped["no description"],
        "skipped": skipped,
        "choices": {
            "split": "sha256(source package name) mod 10: 0-7 train, 8 valid, 9 test",
            "source": "Source field without its version; the package name when absent",
            "section": "Section without contrib/, non-free/, non-free-firmware/",
            "text": "the short description (first line of Description, or of the "
                    "Translation-en entry of its Description-md5), whitespace collapsed",
            "dedup": "exact (description, section) repeats kept once, under the smallest "
                     "(source, package), before the split",
            "pretrain": "descriptions of every section whose source is in the training split, "
                        "less those in valid or test; distinct, sorted"
                        + (" (--small: the kept training descriptions)" if small else ""),
            "small": small,
        },
    }
    return split, pretrain, info


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lists", default="/var/lib/apt/lists", help="apt's lists folder")
    ap.add_argument("--out", required=True, help="folder for train/valid/test.tsv, "
                    "pretrain.txt, info.json")
    ap.add_argument("--small", type=int, default=0,
                    help="keep N examples per split (deterministic), 0 = all")
    args = ap.parse_args(argv)
    try:
        if args.small < 0:
            raise Refused(f"--small {args.small}: expected 0 (all) or a count above 0")
        split, pretrain, info = build(pathlib.Path(args.lists), args.small)
        out = pathlib.Path(args.out)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise Refused(f"--out {out}: cannot write there ({e.strerror})")
        for name in SPLITS:
            (out / f"{name}.tsv").write_text(
                "".join(f"{d}\t{s}\n" for d, s in split[name]), encoding="utf-8")
        (out / "pretrain.txt").write_text("".join(d + "\n" for d in pretrain), encoding="utf-8")
        (out / "info.json").write_text(json.dumps(info, indent=1, sort_keys=True) + "\n",
                                       encoding="utf-8")
    except Refused as e:
        print(f"make_packages: {e}", file=sys.stderr)
        return 1
    t = info["totals"]
    print(f"make_packages: {len(info['lists'])} lists, {info['stanzas_read']} stanzas -> "
          f"{t['train']} train, {t['valid']} valid, {t['test']} test examples in "
          f"{len(SECTIONS)} sections; {len(pretrain)} pretrain lines -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
