#!/usr/bin/env python3
"""Draws docs/figures/vit.svg: a 28 x 28 image cut into P x P patches, each
patch flattened into one row of pixels, and the class token in front: the
sequence the Vision Transformer reads.

    python3 tools/figures/vit.py        (from the top of the tree)

P = 7, qkv's default patch for the ViT family (trainer/family_vit.cpp), so
N = (28 / 7)^2 = 16 patches and N + 1 = 17 positions. The image is a
digit-like 7, one channel, its ink computed from the distance of each pixel
to two strokes (darker is a larger value). Patches are numbered row-major
over the grid and each is flattened in (py, px) order, as `patch_gather`
(nn/patch_embed.cpp) lays out a row of `patches` for one channel.
Every number in the figure is computed here (standard library).
"""

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from svgplot import LIGHT_ORANGE, ORANGE, Svg  # noqa: E402

SIDE, P = 28, 7
STROKES = [((6.0, 7.0), (6.0, 21.0)), ((6.0, 21.0), (23.0, 11.0))]  # (row, col) ends: a 7
OUT = "docs/figures/vit.svg"


def distance(p, a, b):
    """From point p to the segment a-b."""
    (py, px), (ay, ax), (by, bx) = p, a, b
    dy, dx = by - ay, bx - ax
    t = max(0.0, min(1.0, ((py - ay) * dy + (px - ax) * dx) / (dy * dy + dx * dx)))
    return math.hypot(py - (ay + t * dy), px - (ax + t * dx))


def image():
    """The pixel values 0..255, row by row."""
    rows = []
    for r in range(SIDE):
        row = []
        for c in range(SIDE):
            d = min(distance((r + 0.5, c + 0.5), a, b) for a, b in STROKES)
            row.append(round(255 * max(0.0, min(1.0, 1.6 - d / 1.2))))
        rows.append(row)
    return rows


def patch(img, n):
    """Patch n (row-major over the grid), flattened in (py, px) order."""
    gy, gx = divmod(n, SIDE // P)
    return [img[gy * P + py][gx * P + px] for py in range(P) for px in range(P)]


def grey(v):
    g = 255 - v
    return f"#{g:02x}{g:02x}{g:02x}"


def main():
    img = image()
    grid = SIDE // P
    N = grid * grid
    svg = Svg(820, 420, "A 28 x 28 image cut into 7 x 7 patches, flattened into 16 tokens, "
                        "with the class token in front")
    svg.text(410, 24, f"An image as a sequence: N = ({SIDE} / {P})^2 = {N} patches, plus the class "
             f"token: {N + 1} positions", 14, "middle", weight="bold")
    # Left: the image and its patch grid.
    cell, ix, iy = 8, 30, 80
    svg.text(ix + SIDE * cell / 2, iy - 14, f"{SIDE} x {SIDE} pixels, {P} x {P} patches", 12, "middle",
             weight="bold")
    for r in range(SIDE):
        for c in range(SIDE):
            if img[r][c]:  # a pixel of value 0 is the white page
                svg.rect(ix + c * cell, iy + r * cell, cell, cell, grey(img[r][c]))
    for k in range(grid + 1):
        svg.line(ix + k * P * cell, iy, ix + k * P * cell, iy + SIDE * cell, ORANGE, 2)
        svg.line(ix, iy + k * P * cell, ix + SIDE * cell, iy + k * P * cell, ORANGE, 2)
    for n in range(N):
        gy, gx = divmod(n, grid)
        svg.rect(ix + gx * P * cell + 2, iy + gy * P * cell + 2, 8 + 7 * len(str(n)), 14, "white")
        svg.text(ix + gx * P * cell + 4, iy + gy * P * cell + 13, str(n), 11, "start", ORANGE, "bold")
    svg.text(ix + SIDE * cell / 2, iy + SIDE * cell + 20, "patches numbered row-major", 11, "middle")
    svg.text(ix + SIDE * cell / 2, iy + SIDE * cell + 35, "darker: a larger pixel value", 11, "middle")
    svg.arrow(ix + SIDE * cell + 12, iy + SIDE * cell / 2, ix + SIDE * cell + 52, iy + SIDE * cell / 2,
              "black", 2, 9)

    # Right: the sequence, one row per position.
    px_w, row_h, sx, sy = 4, 16, 380, 80
    strip = P * P * px_w
    svg.text(sx - 8, sy - 14, "position", 12, "end", weight="bold")
    svg.text(sx + strip / 2, sy - 14, f"its {P * P} pixels, (py, px) order", 12, "middle", weight="bold")
    svg.text(sx + strip + 105, sy - 14, "the token (D)", 12, "middle", weight="bold")
    for t in range(N + 1):
        y = sy + t * row_h
        svg.text(sx - 8, y + 11, f"t = {t}", 11, "end")
        if t == 0:
            svg.rect(sx, y, strip, row_h - 3, LIGHT_ORANGE, "#333333")
            svg.text(sx + strip / 2, y + 10, "class token c: learned, no pixels", 10, "middle")
            svg.text(sx + strip + 105, y + 11, "c", 11, "middle", weight="bold")
            continue
        values = patch(img, t - 1)
        for j, v in enumerate(values):
            if v:
                svg.rect(sx + j * px_w, y, px_w, row_h - 3, grey(v))
        svg.add(f'<rect x="{sx}" y="{y}" width="{strip}" height="{row_h - 3}" fill="none" '
                f'stroke="#bbbbbb"/>')
        svg.text(sx + strip + 8, y + 11, f"patch {t - 1}", 10, "start", ORANGE)
        svg.text(sx + strip + 105, y + 11, f"p_{t - 1} E^T + b", 11, "middle")
    svg.text(sx + strip + 200, sy - 14, "+ position", 12, "middle", weight="bold")
    for t in range(N + 1):
        svg.text(sx + strip + 200, sy + t * row_h + 11, f"+ E_pos[{t}]", 11, "middle")
    svg.text(410, sy + row_h * (N + 1) + 18, f"One linear map E (D, {P * P}) turns every patch's "
             f"{P * P} pixels into a vector of D; the class token goes in front, the positions "
             "are added,", 11, "middle")
    svg.text(410, sy + row_h * (N + 1) + 34, f"and the encoder reads the {N + 1} vectors. "
             "Made by tools/figures/vit.py.", 11, "middle")
    svg.write(OUT)
    ink = sum(v > 0 for row in img for v in row)
    print(f"{N} patches of {P} x {P}, {N + 1} positions; {ink} of {SIDE * SIDE} pixels inked")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
