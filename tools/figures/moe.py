#!/usr/bin/env python3
"""Draws docs/figures/moe.svg: a mixture of experts routing N = 4 tokens to
k = 2 of E = 3 experts, with its gates, its capacity and one drop.

    python3 tools/figures/moe.py        (from the top of the tree)

The router logits are fixed here (one row per token, one column per expert):

    token 0:  2.0   1.0   0.1
    token 1:  0.5   1.5  -1.0
    token 2:  1.0  -0.5   0.8
    token 3:  0.2   0.0   1.2

(the logits of `worked_example --page moe`, examples/worked_moe.h, so that
the figure and the page's worked example route the same tokens).

P = softmax(l) per token; each token's top 2 (a tie to the lower index);
gates g = P / S, S the sum of the two chosen P, renormalised before drops.
The capacity is that of a training step, ceil(capacity_factor * N * k / E),
with capacity_factor = 1.0 so that one assignment drops: 3 places per
expert (the default 1.25 gives 4, and with 4 tokens nothing can drop).
Places are claimed by rank, then by token: every first choice in token
order, then every second choice. This mirrors `moe_route` and
`moe_capacity` (nn/moe_route.cpp) and `gates_of` (nn/moe.cpp). The line
under the table gives the load-balancing loss of these choices.
Every number in the figure is computed here (standard library).
"""

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from svgplot import GREY, LIGHT_BLUE, LIGHT_ORANGE, Svg  # noqa: E402

LOGITS = [[2.0, 1.0, 0.1],
          [0.5, 1.5, -1.0],
          [1.0, -0.5, 0.8],
          [0.2, 0.0, 1.2]]
K_CHOSEN, CAPACITY_FACTOR = 2, 1.0
OUT = "docs/figures/moe.svg"
RANKS = ["1st", "2nd"]
FILLS = [LIGHT_BLUE, LIGHT_ORANGE]  # a first choice, a second choice


def softmax(x):
    top = max(x)
    e = [math.exp(v - top) for v in x]
    return [v / sum(e) for v in e]


def route(P, k, capacity):
    """moe_route: each token's top k, then places claimed by rank, then token."""
    E = len(P[0])
    choice = [sorted(range(E), key=lambda e: (-p[e], e))[:k] for p in P]
    rows = [[] for _ in range(E)]      # per expert: (token, rank, claim number), kept
    dropped = []                       # (token, rank, expert, claim number)
    claim = 0
    for c in range(k):
        for n, experts in enumerate(choice):
            claim += 1
            e = experts[c]
            if len(rows[e]) < capacity:
                rows[e].append((n, c, claim))
            else:
                dropped.append((n, c, e, claim))
    return choice, rows, dropped


def main():
    N, E = len(LOGITS), len(LOGITS[0])
    P = [softmax(row) for row in LOGITS]
    capacity = math.ceil(CAPACITY_FACTOR * N * K_CHOSEN / E)  # moe_capacity
    choice, rows, dropped = route(P, K_CHOSEN, capacity)
    gates = [{e: P[n][e] / sum(P[n][j] for j in choice[n]) for e in choice[n]} for n in range(N)]
    f = [sum(e in c for c in choice) / (N * K_CHOSEN) for e in range(E)]
    mean_p = [sum(P[n][e] for n in range(N)) / N for e in range(E)]
    aux = E * sum(a * b for a, b in zip(f, mean_p))
    lost = {(n, e) for n, _, e, _ in dropped}

    svg = Svg(820, 440, "Routing 4 tokens to the top 2 of 3 experts: probabilities, "
                        "gates, capacity and a drop")
    # Left: the router's table.
    cw, ch, tx, ty = 104, 62, 90, 74
    svg.text(tx + cw * E / 2, 26, "Router: P = softmax(l), each token's top 2", 14, "middle",
             weight="bold")
    svg.text(tx + cw * E / 2, 44, "g = P / S, S = the sum of the two chosen P", 12, "middle")
    for e in range(E):
        svg.text(tx + cw * e + cw / 2, ty - 10, f"expert {e}", 12, "middle", weight="bold")
    for n in range(N):
        y = ty + ch * n
        svg.text(tx - 10, y + ch / 2 + 4, f"token {n}", 12, "end", weight="bold")
        for e in range(E):
            x = tx + cw * e
            rank = choice[n].index(e) if e in choice[n] else None
            fill = FILLS[rank] if rank is not None else "white"
            dash = ' stroke-dasharray="4 3"' if (n, e) in lost else ""
            svg.add(f'<rect x="{x:.1f}" y="{y:.1f}" width="{cw}" height="{ch}" fill="{fill}" '
                    f'stroke="#333333"{dash}/>')
            svg.text(x + cw / 2, y + 16, f"l = {LOGITS[n][e]:.1f}", 10, "middle", "#555555")
            svg.text(x + cw / 2, y + 33, f"P = {P[n][e]:.3f}", 12, "middle")
            if rank is not None:
                svg.text(x + cw / 2, y + 51, f"{RANKS[rank]}, g = {gates[n][e]:.3f}", 11, "middle",
                         weight="bold")
    ly = ty + ch * N + 22
    svg.rect(tx, ly - 9, 14, 12, FILLS[0], "#333333")
    svg.text(tx + 20, ly + 2, "first choice", 11)
    svg.rect(tx + 110, ly - 9, 14, 12, FILLS[1], "#333333")
    svg.text(tx + 130, ly + 2, "second choice", 11)
    svg.add(f'<rect x="{tx + 232}" y="{ly - 9}" width="14" height="12" fill="white" '
            f'stroke="#333333" stroke-dasharray="3 2"/>')
    svg.text(tx + 252, ly + 2, "dropped", 11)

    # Right: what each expert receives, in the order places are claimed.
    sx, sw, sh, sy = 470, 104, 38, 74
    svg.text(sx + 3 * (sw + 10) / 2, 26, f"Experts, capacity ceil({CAPACITY_FACTOR:.1f} x {N} x "
             f"{K_CHOSEN} / {E}) = {capacity}", 14, "middle", weight="bold")
    svg.text(sx + 3 * (sw + 10) / 2, 44, "places claimed by rank, then by token", 12, "middle")
    for e in range(E):
        x = sx + (sw + 10) * e
        svg.text(x + sw / 2, sy - 10, f"expert {e}", 12, "middle", weight="bold")
        for slot in range(capacity):
            y = sy + (sh + 8) * slot
            if slot < len(rows[e]):
                n, c, claim = rows[e][slot]
                svg.box(x, y, sw, sh, FILLS[c])
                svg.text(x + sw / 2, y + 16, f"token {n} ({RANKS[c]})", 11, "middle", weight="bold")
                svg.text(x + sw / 2, y + 30, f"claim {claim}, g = {gates[n][e]:.3f}", 10, "middle")
            else:
                svg.box(x, y, sw, sh, "white", stroke="#bbbbbb")
                svg.text(x + sw / 2, y + sh / 2 + 4, "free", 10, "middle", GREY)
        for j, (n, c, e2, claim) in enumerate(d for d in dropped if d[2] == e):
            y = sy + (sh + 8) * (capacity + j) + 8
            svg.add(f'<rect x="{x:.1f}" y="{y:.1f}" width="{sw}" height="{sh}" rx="4" fill="white" '
                    f'stroke="#333333" stroke-dasharray="4 3"/>')
            svg.text(x + sw / 2, y + 16, f"token {n} ({RANKS[c]})", 11, "middle", weight="bold")
            svg.text(x + sw / 2, y + 30, f"claim {claim}: dropped", 10, "middle")
    # What the drop means, and the load-balancing loss.
    notes = []
    for n, c, e, claim in dropped:
        kept = [j for j in choice[n] if (n, j) not in lost]
        others = ", ".join(f"{gates[n][j]:.3f} FFN_{j}(x_{n})" for j in kept) or "0"
        notes.append(f"Token {n}'s {RANKS[c]} choice finds expert {e}'s {capacity} places taken "
                     f"and is dropped: y_{n} = {others}, the gate not raised to 1.")
    notes.append(f"Load balance: f = ({', '.join(f'{v:g}' for v in f)}) of the assignments, "
                 f"mean P = ({', '.join(f'{v:.3f}' for v in mean_p)}); "
                 f"aux = E sum f_e P_e = {aux:.3f} (1 when balanced).")
    for i, line in enumerate(notes):
        svg.text(410, 386 + 17 * i, line, 11, "middle")
    svg.text(410, 432, "capacity_factor 1.0 here; the default 1.25 gives capacity 4, and 4 tokens "
             "never overflow it. Made by tools/figures/moe.py.", 10, "middle", "#555555")
    svg.write(OUT)
    for n in range(N):
        print(f"token {n}: P", " ".join(f"{v:.4f}" for v in P[n]), " top", choice[n],
              " g", " ".join(f"{e}:{g:.4f}" for e, g in gates[n].items()))
    for e in range(E):
        print(f"expert {e}: tokens", [n for n, _, _ in rows[e]],
              " dropped", [n for n, _, e2, _ in dropped if e2 == e])
    print(f"capacity {capacity}; f {f}; mean P", " ".join(f"{v:.4f}" for v in mean_p), f"; aux {aux:.4f}")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
