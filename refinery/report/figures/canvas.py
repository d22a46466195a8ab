"""The figures' canvas: the one palette, an SVG element collector that records the boxes of the texts placed on it
(collision-free labels), legends, titles, and axes' ticks."""
from __future__ import annotations

import html
import math

from refinery.report.figures.measure import fit, overlap, text_box, text_width


MAX_WIDTH = 940                         # the report body, in px: no figure's viewBox is wider
FONT = "system-ui,sans-serif"

# Okabe & Ito (2008), colour-blind safe: the one palette of every figure.
BLUE, ORANGE, GREEN, VERMILLION = "#0072B2", "#E69F00", "#009E73", "#D55E00"
PURPLE, SKY, YELLOW, GREY = "#CC79A7", "#56B4E9", "#F0E442", "#999999"
PALETTE = (BLUE, ORANGE, GREEN, VERMILLION, PURPLE, SKY, YELLOW, GREY)   # series and labels, in this order
WARM = (VERMILLION, ORANGE, PURPLE, YELLOW)                              # rows dropped or rejected
PASS, ADDED, RED = BLUE, GREEN, VERMILLION                               # rows flowing on, rows added, thresholds
INK, MUTED, FRAME, GRID = "#222222", "#555555", "#888888", "#ebebeb"
BLUES = ("#f7fbff", "#deebf7", "#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c", "#08306b")
EMPTY = "#d9d9d9"                                                        # a heatmap cell without a value


def panel_columns(count: int) -> int:
    """Columns of a panel grid: one row up to 3 panels, 2×2 for 4, rows of 3 beyond."""
    return count if count <= 3 else 2 if count == 4 else 3


def label_every(pitch: float, need: float) -> int:
    """n: labelling every n-th of positions ``pitch`` px apart leaves labels ``need`` px wide room."""
    return max(1, math.ceil(need / pitch)) if pitch > 0 else 1_000_000


def nice_ticks(lo: float, hi: float, target: int = 5) -> tuple[float, float, list[float], float]:
    """(axis low, axis high, ticks, step): ``lo``…``hi`` widened to multiples of a 1/2/2.5/5×10^k step."""
    span = hi - lo if hi > lo else (abs(hi) or 1.0)
    raw = span / max(target, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw * (1 - 1e-9))
    a, b = math.floor(lo / step + 1e-9) * step, math.ceil(hi / step - 1e-9) * step
    if b <= a:
        b = a + step
    ticks = [round(a + i * step, 12) for i in range(int(round((b - a) / step)) + 1)]
    return a, b, ticks, step


def decimals(step: float) -> int:
    for d in range(0, 8):
        if abs(round(step, d) - step) < 1e-9 * max(1.0, abs(step)):
            return d
    return 8


def tick_label(v: float, step: float, percent: bool = False) -> str:
    if percent:
        return f"{100 * v:.{decimals(100 * step)}f}%"
    d = decimals(step)
    return (f"{v:,.{d}f}" if abs(v) >= 1000 else f"{v:.{d}f}").replace("-", "−")


def lighter(color: str, amount: float = 0.55) -> str:
    """``color`` mixed with white (``amount`` of white)."""
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    return "#" + "".join(f"{round(c + (255 - c) * amount):02x}" for c in (r, g, b))


def ink_on(color: str) -> str:
    """Ink readable on ``color``: white on dark fills, near-black on light ones."""
    r, g, b = (int(color[i:i + 2], 16) / 255 for i in (1, 3, 5))
    lum = 0.2126 * r ** 2.2 + 0.7152 * g ** 2.2 + 0.0722 * b ** 2.2
    return "#ffffff" if lum < 0.3 else INK


def escape(text) -> str:
    return html.escape(str(text), quote=True)


class Svg:
    """Collects SVG elements and the boxes of the texts placed so far (for collision-free placement)."""

    def __init__(self, width: float):
        self.width = width
        self.parts: list[str] = []
        self.boxes: list[tuple] = []

    def add(self, element: str) -> None:
        self.parts.append(element)

    def text(self, x, y, text, size=12, anchor="start", *, fill=INK, bold=False, rotate=None, halo=False,
             body=None) -> tuple:
        """Draw ``text`` (escaped; ``body`` = pre-escaped markup of the same characters) and record its box."""
        box = text_box(x, y, text, size, anchor, bold, rotate)
        self.boxes.append(box)
        attrs = f'x="{x:.1f}" y="{y:.1f}" font-size="{size:g}"'
        if anchor != "start":
            attrs += f' text-anchor="{anchor}"'
        if fill != INK:
            attrs += f' fill="{fill}"'
        if bold:
            attrs += ' font-weight="600"'
        if rotate:
            attrs += f' transform="rotate({rotate[0]:g} {rotate[1]:.1f} {rotate[2]:.1f})"'
        if halo:
            attrs += ' stroke="#ffffff" stroke-width="3" stroke-linejoin="round" paint-order="stroke"'
        self.add(f"<text {attrs}>{body if body is not None else escape(text)}</text>")
        return box

    def free(self, box, pad=1.0, others=()) -> bool:
        return not any(overlap(box, b, pad) for b in (*self.boxes, *others))

    def line(self, x1, y1, x2, y2, stroke=FRAME, width=1.0, dash=None, opacity=None):
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        extra += f' stroke-opacity="{opacity}"' if opacity is not None else ""
        self.add(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{stroke}" '
                 f'stroke-width="{width:g}"{extra}/>')

    def rect(self, x, y, w, h, fill, stroke=None, tip=None):
        s = f' stroke="{stroke}" stroke-width="0.8"' if stroke else ""
        head = f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{max(h, 0):.1f}" fill="{fill}"{s}'
        self.add(f"{head}><title>{escape(tip)}</title></rect>" if tip else f"{head}/>")

    def title(self, title: str, y: float) -> float:
        """The figure's title, centred on top, on two lines where one is too narrow (broken after its ``: ``, else
        at a space); returns the y below it."""
        if not title:
            return y
        room = self.width - 16
        lines = [title]
        if text_width(title, 16, True) > room:
            cut = title.rfind(": ") + 1 or title.rfind(" ", 0, len(title) // 2 + 1)
            lines = [title[:cut].strip(), title[cut:].strip()] if cut > 0 else [title]
        for i, line in enumerate(lines):
            self.text(self.width / 2, y + 17 + 22 * i, fit(line, room, 16, True), 16, "middle", bold=True)
        return y + 28 + 22 * (len(lines) - 1)

    def legend(self, items: list[tuple[str, str, str]], y: float, size: float = 11) -> float:
        """A centred legend strip of (kind, colour, text) items, kind ∈ dot, hollow, rect, line, dash, linedot;
        wrapped into lines as the width needs; returns the y below it."""
        if not items:
            return y
        widths = [24 + text_width(fit(t, self.width - 40, size), size) for _, _, t in items]
        lines, line, used = [], [], 0.0
        for item, w in zip(items, widths):
            if line and used + 18 + w > self.width - 16:
                lines.append((line, used))
                line, used = [], 0.0
            used += (18 if line else 0) + w
            line.append((item, w))
        lines.append((line, used))
        for line, used in lines:
            x = (self.width - used) / 2
            cy = y + 8
            for (kind, color, text), w in line:
                self._swatch(kind, color, x, cy)
                self.text(x + 24, cy + 4, fit(text, self.width - 40, size), size, fill=INK)
                x += w + 18
            y += 18
        return y + 4

    def _swatch(self, kind, color, x, cy):
        if kind == "dot":
            self.add(f'<circle cx="{x + 9:.1f}" cy="{cy:.1f}" r="3.5" fill="{color}" fill-opacity="0.45"/>')
        elif kind == "marker":
            self.add(f'<circle cx="{x + 9:.1f}" cy="{cy:.1f}" r="3.8" fill="{color}" stroke="#6b4a00" '
                     'stroke-width="0.7"/>')
        elif kind == "hollow":
            self.add(f'<circle cx="{x + 9:.1f}" cy="{cy:.1f}" r="3.5" fill="#ffffff" stroke="{color}" '
                     'stroke-width="1.4"/>')
        elif kind == "rect":
            self.rect(x + 2, cy - 6, 14, 12, color)
        elif kind == "whisker":
            self.line(x + 9, cy - 6, x + 9, cy + 6, INK, 1.2)
            self.line(x + 5, cy - 6, x + 13, cy - 6, INK, 1.2)
            self.line(x + 5, cy + 6, x + 13, cy + 6, INK, 1.2)
        elif kind == "linedot":
            self.line(x, cy, x + 18, cy, color, 1.6)
            self.add(f'<circle cx="{x + 9:.1f}" cy="{cy:.1f}" r="3" fill="{color}"/>')
        elif kind != "none":
            self.line(x, cy, x + 18, cy, color, 1.6, "5 3" if kind == "dash" else None)

    def render(self, height: float, label: str = "") -> str:
        w, h = int(math.ceil(self.width)), int(math.ceil(height))
        aria = f' role="img" aria-label="{escape(label)}"' if label else ' role="img"'
        return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="100%" '
                f'style="max-width:{w}px;height:auto" font-family="{FONT}" font-size="12"{aria}>'
                f'<rect width="{w}" height="{h}" fill="#ffffff"/>' + "".join(self.parts) + "</svg>")
