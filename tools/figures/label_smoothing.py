#!/usr/bin/env python3
"""Draws docs/figures/label-smoothing.svg: the target distribution q of one
row, without and with label smoothing, and the gradient p - q at a typical p.

    python3 tools/figures/label_smoothing.py        (from the top of the tree)

q_c = (1 - eps_ls) [c == y] + eps_ls / V, as in docs/cross-entropy.md, for
V = 10 classes, target y = 3 and eps_ls = 0.1 (the paper's value). The
prediction p is the softmax of a fixed set of logits; each panel prints its
numbers. Standard library only.
"""

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from svgplot import BLUE, GREY, ORANGE, Svg  # noqa: E402

V, Y, EPS_LS = 10, 3, 0.1
LOGITS = [0.5, -0.3, 1.0, 3.0, 0.2, -1.0, 0.8, 0.0, -0.5, 0.4]  # a model that mostly agrees
OUT = "docs/figures/label-smoothing.svg"


def target(eps_ls):
    return [(1 - eps_ls) * (c == Y) + eps_ls / V for c in range(V)]


def softmax(x):
    top = max(x)
    e = [math.exp(v - top) for v in x]
    return [v / sum(e) for v in e]


def bars(svg, left, top, width, height, values, lo, hi, colour, title, labels=True):
    """One bar per class; zero line drawn; values printed above (below if negative)."""
    def y(v):
        return top + (hi - v) / (hi - lo) * height
    slot = width / V
    svg.text(left + width / 2, top - 14, title, 13, "middle", weight="bold")
    for c, v in enumerate(values):
        x = left + c * slot + slot * 0.15
        y0, y1 = y(0), y(v)
        svg.rect(x, min(y0, y1), slot * 0.7, max(abs(y1 - y0), 0.8), colour)
        ty = y1 - 4 if v >= 0 else y1 + 12
        if labels:
            svg.text(x + slot * 0.35, ty, f"{v:.2f}" if abs(v) >= 0.005 else "0", 9, "middle")
        svg.text(x + slot * 0.35, top + height + 14, str(c), 10, "middle",
                 "black" if c != Y else ORANGE, "bold" if c == Y else "normal")
    svg.line(left, y(0), left + width, y(0), GREY)
    svg.text(left + width / 2, top + height + 30, f"class c (target y = {Y})", 11, "middle")


def main():
    one_hot, smooth, p = target(0.0), target(EPS_LS), softmax(LOGITS)
    grad = [a - b for a, b in zip(p, smooth)]
    grad_hard = [a - b for a, b in zip(p, one_hot)]
    svg = Svg(900, 300, "The target distribution q with and without label smoothing, "
                        "and the gradient p - q of one row")
    bars(svg, 30, 50, 260, 170, one_hot, 0, 1, GREY, "q without smoothing (one-hot)")
    bars(svg, 330, 50, 260, 170, smooth, 0, 1, BLUE,
         f"q with eps_ls = {EPS_LS}: {1 - EPS_LS + EPS_LS / V:.2f} and {EPS_LS / V:.2f}")
    lo = min(grad + grad_hard) - 0.05
    bars(svg, 630, 50, 260, 170, grad, lo, 0.15, ORANGE, "dx = p - q (smoothed q)")
    svg.text(450, 290, f"p = softmax of fixed logits (p_y = {p[Y]:.2f}); without smoothing "
             f"dx_y would be {grad_hard[Y]:.2f}, with it {grad[Y]:.2f}: the push on the target's "
             f"logit stops at p_y = {1 - EPS_LS + EPS_LS / V:.2f}, not 1. "
             "Made by tools/figures/label_smoothing.py.", 10, "middle", "#555555")
    svg.write(OUT)
    print("q smoothed:", " ".join(f"{v:.3f}" for v in smooth))
    print("p:         ", " ".join(f"{v:.3f}" for v in p))
    print("p - q:     ", " ".join(f"{v:+.3f}" for v in grad))
    print("wrote", OUT)


if __name__ == "__main__":
    main()
