#!/usr/bin/env python3
"""Draws docs/figures/relative-bias.svg: T5's bucket of each relative
position, key position minus query position, from -128 to 128.

    python3 tools/figures/relative_bias.py        (from the top of the tree)

`bucket` mirrors `relative_position_bucket` (nn/relative_bias.cpp) line by
line, in double, with qkv's defaults, 32 buckets and a maximum distance of
128 (trainer/config.h: rel_buckets, rel_max_distance). Left, bidirectional,
as an encoder uses it: 16 buckets per direction, 8 of them exact. Right,
causal, as a decoder or a GPT uses it: all 32 for keys at or before the
query, 16 exact, and every later key in bucket 0 (the causal mask hides it).
Past the exact ones the buckets widen logarithmically, and every distance
from the last bucket's start on, up to max_distance and beyond, shares it.
Every number in the figure is computed here (standard library).
"""

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from svgplot import BLUE, ORANGE, Axes, Svg  # noqa: E402

BUCKETS, MAX_DISTANCE = 32, 128
RELS = list(range(-128, 129))
OUT = "docs/figures/relative-bias.svg"


def bucket(rel, bidirectional, buckets=BUCKETS, max_distance=MAX_DISTANCE):
    """relative_position_bucket: rel = key position - query position."""
    nb, base = buckets, 0
    if bidirectional:
        nb = buckets // 2                # per direction
        base = nb if rel > 0 else 0      # a later key: the upper half
        n = -rel if rel < 0 else rel     # |rel|
    else:
        n = -rel if rel < 0 else 0       # max(-rel, 0): an earlier key's distance
    exact = nb // 2                      # distances 0 .. exact-1 have a bucket each
    if n < exact:
        return base + n
    large = exact + math.log(n / exact) / math.log(max_distance / exact) * (nb - exact)
    return base + min(int(large), nb - 1)  # int() truncates, as static_cast<int64_t>


def ranges(bidirectional):
    """Each bucket's distances n = |rel| (or -rel), for the printout."""
    out = {}
    sign = -1
    for n in range(0, 200):
        out.setdefault(bucket(sign * n, bidirectional), []).append(n)
    return {b: (ns[0], ns[-1]) for b, ns in sorted(out.items())}


def panel(svg, left, bidirectional, colour, title):
    ax = Axes(svg, left, 50, 300, 230, (RELS[0], RELS[-1]), (-1, BUCKETS))
    ax.frame([-128, -96, -64, -32, 0, 32, 64, 96, 128], [0, 4, 8, 12, 16, 20, 24, 28, 31],
             "key position - query position", "bucket", title)
    nb = BUCKETS // 2 if bidirectional else BUCKETS
    exact = nb // 2
    # the exact distances, shaded
    spans = [(-(exact - 1), 0), (1, exact)] if bidirectional else [(-(exact - 1), 0)]
    for lo, hi in spans:
        svg.rect(ax.x(lo - 0.5), 50, ax.x(hi + 0.5) - ax.x(lo - 0.5), 230, "#eeeeee")
    pts = []
    for rel in RELS:  # a step: flat across each position's width
        b = bucket(rel, bidirectional)
        pts += [(ax.x(rel - 0.5), ax.y(b)), (ax.x(rel + 0.5), ax.y(b))]
    svg.polyline(pts, colour, 2)
    return ax, exact


def main():
    svg = Svg(820, 360, "T5's relative position buckets against the key's offset from the query, "
                        "bidirectional and causal")
    ax, exact = panel(svg, 70, True, BLUE, "Bidirectional (an encoder)")
    svg.text(ax.x(-112), ax.y(25), "keys before:", 11, "start", BLUE)
    svg.text(ax.x(-112), ax.y(25) + 14, f"buckets 0 .. {BUCKETS // 2 - 1}", 11, "start", BLUE)
    svg.text(ax.x(40), ax.y(14), "keys after:", 11, "start", BLUE)
    svg.text(ax.x(40), ax.y(14) + 14, f"buckets {BUCKETS // 2} .. {BUCKETS - 1}", 11, "start", BLUE)
    svg.text(ax.x(40), ax.y(5), f"shaded: {exact} exact", 11, "start")
    svg.text(ax.x(40), ax.y(5) + 14, "distances each way", 11, "start")
    svg.arrow(ax.x(38), ax.y(5) - 4, ax.x(10), ax.y(6), "black", 1, 6)
    ax2, exact2 = panel(svg, 480, False, ORANGE, "Causal (a decoder, a GPT)")
    svg.text(ax2.x(-exact2 / 2), ax2.y(BUCKETS) + 16, f"{exact2} exact", 11, "middle")
    svg.text(ax2.x(16), ax2.y(5), "later keys: bucket 0", 11, "start", ORANGE)
    svg.text(ax2.x(16), ax2.y(5) + 14, "(masked anyway)", 11, "start", ORANGE)
    svg.text(410, 335, f"{BUCKETS} buckets, max distance {MAX_DISTANCE} (qkv's defaults); shaded: one "
             "bucket per distance; beyond, log-spaced, the last bucket to the end.", 10,
             "middle", "#555555")
    svg.text(410, 350, "Mirrors relative_position_bucket (nn/relative_bias.cpp). "
             "Made by tools/figures/relative_bias.py.", 10, "middle", "#555555")
    svg.write(OUT)
    for name, bidi in (("bidirectional, keys before the query", True), ("causal", False)):
        print(name + ":", ", ".join(f"{b}: {lo}-{hi}" if lo != hi else f"{b}: {lo}"
                                    for b, (lo, hi) in ranges(bidi).items()))
    print("wrote", OUT)


if __name__ == "__main__":
    main()
