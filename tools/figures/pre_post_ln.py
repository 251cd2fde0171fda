#!/usr/bin/env python3
"""Draws docs/figures/pre-post-ln.svg: where LayerNorm sits in a residual
sublayer, Post-LN (the paper) against Pre-LN, as nn/sublayer.h builds them:

    Post-LN:  y = norm(x + drop(f(x)))      (add_layer_norm fuses the sum)
    Pre-LN:   y = x + drop(f(norm(x)))

    python3 tools/figures/pre_post_ln.py        (from the top of the tree)

A diagram, not data: boxes and arrows, standard library only.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from svgplot import GREY, ORANGE, Svg  # noqa: E402

OUT = "docs/figures/pre-post-ln.svg"
W, H = 130, 30  # box size


def arrow(svg, x1, y1, x2, y2, colour="black"):
    svg.line(x1, y1, x2, y2 - 6, colour, 1.5)
    svg.add(f'<polygon points="{x2 - 5:.1f},{y2 - 8:.1f} {x2 + 5:.1f},{y2 - 8:.1f} {x2:.1f},{y2:.1f}" '
            f'fill="{colour}"/>')


def box(svg, cx, cy, label, colour):
    svg.add(f'<rect x="{cx - W / 2:.1f}" y="{cy - H / 2:.1f}" width="{W}" height="{H}" rx="5" '
            f'fill="{colour}" stroke="#333333"/>')
    svg.text(cx, cy + 4, label, 12, "middle")


def plus(svg, cx, cy):
    svg.add(f'<circle cx="{cx}" cy="{cy}" r="11" fill="white" stroke="#333333"/>')
    svg.text(cx, cy + 5, "+", 16, "middle")


def column(svg, cx, title, steps, skip_from, skip_to, note):
    """steps: labels top to bottom; 'x' and 'y' are the ends, '+' the residual sum."""
    svg.text(cx, 28, title, 14, "middle", weight="bold")
    ys = [70 + 58 * i for i in range(len(steps))]
    for i, (label, y) in enumerate(zip(steps, ys)):
        if label in ("x", "y"):
            svg.text(cx, y + 5, label, 14, "middle", weight="bold")
        elif label == "+":
            plus(svg, cx, y)
        else:
            colour = "#dbe7f6" if label == "LayerNorm" else "#f4f4f4"
            box(svg, cx, y, label, colour)
        if i:
            top = ys[i - 1] + (8 if steps[i - 1] in ("x", "y") else 11 if steps[i - 1] == "+" else H / 2)
            bottom = y - (12 if label in ("x", "y") else 11 if label == "+" else H / 2)
            arrow(svg, cx, top, cx, bottom)
    # the residual path: from the output of step skip_from to the + at skip_to
    y0, y1 = ys[skip_from] + 8, ys[skip_to]
    side = cx - W / 2 - 30
    svg.polyline([(cx, y0 + 6), (side, y0 + 6), (side, y1), (cx - 13, y1)], ORANGE, 2)
    svg.add(f'<polygon points="{cx - 19:.1f},{y1 - 5:.1f} {cx - 19:.1f},{y1 + 5:.1f} '
            f'{cx - 11:.1f},{y1:.1f}" fill="{ORANGE}"/>')
    svg.text(side - 6, (y0 + y1) / 2, "residual", 11, "end", ORANGE)
    for i, line in enumerate(note):
        svg.text(cx, ys[-1] + 40 + 15 * i, line, 11, "middle", "#333333")


def main():
    svg = Svg(640, 500, "Post-LN and Pre-LN residual sublayers")
    column(svg, 190, "Post-LN (the paper)",
           ["x", "f: attention or FFN", "dropout", "+", "LayerNorm", "y"], 0, 3,
           ["y = norm(x + drop(f(x)))", "every path from y back to x",
            "goes through the norm's backward"])
    column(svg, 480, "Pre-LN",
           ["x", "LayerNorm", "f: attention or FFN", "dropout", "+", "y"], 0, 4,
           ["y = x + drop(f(norm(x)))", "dy reaches x unchanged along the",
            "residual, plus the sublayer's share"])
    svg.line(335, 45, 335, 480, GREY, 1, "3 3")
    svg.write(OUT)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
