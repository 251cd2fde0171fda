#!/usr/bin/env python3
"""Draws docs/figures/rope.svg: RoPE turns each pair of a query and a key, and
their score then depends only on the offset s - t.

    python3 tools/figures/rope.py        (from the top of the tree)

The rotation mirrors nn/rope.cpp: `rope_table` (theta_i = base^(-2i/d_k),
base = 10000, the angle of position t is t * theta_i) and `rope_rotate`
(adjacent pairs (x_2i, x_2i+1), y_2i = x_2i cos - x_2i+1 sin,
y_2i+1 = x_2i sin + x_2i+1 cos). A query q and a key k of one head, d_k = 16
(D = 64 with 4 heads), are drawn from N(0, 1) with a fixed seed.
Top: pair 0 of q at position t and of k at position s, drawn in its plane
(theta_0 = 1: one radian per position), for three (t, s) with s - t = 2. Both
arrows turn as t grows; the angle between them stays the same, and so does
the pair's product.
Bottom: the whole score (R_t q) . (R_s k) against the offset s - t, for three
query positions t: the three curves are one.
Every number in the figure is computed here (fixed seed, standard library).
"""

import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from svgplot import BLUE, GREY, ORANGE, Axes, Svg  # noqa: E402

D_K, BASE = 16, 10000.0
PLANES = [(0, 2), (3, 5), (7, 9)]  # (t, s): query and key positions, offset 2
TS = [24, 100, 1000]               # query positions of the bottom plot
OFFSETS = list(range(-24, 25))     # s - t
OUT = "docs/figures/rope.svg"


def theta(i):
    return BASE ** (-2.0 * i / D_K)  # rope_table's theta_i


def rotate(x, t):
    """rope_rotate on one head at position t: pair (2i, 2i+1) turned by t theta_i."""
    y = list(x)
    for i in range(D_K // 2):
        c, s = math.cos(t * theta(i)), math.sin(t * theta(i))
        y[2 * i] = x[2 * i] * c - x[2 * i + 1] * s
        y[2 * i + 1] = x[2 * i] * s + x[2 * i + 1] * c
    return y


def dot(a, b):
    return sum(u * v for u, v in zip(a, b))


def arc(svg, cx, cy, r, a0, a1, colour):
    """An arc from angle a0 to a1 (radians, counter-clockwise on the page)."""
    x0, y0 = cx + r * math.cos(a0), cy - r * math.sin(a0)
    x1, y1 = cx + r * math.cos(a1), cy - r * math.sin(a1)
    sweep = 0 if a1 > a0 else 1  # the page's y points down
    svg.add(f'<path d="M {x0:.1f} {y0:.1f} A {r} {r} 0 0 {sweep} {x1:.1f} {y1:.1f}" '
            f'fill="none" stroke="{colour}" stroke-width="1.5"/>')


def plane(svg, cx, cy, radius, q, k, t, s, scale):
    """Pair 0 of R_t q and R_s k, arrows from the origin; scale maps length to pixels."""
    qt, ks = rotate(q, t)[:2], rotate(k, s)[:2]
    svg.add(f'<circle cx="{cx}" cy="{cy}" r="{radius}" fill="none" stroke="#dddddd"/>')
    svg.line(cx - radius - 8, cy, cx + radius + 8, cy, "#bbbbbb")
    svg.line(cx, cy - radius - 8, cx, cy + radius + 8, "#bbbbbb")
    svg.text(cx + radius + 6, cy + 14, "x_0", 10, "end", "#555555")
    svg.text(cx + 4, cy - radius - 2, "x_1", 10, "start", "#555555")
    aq, ak = math.atan2(qt[1], qt[0]), math.atan2(ks[1], ks[0])
    turn = math.remainder(ak - aq, 2 * math.pi)  # from q to k, in (-pi, pi]
    arc(svg, cx, cy, 0.3 * radius, aq, aq + turn, GREY)
    for vec, colour, name in ((qt, BLUE, "R_t q"), (ks, ORANGE, "R_s k")):
        x, y = cx + scale * vec[0], cy - scale * vec[1]
        svg.arrow(cx, cy, x, y, colour, 2.5, 9)
        n = math.hypot(x - cx, y - cy)
        svg.text(x + 14 * (x - cx) / n, y + 14 * (y - cy) / n + 4, name, 11, "middle", colour, "bold")
    svg.text(cx, cy - radius - 24, f"t = {t}, s = {s}", 13, "middle", weight="bold")
    svg.text(cx, cy + radius + 24, f"q turned {t} rad, k turned {s} rad", 11, "middle")
    svg.text(cx, cy + radius + 40, f"angle from q to k: {math.degrees(turn):.1f} degrees", 11, "middle")
    svg.text(cx, cy + radius + 56, f"pair 0's product: {dot(qt, ks):.3f}", 11, "middle")
    return dot(qt, ks)


def main():
    rng = random.Random(10)  # any seed tells the same story; 10 puts q and k 46 degrees apart
    q = [rng.gauss(0, 1) for _ in range(D_K)]
    k = [rng.gauss(0, 1) for _ in range(D_K)]

    svg = Svg(760, 640, "RoPE turns each pair of a query and a key by its position; "
                        "their score depends only on the offset s - t")
    svg.text(380, 24, f"Pair 0 of a query q and a key k (d_k = {D_K}, theta_0 = 1 rad per position)",
             14, "middle", weight="bold")
    longest = max(math.hypot(q[0], q[1]), math.hypot(k[0], k[1]))
    pair_products = [plane(svg, 130 + 250 * j, 150, 80, q, k, t, s, 80 / longest)
                     for j, (t, s) in enumerate(PLANES)]

    scores = {t: [dot(rotate(q, t), rotate(k, t + o)) for o in OFFSETS] for t in TS}
    top = max(max(abs(v) for v in vs) for vs in scores.values())
    lim = math.ceil(top)
    ax = Axes(svg, 90, 340, 620, 220, (OFFSETS[0], OFFSETS[-1]), (-lim, lim))
    ax.frame(list(range(-24, 25, 4)), [-lim, -lim / 2, 0, lim / 2, lim],
             "offset s - t (key position minus query position)", "score", f"The whole score (R_t q) . (R_s k), all {D_K // 2} pairs, against s - t")
    styles = [(BLUE, None, 6), (ORANGE, "7 4", 3), ("black", "1 3", 1.5)]
    for t, (colour, dash, width) in zip(TS, styles):
        pts = [(ax.x(o), ax.y(v)) for o, v in zip(OFFSETS, scores[t])]
        svg.polyline(pts, colour, width, dash)
    ax.legend([(f"query at t = {t}", c, d) for t, (c, d, _) in zip(TS, styles)], 570, 358)
    gap = max(abs(a - b) for t in TS[1:] for a, b in zip(scores[TS[0]], scores[t]))
    svg.text(380, 620, f"q, k: {D_K} numbers from N(0, 1), seed 10; the three curves differ by at most "
             f"{gap:.0e} (rounding). Made by tools/figures/rope.py.", 10, "middle", "#555555")
    svg.write(OUT)
    print("pair 0's product at (t, s) =",
          ", ".join(f"{ts}: {v:.4f}" for ts, v in zip(PLANES, pair_products)))
    print("score at offsets -2, 0, 2:",
          ", ".join(f"{scores[TS[0]][OFFSETS.index(o)]:.4f}" for o in (-2, 0, 2)))
    print(f"largest difference between the curves: {gap:.2e}")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
