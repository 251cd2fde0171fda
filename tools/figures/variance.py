#!/usr/bin/env python3
"""Draws docs/figures/scaling.svg: why attention divides the scores by sqrt(d_k).

    python3 tools/figures/variance.py        (from the top of the tree)

Left: the variance of q.k for random q, k whose d_k components are
independent with mean 0 and variance 1, measured over many samples, against
d_k: it grows like d_k, and q.k / sqrt(d_k) keeps it at 1.
Right: what that does to a softmax over 16 such scores: the largest
probability, averaged over samples. Unscaled, the softmax heads for one-hot
as d_k grows (0.86 on average at d_k = 64), and a one-hot softmax passes
almost no gradient back: dZ = P * (dP - rowsum(dP * P)) is ~0 when P is.
Every number in the figure is computed here (fixed seed, standard library).
"""

import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from svgplot import BLUE, GREY, ORANGE, Axes, Svg  # noqa: E402

DKS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
SAMPLES = 4000  # dot products per d_k for the variance
ROWS = 400      # softmax rows per d_k
KEYS = 16       # keys per row
OUT = "docs/figures/scaling.svg"


def variance(values):
    m = sum(values) / len(values)
    return sum((v - m) ** 2 for v in values) / (len(values) - 1)


def dot(a, b):
    return sum(x * y for x, y in zip(a, b))


def vector(rng, n):
    return [rng.gauss(0, 1) for _ in range(n)]


def largest_probability(scores):
    top = max(scores)
    e = [math.exp(s - top) for s in scores]
    return max(e) / sum(e)


def main():
    rng = random.Random(2017)  # the paper's year; any seed gives the same picture
    var_raw, var_scaled, p_raw, p_scaled = [], [], [], []
    for dk in DKS:
        dots = [dot(vector(rng, dk), vector(rng, dk)) for _ in range(SAMPLES)]
        var_raw.append(variance(dots))
        var_scaled.append(variance([d / math.sqrt(dk) for d in dots]))
        raw, scaled = 0.0, 0.0
        for _ in range(ROWS):
            q = vector(rng, dk)
            z = [dot(q, vector(rng, dk)) for _ in range(KEYS)]
            raw += largest_probability(z)
            scaled += largest_probability([s / math.sqrt(dk) for s in z])
        p_raw.append(raw / ROWS)
        p_scaled.append(scaled / ROWS)

    svg = Svg(820, 340, "Variance of q.k against d_k, and the softmax it feeds, "
                        "with and without the 1/sqrt(d_k) scale")
    left = Axes(svg, 70, 40, 300, 230, (1, 512), (0.5, 1024), xlog=True, ylog=True)
    left.frame(DKS[::1], [0.5, 1, 4, 16, 64, 256, 1024], "d_k (head size)", "variance of the score",
               "Var(q.k) grows like d_k")
    left.series(DKS, var_raw, ORANGE)
    left.series(DKS, var_scaled, BLUE)
    left.series(DKS, DKS, GREY, dash="4 3", dots=False)
    left.legend([("q.k (measured)", ORANGE, None), ("q.k / sqrt(d_k) (measured)", BLUE, None),
                 ("d_k (theory)", GREY, "4 3")], 90, 60)

    right = Axes(svg, 480, 40, 300, 230, (1, 512), (0, 1), xlog=True)
    right.frame(DKS, [0, 0.25, 0.5, 0.75, 1], "d_k (head size)", "largest probability",
                f"softmax over {KEYS} keys: mean max P")
    right.series(DKS, [1 / KEYS] * len(DKS), GREY, dash="4 3", dots=False)
    right.series(DKS, p_raw, ORANGE)
    right.series(DKS, p_scaled, BLUE)
    right.legend([("scores q.k", ORANGE, None), ("scores q.k / sqrt(d_k)", BLUE, None),
                  (f"uniform, 1/{KEYS}", GREY, "4 3")], 600, 185)
    svg.text(410, 330, f"{SAMPLES} dot products and {ROWS} softmax rows per d_k; q, k with "
             "independent N(0, 1) components. Made by tools/figures/variance.py.",
             10, "middle", "#555555")
    svg.write(OUT)
    for dk, a, b, c, d in zip(DKS, var_raw, var_scaled, p_raw, p_scaled):
        print(f"d_k {dk:4d}: Var(q.k) {a:8.2f}  Var(q.k/sqrt(d_k)) {b:5.2f}  "
              f"max P {c:.3f} unscaled, {d:.3f} scaled")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
