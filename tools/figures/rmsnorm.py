#!/usr/bin/env python3
"""Draws docs/figures/rmsnorm.svg: what RMSNorm and LayerNorm ignore in a row,
and what that removes from the gradient.

    python3 tools/figures/rmsnorm.py        (from the top of the tree)

Left and middle: xhat of LayerNorm, (x - mean) * rstd, and of RMSNorm,
x * rrms, for three rows of D = 4: x = [1, 2, 3, 4], the same row shifted
(x + 3) and scaled (2x). LayerNorm gives one output for all three: it
recentres and rescales. RMSNorm gives one output for x and 2x but another
for x + 3: it rescales and does not recentre.
Right: dx of both for the row of `make step`'s part 3 (x = [1, 2, 3, 4],
gamma = [1, 0.5, 2, 1], dy = [1, -1, 0.5, 2]), by the page's formulas:
LayerNorm's dx has no mean and no component along xhat (the output ignores a
shift and a scale), RMSNorm's dx only has no component along xhat.
eps is each op's default (LayerNorm 1e-5, RMSNorm 1e-6), in double.
Every number in the figure is computed here (standard library).
"""

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from svgplot import BLUE, GREY, ORANGE, Axes, Svg  # noqa: E402

X = [1.0, 2.0, 3.0, 4.0]
GAMMA = [1.0, 0.5, 2.0, 1.0]
DY = [1.0, -1.0, 0.5, 2.0]
LN_EPS, RMS_EPS = 1e-5, 1e-6
OUT = "docs/figures/rmsnorm.svg"


def mean(v):
    return sum(v) / len(v)


def layer_norm(x):
    """xhat and rstd of one row (nn/layernorm.cpp's forward, gamma = 1, beta = 0)."""
    m = mean(x)
    rstd = 1 / math.sqrt(mean([(a - m) ** 2 for a in x]) + LN_EPS)
    return [(a - m) * rstd for a in x], rstd


def rms_norm(x):
    """xhat and rrms of one row (nn/rmsnorm.cpp's forward, gamma = 1)."""
    rrms = 1 / math.sqrt(mean([a * a for a in x]) + RMS_EPS)
    return [a * rrms for a in x], rrms


def ln_dx(x, dxhat):
    xhat, rstd = layer_norm(x)
    m1, m2 = mean(dxhat), mean([a * b for a, b in zip(dxhat, xhat)])
    return [rstd * (g - m1 - h * m2) for g, h in zip(dxhat, xhat)], xhat


def rms_dx(x, dxhat):
    xhat, rrms = rms_norm(x)
    m2 = mean([a * b for a, b in zip(dxhat, xhat)])
    return [rrms * (g - h * m2) for g, h in zip(dxhat, xhat)], xhat


ROWS = [("x = [1, 2, 3, 4]", X, BLUE, None, 6),
        ("x + 3 (shifted)", [a + 3 for a in X], ORANGE, "7 4", 3),
        ("2x (scaled)", [2 * a for a in X], "black", "1 3", 1.5)]


def rows_panel(svg, left, norm, title):
    ax = Axes(svg, left, 60, 200, 190, (0.7, 4.3), (-1.6, 1.6))
    ax.frame([1, 2, 3, 4], [-1.5, -1, -0.5, 0, 0.5, 1, 1.5], "element j of the row", "xhat_j", title)
    svg.line(left, ax.y(0), left + 200, ax.y(0), GREY)
    outs = []
    for label, row, colour, dash, width in ROWS:
        out = norm(row)[0]
        outs.append(out)
        svg.polyline([(ax.x(j + 1), ax.y(v)) for j, v in enumerate(out)], colour, width, dash)
        for j, v in enumerate(out):
            svg.circle(ax.x(j + 1), ax.y(v), 3, colour)
    return ax, outs


def main():
    dxhat = [a * g for a, g in zip(DY, GAMMA)]
    dln, xhat_ln = ln_dx(X, dxhat)
    drms, xhat_rms = rms_dx(X, dxhat)

    svg = Svg(900, 380, "LayerNorm and RMSNorm of a row, shifted and scaled, "
                        "and the gradient each gives the row")
    _, ln_rows = rows_panel(svg, 70, layer_norm, "LayerNorm: all three the same")
    rms_ax, rms_rows = rows_panel(svg, 360, rms_norm, "RMSNorm: x + 3 differs")
    rms_ax.legend([(label, colour, dash) for label, _, colour, dash, _ in ROWS], 90, 308)

    # Right: dx of the worked row, LayerNorm's and RMSNorm's side by side.
    left, top, width, height, lo, hi = 650, 60, 220, 190, -1.2, 0.8
    ax = Axes(svg, left, top, width, height, (0.5, 4.5), (lo, hi))
    ax.frame([1, 2, 3, 4], [-1.2, -0.8, -0.4, 0, 0.4, 0.8], "element i of the row", "dx_i",
             "dx for the same dy")
    svg.line(left, ax.y(0), left + width, ax.y(0), GREY)
    for i in range(4):
        for off, v, colour in ((-0.17, dln[i], GREY), (0.17, drms[i], BLUE)):
            x0, y0, y1 = ax.x(i + 1 + off) - 8, ax.y(0), ax.y(v)
            svg.rect(x0, min(y0, y1), 16, max(abs(y1 - y0), 0.8), colour)
    ax.legend([("LayerNorm", GREY, None), ("RMSNorm", BLUE, None)], 770, 200)
    sums = [("sum of dx", sum(dln), sum(drms)),
            ("dx . xhat", sum(a * b for a, b in zip(dln, xhat_ln)),
             sum(a * b for a, b in zip(drms, xhat_rms)))]
    svg.text(720, 310, "LayerNorm", 11, "middle", weight="bold")
    svg.text(805, 310, "RMSNorm", 11, "middle", weight="bold")
    for r, (name, a, b) in enumerate(sums):
        y = 326 + 15 * r
        svg.text(675, y, name, 11, "end")
        svg.text(720, y, f"{a + 0.0:+.3f}", 11, "middle")
        svg.text(805, y, f"{b + 0.0:+.3f}", 11, "middle")
    svg.text(450, 370, "gamma = 1 on the left; dx for x = [1, 2, 3, 4], gamma = [1, 0.5, 2, 1], "
             "dy = [1, -1, 0.5, 2] (make step, part 3). Made by tools/figures/rmsnorm.py.",
             10, "middle", "#555555")
    svg.write(OUT)
    for (label, *_), a, b in zip(ROWS, ln_rows, rms_rows):
        print(f"{label:18s} LayerNorm xhat", " ".join(f"{v:+.3f}" for v in a),
              "  RMSNorm xhat", " ".join(f"{v:+.3f}" for v in b))
    print("dx LayerNorm:", " ".join(f"{v:+.4f}" for v in dln))
    print("dx RMSNorm:  ", " ".join(f"{v:+.4f}" for v in drms))
    for name, a, b in sums:
        print(f"{name}: LayerNorm {a:+.2e}, RMSNorm {b:+.2e}")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
