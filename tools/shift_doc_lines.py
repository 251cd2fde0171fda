#!/usr/bin/env python3
"""Moves the line ranges of docs/*.md with the code.

After editing code that a docs page points into, run

    python3 tools/shift_doc_lines.py

from the top of the tree, before committing: it reads `git diff -U0 HEAD`
for core/, autograd/, nn/, optim/ and examples/, and rewrites every range in
the pages' "In the code" sections that refers to a changed file, mapping
each old line number to where that line is now. A line inside a rewritten
hunk maps to the same offset in the new hunk, so check such ranges by eye.
`make test` (tests/test_docs.cpp) then says whether every range still fits.
"""
import glob
import re
import subprocess
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else "."
PATH = r"(?:core|autograd|nn|optim|examples|tests|bench)/\w+\.(?:h|cpp|sh|py)"


def changed_hunks():
    """{file: [(old_start, old_count, new_start, new_count)]} of the uncommitted diff."""
    diff = subprocess.run(
        ["git", "-C", ROOT, "diff", "-U0", "HEAD", "--", "core", "autograd", "nn", "optim", "examples"],
        capture_output=True, text=True, check=True).stdout
    hunks, current = {}, None
    for line in diff.splitlines():
        if line.startswith("+++ b/"):
            current = line[6:]
            hunks[current] = []
        m = re.match(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", line)
        if m and current:
            count = lambda s: 1 if s is None else int(s)
            hunks[current].append((int(m[1]), count(m[2]), int(m[3]), count(m[4])))
    return hunks


def mapper(hunks):
    """old line -> new line for one file."""
    def new_line(x):
        shift = 0
        for a, b, c, d in hunks:
            if b == 0:  # lines inserted after line a
                if x > a:
                    shift += d
                continue
            if x < a:
                break
            if x >= a + b:
                shift += d - b
                continue
            return c + min(x - a, max(d - 1, 0))  # inside a rewritten hunk
        return x + shift
    return new_line


def blocks_in_the_code(lines):
    """Index lists of the paragraphs and bullets of the "In the code" sections."""
    blocks, inside, after_blank = [], False, True
    for i, line in enumerate(lines):
        if line.startswith("## "):
            inside, after_blank = line.startswith("## In the code"), True
            continue
        if not inside or not line.strip():
            after_blank = True
            continue
        if after_blank or line.startswith("- "):
            blocks.append([i])
        else:
            blocks[-1].append(i)
        after_blank = False
    return blocks


def main():
    maps = {f: mapper(h) for f, h in changed_hunks().items()}
    in_parens = re.compile(r"(\((" + PATH + r"),\s*lines?\s+)(\d+)(?:-(\d+))?\)")
    bare = re.compile(r"\b([Ll]ines?\s+)(\d+)(?:-(\d+))?\b")

    def moved(mp, m, start, end):
        a = str(mp(int(m[start])))
        return a + ("-" + str(mp(int(m[end]))) if m[end] else "")

    for page in sorted(glob.glob(f"{ROOT}/docs/*.md")):
        text = open(page).read()
        lines = text.split("\n")
        context = None
        for block in blocks_in_the_code(lines):
            t = "\n".join(lines[i] for i in block)
            m = re.match(r"^(?:- )?(" + PATH + r")\b", t)
            if m:
                context = m[1]
            pieces = re.split(r"(\(" + PATH + r",\s*lines?\s+\d+(?:-\d+)?\))", t)
            for k, piece in enumerate(pieces):
                p = in_parens.fullmatch(piece)
                if p:
                    if p[2] in maps:
                        pieces[k] = p[1] + moved(maps[p[2]], p, 3, 4) + ")"
                elif context in maps:
                    mp = maps[context]
                    pieces[k] = bare.sub(lambda b: b[1] + moved(mp, b, 2, 3), piece)
            for i, line in zip(block, "".join(pieces).split("\n")):
                lines[i] = line
        new = "\n".join(lines)
        if new != text:
            open(page, "w").write(new)
            print("moved ranges in", page)


main()
