"""A few lines of SVG for the docs' figures, standard library only.

Each figure script in this folder computes its numbers and draws them with
these helpers; the SVG is plain text, so a change to a figure shows in a diff.
"""

import math

FONT = 'font-family="Helvetica, Arial, sans-serif"'
BLUE, ORANGE, GREY = "#1f5fa8", "#d2691e", "#888888"
LIGHT_BLUE, LIGHT_ORANGE, LIGHT_GREY = "#dbe7f6", "#f8e0cc", "#f4f4f4"  # fills for boxes


class Svg:
    def __init__(self, width, height, title):
        self.parts = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img">',
            f"<title>{escape(title)}</title>",
            f'<rect width="{width}" height="{height}" fill="white"/>',
        ]

    def add(self, element):
        self.parts.append(element)

    def text(self, x, y, s, size=12, anchor="start", colour="black", weight="normal", rotate=None):
        turn = f' transform="rotate({rotate} {x:.1f} {y:.1f})"' if rotate is not None else ""
        self.add(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" {FONT} text-anchor="{anchor}" '
                 f'fill="{colour}" font-weight="{weight}"{turn}>{escape(s)}</text>')

    def line(self, x1, y1, x2, y2, colour="black", width=1, dash=None):
        d = f' stroke-dasharray="{dash}"' if dash else ""
        self.add(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
                 f'stroke="{colour}" stroke-width="{width}"{d}/>')

    def polyline(self, points, colour, width=2, dash=None):
        d = f' stroke-dasharray="{dash}"' if dash else ""
        pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        self.add(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="{width}"{d}/>')

    def circle(self, x, y, r, colour):
        self.add(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="{colour}"/>')

    def rect(self, x, y, w, h, colour, stroke="none"):
        self.add(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" '
                 f'fill="{colour}" stroke="{stroke}"/>')

    def arrow(self, x1, y1, x2, y2, colour="black", width=1.5, head=7):
        """A line from (x1, y1) whose head's tip is at (x2, y2), at any angle."""
        length = math.hypot(x2 - x1, y2 - y1)
        ux, uy = (x2 - x1) / length, (y2 - y1) / length
        bx, by = x2 - ux * head, y2 - uy * head  # the middle of the head's base
        self.line(x1, y1, bx + ux, by + uy, colour, width)
        half = head * 0.6
        self.add(f'<polygon points="{x2:.1f},{y2:.1f} {bx - uy * half:.1f},{by + ux * half:.1f} '
                 f'{bx + uy * half:.1f},{by - ux * half:.1f}" fill="{colour}"/>')

    def box(self, x, y, w, h, fill, label=None, size=12, stroke="#333333", rx=4):
        """A rounded box with top left (x, y), and its label centred in it."""
        self.add(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="{rx}" '
                 f'fill="{fill}" stroke="{stroke}"/>')
        if label is not None:
            self.text(x + w / 2, y + h / 2 + size * 0.35, label, size, "middle")

    def write(self, path):
        with open(path, "w") as f:
            f.write("\n".join(self.parts + ["</svg>"]) + "\n")


def escape(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class Axes:
    """A plot area: maps data (x, y) to the page, log2 or linear on each axis."""

    def __init__(self, svg, left, top, width, height, xlim, ylim, xlog=False, ylog=False):
        self.svg, self.left, self.top, self.width, self.height = svg, left, top, width, height
        self.xlim, self.ylim, self.xlog, self.ylog = xlim, ylim, xlog, ylog

    def _t(self, v, lim, log):
        f = math.log2 if log else (lambda u: u)
        return (f(v) - f(lim[0])) / (f(lim[1]) - f(lim[0]))

    def x(self, v):
        return self.left + self._t(v, self.xlim, self.xlog) * self.width

    def y(self, v):
        return self.top + (1 - self._t(v, self.ylim, self.ylog)) * self.height

    def frame(self, xticks, yticks, xlabel, ylabel, title):
        s = self.svg
        bottom, right = self.top + self.height, self.left + self.width
        for v in yticks:
            s.line(self.left, self.y(v), right, self.y(v), "#e6e6e6")
            s.text(self.left - 6, self.y(v) + 4, fmt(v), 11, "end")
        for v in xticks:
            s.line(self.x(v), bottom, self.x(v), bottom + 4)
            s.text(self.x(v), bottom + 17, fmt(v), 11, "middle")
        s.line(self.left, bottom, right, bottom)
        s.line(self.left, self.top, self.left, bottom)
        s.text(self.left + self.width / 2, bottom + 36, xlabel, 12, "middle")
        s.text(self.left - 44, self.top + self.height / 2, ylabel, 12, "middle", rotate=-90)
        s.text(self.left + self.width / 2, self.top - 12, title, 13, "middle", weight="bold")

    def series(self, xs, ys, colour, dash=None, dots=True):
        pts = [(self.x(a), self.y(b)) for a, b in zip(xs, ys)]
        self.svg.polyline(pts, colour, 2, dash)
        if dots:
            for px, py in pts:
                self.svg.circle(px, py, 3, colour)

    def legend(self, entries, x, y):
        for i, (label, colour, dash) in enumerate(entries):
            yy = y + 18 * i
            self.svg.line(x, yy, x + 24, yy, colour, 2, dash)
            self.svg.text(x + 30, yy + 4, label, 11)


def fmt(v):
    if v == int(v):
        return str(int(v))
    return f"{v:g}"
