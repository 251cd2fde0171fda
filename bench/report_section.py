"""Replaces one marked section of a benchmark report, leaving the rest as it is.

bench/run_decode.sh and bench/run_mpi.sh each own one section of
BENCHMARKS.md, between <!-- NAME:begin --> and <!-- NAME:end --> lines; a
report without the section gets it appended.
"""
import os


def write_section(path, name, lines):
    """lines: the section's lines, its begin and end markers included."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    section = "\n".join(lines) + "\n"
    text = open(path).read() if os.path.exists(path) else "# qkv benchmarks\n"
    b, e = text.find(begin), text.find(end)
    if b >= 0 and e > b:
        text = text[:b] + section + text[e + len(end):].lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    with open(path, "w") as fh:
        fh.write(text)
