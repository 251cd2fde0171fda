#!/usr/bin/env python3
"""Builds the English prose corpus the text families train on, from a Debian
package: the Python 3.11 documentation (python3.11-doc).

Why this package: it is in Debian's main archive on every architecture, it is
English written by many people for readers (tutorials, how-tos, the language
and library reference), it is large enough (about 7 MB of paragraphs), and its
licence (the PSF's) allows training on it. Only the text of the HTML
paragraphs (<p> elements) is kept: code samples (<pre>), tables of contents,
indexes and navigation are markup or code, not prose. The changelog
(whatsnew/changelog.html) is a list of bug numbers and is left out.

    python3 datasets/make_prose.py [--html DIR] [--out DIR] [--valid-every N]

writes OUT/train.txt and OUT/valid.txt (one paragraph per line, a blank line
between documents) and OUT/MANIFEST.json: the package and its version, the
sha256 of every file read and of both outputs, and the byte counts. The
held-out split is cut here, in bytes, before any tokenizer sees the text:
every N-th document (in sorted path order; N = 20 by default) goes to
valid.txt whole. Deterministic: the same package version gives the same bytes.
`make prose` installs the package (.ci/deps) and runs this script into
build/datasets/prose/.
"""
import argparse
import hashlib
import html.parser
import json
import pathlib
import subprocess
import sys

PACKAGE = "python3.11-doc"
HTML_DIR = "/usr/share/doc/python3.11/html"
SKIP = {"whatsnew/changelog.html", "genindex.html", "py-modindex.html", "search.html",
        "genindex-all.html"}


class Paragraphs(html.parser.HTMLParser):
    """The text of every <p> element outside <pre>, whitespace collapsed."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.depth = 0
        self.pre = 0
        self.parts = []
        self.paragraphs = []

    def handle_starttag(self, tag, attrs):
        if tag == "p":
            self.depth += 1
        elif tag == "pre":
            self.pre += 1

    def handle_endtag(self, tag):
        if tag == "pre" and self.pre:
            self.pre -= 1
        elif tag == "p" and self.depth:
            self.depth -= 1
            if self.depth == 0:
                text = " ".join("".join(self.parts).split())
                if text:
                    self.paragraphs.append(text)
                self.parts = []

    def handle_data(self, data):
        if self.depth and not self.pre:
            self.parts.append(data)


def package_version(name):
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", name], capture_output=True,
                             text=True, check=False)
        return out.stdout.strip() or None
    except OSError:
        return None


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--html", default=HTML_DIR, help=f"the HTML folder (default {HTML_DIR})")
    ap.add_argument("--out", required=True, help="the folder to write train.txt, valid.txt, "
                    "MANIFEST.json into (created; files in it are replaced)")
    ap.add_argument("--valid-every", type=int, default=20,
                    help="every N-th document goes to valid.txt (default 20)")
    ap.add_argument("--min-bytes", type=int, default=5_000_000,
                    help="refuse a corpus smaller than this (default 5 MB; 0 for tests)")
    args = ap.parse_args()
    root = pathlib.Path(args.html)
    if not root.is_dir():
        sys.exit(f"make_prose.py: {args.html} is not a folder: install {PACKAGE} "
                 f"(apt-get install {PACKAGE}, or make prose)")
    if args.valid_every < 2:
        sys.exit(f"make_prose.py: --valid-every {args.valid_every}: must be at least 2")
    files = sorted(p for p in root.rglob("*.html")
                   if p.is_file() and p.relative_to(root).as_posix() not in SKIP)
    if not files:
        sys.exit(f"make_prose.py: no .html files under {args.html}")
    train, valid, read = [], [], {}
    for i, path in enumerate(files):
        raw = path.read_bytes()
        rel = path.relative_to(root).as_posix()
        read[rel] = sha256(raw)
        parser = Paragraphs()
        parser.feed(raw.decode("utf-8", errors="replace"))
        parser.close()
        if not parser.paragraphs:
            continue
        doc = "\n".join(parser.paragraphs) + "\n\n"
        (valid if i % args.valid_every == 0 else train).append(doc)
    out = pathlib.Path(args.out)
    texts = {"train.txt": "".join(train).encode("utf-8"),
             "valid.txt": "".join(valid).encode("utf-8")}
    total = sum(len(t) for t in texts.values())
    if total < args.min_bytes:
        sys.exit(f"make_prose.py: only {total} bytes of paragraphs under {args.html} "
                 f"(--min-bytes {args.min_bytes})")
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, data in texts.items():
            tmp = out / (name + ".tmp")
            tmp.write_bytes(data)
            tmp.replace(out / name)
    except OSError as e:
        sys.exit(f"make_prose.py: --out {args.out}: cannot write there: {e.strerror}")
    manifest = {
        "package": PACKAGE, "version": package_version(PACKAGE), "html": str(root),
        "script": "datasets/make_prose.py", "valid_every": args.valid_every,
        "documents": {"train": len(train), "valid": len(valid)},
        "bytes": {k: len(v) for k, v in texts.items()},
        "sha256": {k: sha256(v) for k, v in texts.items()},
        "files_read": read,
    }
    try:
        (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    except OSError as e:
        sys.exit(f"make_prose.py: --out {args.out}: cannot write MANIFEST.json: {e.strerror}")
    print(f"make_prose.py: {len(files)} files of {PACKAGE} {manifest['version']} -> "
          f"{out}/train.txt ({len(texts['train.txt'])} bytes, {len(train)} documents), "
          f"valid.txt ({len(texts['valid.txt'])} bytes, {len(valid)} documents)")


if __name__ == "__main__":
    main()
