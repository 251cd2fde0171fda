#!/usr/bin/env python3
"""Draws docs/figures/swiglu.svg: SwiGLU's gate silu(a) = a * sigmoid(a) beside
ReLU, and their derivatives, which the backward multiplies by.

    python3 tools/figures/swiglu.py        (from the top of the tree)

Left: silu(a) and relu(a) for a in [-6, 6]. Right: silu'(a) =
s (1 + a (1 - s)), s = sigmoid(a), the formula of docs/swiglu-backward.md
(checked here against central differences), and relu'(a), a step. Marked:
silu's minimum, where silu' crosses 0, and silu''s extremes, where it dips
below 0 and rises above 1. Every number in the figure is computed here
(standard library).
"""

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from svgplot import BLUE, GREY, Axes, Svg  # noqa: E402

LO, HI, STEPS = -6.0, 6.0, 480
OUT = "docs/figures/swiglu.svg"


def sigmoid(a):
    return 1 / (1 + math.exp(-a))


def silu(a):
    return a * sigmoid(a)


def dsilu(a):
    s = sigmoid(a)
    return s * (1 + a * (1 - s))


def d2silu(a, h=1e-5):
    return (dsilu(a + h) - dsilu(a - h)) / (2 * h)


def root(f, lo, hi):
    """A zero of f in [lo, hi] by bisection (f(lo), f(hi) of opposite signs)."""
    for _ in range(100):
        mid = (lo + hi) / 2
        if (f(lo) < 0) == (f(mid) < 0):
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def mark(svg, ax, x, y, label, dx, dy, anchor):
    svg.circle(ax.x(x), ax.y(y), 4, "black")
    svg.text(ax.x(x) + dx, ax.y(y) + dy, label, 11, anchor)


def main():
    xs = [LO + (HI - LO) * i / STEPS for i in range(STEPS + 1)]
    h = 1e-5
    fd_gap = max(abs(dsilu(a) - (silu(a + h) - silu(a - h)) / (2 * h)) for a in xs)
    a_min = root(dsilu, -3, 0)          # silu's minimum: silu' = 0
    a_low = root(d2silu, -4, -1)        # silu''s minimum
    a_high = root(d2silu, 1, 4)         # silu''s maximum

    svg = Svg(820, 340, "SiLU beside ReLU, and their derivatives")
    left = Axes(svg, 70, 40, 300, 230, (LO, HI), (-1.5, 6))
    left.frame([-6, -4, -2, 0, 2, 4, 6], [-1, 0, 1, 2, 3, 4, 5, 6], "a", "value",
               "silu(a) = a sigmoid(a), and relu(a)")
    svg.line(left.x(LO), left.y(0), left.x(HI), left.y(0), GREY)
    left.series(xs, [max(a, 0.0) for a in xs], GREY, dash="5 4", dots=False)
    left.series(xs, [silu(a) for a in xs], BLUE, dots=False)
    mark(svg, left, a_min, silu(a_min), f"minimum {silu(a_min):.3f} at a = {a_min:.3f}", 0, 22, "middle")
    left.legend([("silu(a)", BLUE, None), ("relu(a)", GREY, "5 4")], 90, 60)

    right = Axes(svg, 480, 40, 300, 230, (LO, HI), (-0.25, 1.25))
    right.frame([-6, -4, -2, 0, 2, 4, 6], [-0.25, 0, 0.25, 0.5, 0.75, 1, 1.25], "a", "derivative",
                "silu'(a) = s (1 + a (1 - s)), and relu'(a)")
    for v in (0, 1):
        svg.line(right.x(LO), right.y(v), right.x(HI), right.y(v), GREY)
    right.series([LO, 0, 0, HI], [0, 0, 1, 1], GREY, dash="5 4", dots=False)
    right.series(xs, [dsilu(a) for a in xs], BLUE, dots=False)
    mark(svg, right, a_low, dsilu(a_low), f"{dsilu(a_low):.3f} at {a_low:.2f}", 0, 20, "middle")
    mark(svg, right, a_high, dsilu(a_high), f"{dsilu(a_high):.3f} at {a_high:.2f}", 0, -10, "middle")
    mark(svg, right, a_min, 0, f"0 at {a_min:.3f}", -8, -8, "end")
    right.legend([("silu'(a)", BLUE, None), ("relu'(a)", GREY, "5 4")], 500, 108)
    svg.text(410, 330, "Unlike relu, silu passes a gradient for a < 0 (small, and negative below "
             f"a = {a_min:.3f}), and more than 1 near a = {a_high:.1f}. "
             "Made by tools/figures/swiglu.py.", 10, "middle", "#555555")
    svg.write(OUT)
    print(f"silu' against central differences (h = {h}): largest gap {fd_gap:.1e}")
    print(f"silu's minimum {silu(a_min):.4f} at a = {a_min:.4f}")
    print(f"silu' from {dsilu(a_low):.4f} at a = {a_low:.4f} to {dsilu(a_high):.4f} at a = {a_high:.4f}")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
