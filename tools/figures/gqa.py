#!/usr/bin/env python3
"""Draws docs/figures/gqa.svg: grouped-query attention with H = 8 query heads
and K = 2 key/value heads (groups of G = 4), forward and backward.

    python3 tools/figures/gqa.py        (from the top of the tree)

Top, the forward: query head h reads key/value head g = h / G (the mapping
of `AttentionSizes::kv_head`, nn/attention_internal.h), in place, with no
copy. Bottom, the backward: each query head's kernel sends back its share
dK_h', dV_h' for the head it read, and the shared head's gradient is the sum
of its group's shares, which one task per (sequence, key/value head) adds
up, the first head writing and the others adding (`attention_backward`,
nn/attention.cpp). A diagram, not data: boxes and arrows, standard library
only.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from svgplot import GREY, LIGHT_BLUE, LIGHT_ORANGE, ORANGE, Svg  # noqa: E402

H, K = 8, 2
G = H // K
OUT = "docs/figures/gqa.svg"
BW, BH, STEP, X0 = 80, 40, 87, 30  # query head boxes: width, height, pitch, first x
FILLS = [LIGHT_BLUE, LIGHT_ORANGE]


def head_x(h):
    return X0 + STEP * h + BW / 2  # the centre of query head h's box


def group_x(g):
    return (head_x(g * G) + head_x(g * G + G - 1)) / 2


def plus(svg, cx, cy, colour):
    svg.add(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="12" fill="white" stroke="{colour}" '
            f'stroke-width="1.5"/>')
    svg.text(cx, cy + 6, "+", 18, "middle", colour, "bold")


def heads_row(svg, y, second_line):
    for h in range(H):
        x = head_x(h) - BW / 2
        svg.box(x, y, BW, BH, FILLS[h // G])
        svg.text(x + BW / 2, y + 16, f"query head {h}", 10, "middle")
        svg.text(x + BW / 2, y + 31, second_line(h), 11, "middle", weight="bold")


def main():
    svg = Svg(760, 560, "Grouped-query attention, 8 query heads sharing 2 key/value heads: "
                        "the forward reads a shared head, the backward sums into it")
    # The forward.
    svg.text(380, 26, f"Forward: H = {H} query heads, K = {K} key/value heads, groups of G = H / K = {G}",
             14, "middle", weight="bold")
    svg.text(380, 44, "query head h reads key/value head g = h / G, in place (no copy)", 12, "middle")
    top, kv_y = 62, 176
    heads_row(svg, top, lambda h: f"Q_{h}, g = {h // G}")
    for g in range(K):
        x = group_x(g)
        svg.box(x - 90, kv_y, 180, BH, FILLS[g])
        svg.text(x, kv_y + 16, f"key/value head {g}", 10, "middle")
        svg.text(x, kv_y + 31, f"K_{g}, V_{g}", 11, "middle", weight="bold")
        for h in range(g * G, g * G + G):
            svg.arrow(x + (h - g * G - 1.5) * 30, kv_y, head_x(h), top + BH + 1, GREY, 1.5)
    svg.text(380, kv_y + BH + 22, "each of K_g, V_g is read by the G heads of its group: "
             "P_h = softmax(Q_h K_g^T / sqrt(d_k) + M), O_h = P_h V_g", 11, "middle")
    svg.line(20, 262, 740, 262, GREY, 1, "3 3")

    # The backward.
    svg.text(380, 290, "Backward: the shared head's gradient is the sum over its group",
             14, "middle", weight="bold")
    svg.text(380, 308, "each head's kernel backward gives its share for the head it read, "
             "dK_h' and dV_h'", 12, "middle")
    top2, plus_y, out_y = 324, 430, 468
    heads_row(svg, top2, lambda h: f"dK_{h}', dV_{h}'")
    for g in range(K):
        x = group_x(g)
        for h in range(g * G, g * G + G):
            sx = head_x(h)
            # from the head's box to the rim of the + (radius 12), towards its centre
            dx, dy = x - sx, plus_y - (top2 + BH)
            n = (dx * dx + dy * dy) ** 0.5
            svg.arrow(sx, top2 + BH, x - 13 * dx / n, plus_y - 13 * dy / n, ORANGE, 1.5)
        plus(svg, x, plus_y, ORANGE)
        svg.arrow(x, plus_y + 12, x, out_y, ORANGE, 1.5)
        svg.box(x - 150, out_y, 300, BH, FILLS[g])
        heads = f"{g * G} .. {g * G + G - 1}"
        svg.text(x, out_y + 16, f"dK_{g} = sum of dK_h' over h = {heads}", 11, "middle", weight="bold")
        svg.text(x, out_y + 31, f"dV_{g} = sum of dV_h' over h = {heads}", 11, "middle", weight="bold")
    svg.text(380, 530, "One task per (sequence, key/value head) loops over the group: the first head "
             "writes dK_g and dV_g, the others add,", 11, "middle")
    svg.text(380, 546, "so no two threads write the same dK_g. Made by tools/figures/gqa.py.",
             11, "middle")
    svg.write(OUT)
    print("groups:", "; ".join(f"key/value head {g} <- query heads "
                               f"{', '.join(str(h) for h in range(H) if h // G == g)}" for g in range(K)))
    print("wrote", OUT)


if __name__ == "__main__":
    main()
