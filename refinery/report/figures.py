"""Figures for people: standalone, responsive SVG strings drawn directly (no plotting library).

Every figure is an ``<svg viewBox="0 0 W H" width="100%" style="max-width:Wpx;height:auto">`` with W ≤ 940 (the
report page's body), so it scales down to a narrow window and an A4 print. Text never overlaps other text: each
label's box is estimated from DejaVu Sans's advance widths (the widest common sans; ``system-ui`` on Linux) and
labels that would collide are moved or left to a list beside the panel. ``text_boxes``, ``text_overlaps`` and
``text_outside`` check a finished SVG the same way.
"""
from __future__ import annotations

import html
import math

import numpy as np

from refinery.core.stats import ZStats, significance_curve

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

# Advance widths of DejaVu Sans, % of the font size, for chr(32)…chr(126) (measured in Chromium).
_ASCII = (32, 41, 46, 84, 64, 96, 78, 28, 40, 40, 50, 84, 32, 37, 32, 34, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
          34, 34, 84, 84, 84, 54, 100, 69, 69, 70, 78, 64, 58, 78, 76, 30, 30, 66, 56, 87, 75, 79, 61, 79, 70, 64,
          62, 74, 69, 99, 69, 62, 69, 40, 34, 40, 84, 50, 50, 62, 64, 55, 64, 62, 36, 64, 64, 28, 28, 58, 28, 98,
          64, 62, 64, 64, 42, 53, 40, 64, 60, 82, 60, 60, 53, 64, 34, 64, 84)
_OTHER = {"…": 100, "α": 66, "·": 32, "–": 50, "—": 100, "−": 84, "≥": 84, "≤": 84, "×": 84, "→": 84}
_ASCENT, _DESCENT = 1.06, 0.27          # a text's box above and below its baseline, in font sizes (Segoe UI's
                                        # line box, the tallest common one; DejaVu's is 0.93 + 0.24)


# ---------------------------------------------------------------------------------------------- text geometry

def text_width(text: str, size: float, bold: bool = False) -> float:
    """Estimated rendered width of ``text`` in px (DejaVu Sans advances; bold 10% wider)."""
    total = 0
    for ch in text:
        o = ord(ch)
        if 32 <= o < 127:
            total += _ASCII[o - 32]
        elif 0x300 <= o < 0x370:        # combining marks (the hat of p̂)
            continue
        else:
            total += _OTHER.get(ch, 100 if o >= 0x2E80 else 84)
    return total / 100 * size * (1.1 if bold else 1.0)


def _box(x, y, text, size, anchor="start", bold=False, rotate=None):
    """(x0, y0, x1, y1) of a text drawn at (x, y); ``rotate`` = (degrees, cx, cy) as SVG's rotate()."""
    w = text_width(text, size, bold)
    x0 = x - {"start": 0.0, "middle": w / 2, "end": w}[anchor]
    box = (x0, y - _ASCENT * size, x0 + w, y + _DESCENT * size)
    if not rotate:
        return box
    a, cx, cy = math.radians(rotate[0]), rotate[1], rotate[2]
    pts = [(px, py) for px in (box[0], box[2]) for py in (box[1], box[3])]
    xs = [cx + (px - cx) * math.cos(a) - (py - cy) * math.sin(a) for px, py in pts]
    ys = [cy + (px - cx) * math.sin(a) + (py - cy) * math.cos(a) for px, py in pts]
    return (min(xs), min(ys), max(xs), max(ys))


def _hit(a, b, pad=0.0) -> bool:
    return a[0] < b[2] + pad and b[0] < a[2] + pad and a[1] < b[3] + pad and b[1] < a[3] + pad


def _fit(text: str, width: float, size: float, bold: bool = False) -> str:
    """``text``, cut with "…" to at most ``width`` px."""
    text = str(text)
    if text_width(text, size, bold) <= width:
        return text
    lo, hi = 0, len(text)
    while lo < hi:                      # the longest prefix that fits with its ellipsis
        mid = (lo + hi + 1) // 2
        if text_width(text[:mid] + "…", size, bold) <= width:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo].rstrip() + "…" if lo else ("…" if text_width("…", size, bold) <= width else "")


def _fit_middle(text: str, width: float, size: float) -> str:
    """``text`` with its middle cut to "…" to fit ``width`` px: both ends of a feature name (its words and its
    @field) stay readable."""
    text = str(text)
    if text_width(text, size) <= width:
        return text
    keep = len(text)
    while keep > 1:
        keep -= 1
        head, tail = text[:(keep + 1) // 2], text[len(text) - keep // 2:]
        if text_width(head + "…" + tail, size) <= width:
            return head + "…" + tail
    return _fit(text, width, size)


def _wrap(text: str, width: float, size: float, lines: int = 2) -> list[str]:
    """``text`` in at most ``lines`` lines of ``width`` px, broken after spaces, _, - or /; the last cut with …."""
    text = str(text)
    if text_width(text, size) <= width or lines <= 1:
        return [_fit(text, width, size)]
    cut = 0
    for i, ch in enumerate(text):
        if ch in " _-/." and text_width(text[:i + 1].rstrip(), size) <= width:
            cut = i + 1
    if not cut:
        return [_fit(text, width, size)]
    return [text[:cut].rstrip()] + _wrap(text[cut:].lstrip(), width, size, lines - 1)


def _attributes(tag: str) -> dict[str, str]:
    """name → value of the attributes of one start tag (the double-quoted form these figures write)."""
    out, pos = {}, 0
    while True:
        eq = tag.find('="', pos)
        if eq < 0:
            return out
        end = tag.find('"', eq + 2)
        out[tag[:eq].rsplit(None, 1)[-1]] = html.unescape(tag[eq + 2:end])
        pos = end + 1


def _strip_tags(body: str) -> str:
    out, pos = [], 0
    while (lt := body.find("<", pos)) >= 0:
        out.append(body[pos:lt])
        pos = body.find(">", lt) + 1
    out.append(body[pos:])
    return html.unescape("".join(out))


def text_boxes(svg: str) -> list[tuple[float, float, float, float, str]]:
    """(x0, y0, x1, y1, text) of every ``<text>`` of a figure of this module, in viewBox units, estimated as the
    figures place them (x, y, font-size, text-anchor, font-weight and rotate(a cx cy) of each text; the root's
    font-size otherwise)."""
    root = _attributes(svg[svg.find("<svg"):svg.find(">", svg.find("<svg"))])
    default = float(root.get("font-size", 16))
    out, pos = [], 0
    while (start := svg.find("<text", pos)) >= 0:
        close = svg.find(">", start)
        end = svg.find("</text>", close)
        a = _attributes(svg[start + 5:close])
        text = _strip_tags(svg[close + 1:end])
        rotate = None
        if a.get("transform", "").startswith("rotate("):
            rotate = tuple(float(v) for v in a["transform"][7:-1].replace(",", " ").split())
        bold = a.get("font-weight") in ("bold", "600", "700", "800", "900")
        out.append((*_box(float(a.get("x", 0)), float(a.get("y", 0)), text, float(a.get("font-size", default)),
                          a.get("text-anchor", "start"), bold, rotate), text))
        pos = end + 7
    return out


def text_overlaps(svg: str, pad: float = 0.0) -> list[tuple[str, str]]:
    """Pairs of texts whose estimated boxes intersect (an empty list for a readable figure)."""
    boxes = [b for b in text_boxes(svg) if b[4].strip()]
    return [(a[4], b[4]) for i, a in enumerate(boxes) for b in boxes[i + 1:] if _hit(a, b, pad)]


def text_outside(svg: str) -> list[str]:
    """Texts whose estimated boxes extend outside the viewBox."""
    root = _attributes(svg[svg.find("<svg"):svg.find(">", svg.find("<svg"))])
    _, _, w, h = (float(v) for v in root["viewBox"].split())
    return [b[4] for b in text_boxes(svg) if b[0] < 0 or b[1] < 0 or b[2] > w or b[3] > h]


# ---------------------------------------------------------------------------------------------- numbers

def _count(n) -> str:
    """12771 → "12,771"."""
    return f"{int(round(n)):,}"


def _num(x, digits: int = 3, zeros: bool = False) -> str:
    """3 significant digits, thousands separated: 16.479 → "16.5", 0.56038 → "0.56", 12345.6 → "12,346";
    ``zeros`` keeps trailing zeros (12.0)."""
    if x is None or not math.isfinite(float(x)):
        return "—" if x is None or math.isnan(float(x)) else ("∞" if x > 0 else "−∞")
    x = float(x)
    if x == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(x)))
    if magnitude >= digits - 1:
        return f"{round(x):,}".replace("-", "−")
    if magnitude < -4:
        return f"{x:.{digits - 1}e}"
    text = f"{x:.{digits - 1 - magnitude}f}"
    text = text.rstrip("0").rstrip(".") if "." in text and not zeros else text
    return text.replace("-", "−")


def _pct(share, decimals: int = 1) -> str:
    return f"{100 * share:.{decimals}f}%"


def _n_label(value: float) -> str:
    """10 → "10", 1000 → "1k", 10⁶ → "1M": tick labels of a log count axis."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def _ticks(lo: float, hi: float, target: int = 5) -> tuple[float, float, list[float], float]:
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


def _decimals(step: float) -> int:
    for d in range(0, 8):
        if abs(round(step, d) - step) < 1e-9 * max(1.0, abs(step)):
            return d
    return 8


def _tick_label(v: float, step: float, percent: bool = False) -> str:
    if percent:
        return f"{100 * v:.{_decimals(100 * step)}f}%"
    d = _decimals(step)
    return (f"{v:,.{d}f}" if abs(v) >= 1000 else f"{v:.{d}f}").replace("-", "−")


def _lighter(color: str, amount: float = 0.55) -> str:
    """``color`` mixed with white (``amount`` of white)."""
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    return "#" + "".join(f"{round(c + (255 - c) * amount):02x}" for c in (r, g, b))


def _on(color: str) -> str:
    """Ink readable on ``color``: white on dark fills, near-black on light ones."""
    r, g, b = (int(color[i:i + 2], 16) / 255 for i in (1, 3, 5))
    lum = 0.2126 * r ** 2.2 + 0.7152 * g ** 2.2 + 0.0722 * b ** 2.2
    return "#ffffff" if lum < 0.3 else INK


# ---------------------------------------------------------------------------------------------- canvas

def _e(text) -> str:
    return html.escape(str(text), quote=True)


class _Svg:
    """Collects SVG elements and the boxes of the texts placed so far (for collision-free placement)."""

    def __init__(self, width: float):
        self.width = width
        self.parts: list[str] = []
        self.boxes: list[tuple] = []

    def add(self, element: str) -> None:
        self.parts.append(element)

    def text(self, x, y, text, size=12, anchor="start", fill=INK, bold=False, rotate=None, halo=False,
             body=None) -> tuple:
        """Draw ``text`` (escaped; ``body`` = pre-escaped markup of the same characters) and record its box."""
        box = _box(x, y, text, size, anchor, bold, rotate)
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
        self.add(f"<text {attrs}>{body if body is not None else _e(text)}</text>")
        return box

    def free(self, box, pad=1.0, others=()) -> bool:
        return not any(_hit(box, b, pad) for b in (*self.boxes, *others))

    def line(self, x1, y1, x2, y2, stroke=FRAME, width=1.0, dash=None, opacity=None):
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        extra += f' stroke-opacity="{opacity}"' if opacity is not None else ""
        self.add(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{stroke}" '
                 f'stroke-width="{width:g}"{extra}/>')

    def rect(self, x, y, w, h, fill, stroke=None, tip=None):
        s = f' stroke="{stroke}" stroke-width="0.8"' if stroke else ""
        head = f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{max(h, 0):.1f}" fill="{fill}"{s}'
        self.add(f"{head}><title>{_e(tip)}</title></rect>" if tip else f"{head}/>")

    def title(self, title: str, y: float) -> float:
        """The figure's title, centred on top; returns the y below it."""
        if not title:
            return y
        self.text(self.width / 2, y + 17, _fit(title, self.width - 16, 16, True), 16, "middle", bold=True)
        return y + 28

    def legend(self, items: list[tuple[str, str, str]], y: float, size: float = 11) -> float:
        """A centred legend strip of (kind, colour, text) items, kind ∈ dot, hollow, rect, line, dash, linedot;
        wrapped into lines as the width needs; returns the y below it."""
        if not items:
            return y
        widths = [24 + text_width(_fit(t, self.width - 40, size), size) for _, _, t in items]
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
                self.text(x + 24, cy + 4, _fit(text, self.width - 40, size), size, fill=INK)
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
        aria = f' role="img" aria-label="{_e(label)}"' if label else ' role="img"'
        return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="100%" '
                f'style="max-width:{w}px;height:auto" font-family="{FONT}" font-size="12"{aria}>'
                f'<rect width="{w}" height="{h}" fill="#ffffff"/>' + "".join(self.parts) + "</svg>")


# ---------------------------------------------------------------------------------------------- z-plot

def _grid(count: int) -> int:
    """Columns of a panel grid: one row up to 3 panels, 2×2 for 4, rows of 3 beyond."""
    return count if count <= 3 else 2 if count == 4 else 3


def zplot(stats: ZStats, k: int = 8, title: str = "", max_points: int = 6000) -> str:
    """Gardner et al. (2021), Fig. 1, one panel per label: p̂(l|x) against n (log scale) of the features in at
    least min_count rows (translucent dots: the largest-n half of ``max_points`` and a seeded sample of the
    rest), the prior p0 (dashed), the Bonferroni significance curve p0 + z·sqrt(p0(1−p0)/n) (red), the top-k
    features (orange), the top 5 numbered in the plot and named in a list under it."""
    C = len(stats.labels)
    cols = _grid(max(C, 1))
    W = MAX_WIDTH if cols >= 2 else 560
    svg = _Svg(W)
    y = svg.title(title, 6)
    finite = math.isfinite(stats.threshold)
    legend = [("dot", BLUE, f"feature in ≥ {stats.min_count:,} rows"), ("marker", ORANGE, f"top {k} features" + (" (5 named)" if k > 5 else "")),
              ("dash", MUTED, "prior p0")]
    legend.append(("line", RED, f"Bonferroni α={stats.alpha:g} (z* > {stats.threshold:.2f})") if finite
                  else ("none", "", "no significance threshold"))
    y = svg.legend(legend, y + 2)
    if not C:
        svg.text(W / 2, y + 30, "no labels", 13, "middle", fill=MUTED)
        return svg.render(y + 50, title or "z-statistics")

    rows, p_all, _ = stats.eligible(max(stats.min_count, 1))
    n_all = np.asarray(stats.n, dtype=float)[rows]
    if len(n_all) > max_points:
        order = np.argsort(-n_all, kind="stable")
        sample = np.random.default_rng(0).choice(order[max_points // 2:], max_points - max_points // 2, False)
        idx = np.concatenate([order[: max_points // 2], sample])
        n_all, p_all = n_all[idx], p_all[idx]
    lo = math.log10(max(stats.min_count, 1))
    hi = max(math.log10(max(float(n_all.max(initial=1.0)), 1.0)), lo + 1)
    lo, hi = lo - 0.03 * (hi - lo), hi + 0.04 * (hi - lo)
    top = stats.top_k(k) if len(rows) else {label: [] for label in stats.labels}
    top = {label: [e for e in entries if e["z"] > 0] for label, entries in top.items()}  # below p0 is no bias

    pw = W / cols
    left, right = 50, 12
    plot_w = pw - left - right
    plot_h = float(min(250, max(170, 0.8 * plot_w)))
    list_lines = 5
    panel_h = 22 + plot_h + 50 + 15 * list_lines + 12
    n_rows = math.ceil(C / cols)
    for j, label in enumerate(stats.labels):
        r, c = divmod(j, cols)
        in_row = min(cols, C - r * cols)
        panel_x = c * pw + (cols - in_row) * pw / 2          # a shorter last row is centred
        _zpanel(svg, stats, j, label, panel_x, y + r * panel_h, pw, left, plot_w, plot_h, lo, hi,
                n_all, p_all[:, j] if len(p_all) else p_all, top.get(label, []), first=(c == 0), finite=finite)
    return svg.render(y + n_rows * panel_h, f"{title}: z-statistics" if title else "z-statistics")


def _zpanel(svg, stats, j, label, panel_x, top_y, pw, left, plot_w, plot_h, lo, hi, n_all, p_col, marked,
            first, finite):
    x0, y0 = panel_x + left, top_y + 22
    p_lo, p_hi = -0.03, 1.03

    def px(n):
        return x0 + (np.log10(np.maximum(np.asarray(n, dtype=float), 1e-9)) - lo) / (hi - lo) * plot_w

    def py(p):
        return y0 + (p_hi - np.asarray(p, dtype=float)) / (p_hi - p_lo) * plot_h

    svg.text(x0 + plot_w / 2, top_y + 14, _fit(label, pw - 16, 13, True), 13, "middle", bold=True)
    # grid, frame and ticks
    for tick in np.linspace(0, 1, 6):
        yy = float(py(tick))
        svg.line(x0, yy, x0 + plot_w, yy, GRID)
        svg.line(x0 - 4, yy, x0, yy, FRAME)
        svg.text(x0 - 6, yy + 3.5, f"{tick:.1f}", 10, "end", fill=MUTED)
    decades = list(range(math.ceil(lo), math.floor(hi) + 1))
    per_decade = plot_w / (hi - lo)
    widest = max((text_width(_n_label(10.0 ** d), 10) for d in decades), default=0)
    every = max(1, math.ceil((widest + 8) / per_decade))
    for d in decades:
        xx = float(px(10.0 ** d))
        svg.line(xx, y0, xx, y0 + plot_h, GRID)
        if (d - decades[0]) % every == 0:
            svg.line(xx, y0 + plot_h, xx, y0 + plot_h + 4, FRAME)
            svg.text(xx, y0 + plot_h + 17, _n_label(10.0 ** d), 10, "middle", fill=MUTED)
    svg.rect(x0, y0, plot_w, plot_h, "none", FRAME)
    svg.text(x0 + plot_w / 2, y0 + plot_h + 33, _fit("n = rows with the feature (log scale)", plot_w, 11), 11,
             "middle", fill=MUTED)
    if first:
        svg.text(panel_x + 13, y0 + plot_h / 2, "p̂(label | feature)", 11, "middle", fill=MUTED,
                 rotate=(-90, panel_x + 13, y0 + plot_h / 2))
    # features
    if len(n_all):
        xs, ys = np.round(px(n_all) * 2) / 2, np.round(py(p_col) * 2) / 2
        pts = np.unique(np.stack([xs, ys], axis=1), axis=0)
        dots = "".join(f"M{a:g} {b:g}h0" for a, b in pts)
        svg.add(f'<path d="{dots}" stroke="{BLUE}" stroke-opacity="0.3" stroke-width="3.4" stroke-linecap="round" '
                'fill="none"/>')
    else:
        note = _fit(f"no feature in ≥ {stats.min_count:,} rows", plot_w - 10, 11)
        svg.text(x0 + plot_w / 2, y0 + plot_h * 0.62, note, 11, "middle", fill=MUTED)
    p0 = float(stats.p0[j])
    svg.line(x0, float(py(p0)), x0 + plot_w, float(py(p0)), MUTED, 1.2, "5 3")
    if finite and 0 < p0 < 1:
        n_star = stats.threshold ** 2 * p0 / (1 - p0)       # where the curve crosses p̂ = 1
        start = max(lo, math.log10(n_star)) if n_star > 0 else lo
        if start < hi:
            grid = np.logspace(start, hi, 100)
            cy = np.minimum(significance_curve(grid, p0, stats.threshold), 1.0)
            pts = " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(px(grid), py(cy)))
            svg.add(f'<polyline points="{pts}" fill="none" stroke="{RED}" stroke-width="1.6"/>')
    # top features: orange dots, the top 5 numbered where a number fits
    spots = [(float(px(e["n"])), float(py(e["p"]))) for e in marked]
    for sx, sy in spots:
        svg.add(f'<circle cx="{sx:.1f}" cy="{sy:.1f}" r="3.6" fill="{ORANGE}" stroke="#6b4a00" stroke-width="0.7"/>')
    dots = [(sx - 4, sy - 4, sx + 4, sy + 4) for sx, sy in spots]
    groups: list[tuple[list[int], tuple[float, float]]] = []
    for rank, spot in enumerate(spots[:5], 1):
        for ranks, at in groups:
            if abs(at[0] - spot[0]) < 2.5 and abs(at[1] - spot[1]) < 2.5:
                ranks.append(rank)
                break
        else:
            groups.append(([rank], spot))
    bounds = (x0 + 1, y0 + 1, x0 + plot_w - 1, y0 + plot_h - 1)
    for ranks, (sx, sy) in groups:
        text = ",".join(map(str, ranks)) if len(ranks) < 3 or ranks != list(range(ranks[0], ranks[-1] + 1)) \
            else f"{ranks[0]}–{ranks[-1]}"
        _place_number(svg, text, sx, sy, bounds, dots)
    # the top 5 named under the panel
    yy = y0 + plot_h + 52
    for rank, e in enumerate(marked[:5], 1):
        z = f"z* {_num(e['z'], zeros=True)}"
        zw = text_width(z, 11)
        name = _fit_middle(e["feature"], pw - 16 - zw - 14 - 16, 11)
        svg.text(panel_x + 8, yy, f"{rank} {name}", 11,
                 body=f'<tspan fill="#8a5a00">{rank}</tspan> {_e(name)}')
        svg.text(panel_x + pw - 8, yy, z, 11, "end", fill=MUTED)
        yy += 15
    if not marked:
        svg.text(panel_x + 8, yy, _fit("no top feature", pw - 16, 11), 11, fill=MUTED)


def _place_number(svg: _Svg, text: str, sx: float, sy: float, bounds, dots) -> bool:
    """Greedy placement of a rank number next to its dot: the first candidate offset (8 directions, growing
    distances, a leader line beyond the nearest) that stays in the plot and clears texts and top-k dots."""
    size = 10
    w, h = text_width(text, size), (_ASCENT + _DESCENT) * size
    for r in (4, 11, 20, 32, 46):
        for ux, uy in ((1, -1), (1, 0), (0, -1), (-1, -1), (-1, 0), (1, 1), (0, 1), (-1, 1)):
            cx, cy = sx + ux * (r + w / 2), sy + uy * (r + h / 2)
            box = (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)
            if box[0] < bounds[0] or box[1] < bounds[1] or box[2] > bounds[2] or box[3] > bounds[3]:
                continue
            if not svg.free(box, 1.0, dots):
                continue
            if r > 4:
                ex = min(max(sx, box[0]), box[2])
                ey = min(max(sy, box[1]), box[3])
                d = math.hypot(ex - sx, ey - sy) or 1.0
                svg.line(sx + (ex - sx) * 4 / d, sy + (ey - sy) * 4 / d, ex, ey, MUTED, 0.7)
            baseline = cy + h / 2 - _DESCENT * size
            svg.text(cx, baseline, text, size, "middle", halo=True)
            return True
    return False


# ---------------------------------------------------------------------------------------------- bars

def bars(groups: list[str], series: list[str], values: list[list[float]], low: list[list[float]] | None = None,
         high: list[list[float]] | None = None, reference: list[float] | None = None,
         reference_label: str = "majority class", title: str = "", y_label: str = "accuracy",
         percent: bool = True, paired: bool = False) -> str:
    """Grouped vertical bars: ``values[s][g]`` = series s (e.g. a training corpus, one colour) on group g (e.g. an
    evaluation set; a G×S nesting is read too when G ≠ S), whiskers from ``low``/``high``, a dashed reference
    line per group, value labels above the bars where they fit. The y axis starts at 0 (a bar's length is its
    value: a 2-point difference looks like 2 points), below 0 only for negative values. ``paired``: series come
    in pairs (a corpus on two slices), a pair in one hue, its second bar lighter."""
    G, S = len(groups), len(series)
    colors = [_lighter(PALETTE[(s // 2) % len(PALETTE)]) if paired and s % 2 else
              PALETTE[(s // 2 if paired else s) % len(PALETTE)] for s in range(S)]

    def grid(m):
        if m is None:
            return None
        a = np.array([[np.nan if v is None else v for v in row] for row in m], dtype=float) if len(m) else \
            np.zeros((0, 0))
        if a.shape == (S, G):
            return a
        if a.shape == (G, S):
            return a.T
        raise ValueError(f"bars: expected {S} series × {G} groups, got shape {a.shape}")

    vals, lows, highs = grid(values), grid(low), grid(high)
    ref = np.array([np.nan if v is None else v for v in reference], dtype=float) if reference is not None else None
    if ref is not None and len(ref) != G:
        raise ValueError(f"bars: reference needs one value per group ({G}), got {len(ref)}")
    W = float(min(MAX_WIDTH, max(520, 100 + G * (S * 60 + 50))))
    svg = _Svg(W)
    y = svg.title(title, 6)
    items = [("rect", colors[i], str(s)) for i, s in enumerate(series)]
    if lows is not None or highs is not None:
        items.append(("whisker", INK, "confidence interval"))
    if ref is not None and np.isfinite(ref).any():
        items.append(("dash", INK, reference_label))
    y = svg.legend(items, y + 2)

    data = np.concatenate([a[np.isfinite(a)].ravel() for a in (vals, lows, highs, ref) if a is not None] or [[]])
    x0, plot_w, top, plot_h = 64.0, W - 64 - 12, y + 8, 250.0
    if not data.size:
        svg.text(W / 2, top + plot_h / 2, "no values", 12, "middle", fill=MUTED)
        return svg.render(top + plot_h + 10, title or "bars")
    dmin, dmax = min(float(data.min()), 0.0), max(float(data.max()), 0.0)
    span = dmax - dmin if dmax > dmin else (0.01 if percent else 1e-3)
    lo = dmin - 0.05 * span if dmin < 0 else 0.0
    hi = dmax + 0.05 * span
    gw = plot_w / max(G, 1)
    pitch = min(56.0, 0.8 * gw / max(S, 1))
    bw = pitch - 3 if pitch > 8 else pitch * 0.8
    fmt = (lambda v: _pct(v)) if percent else _num
    labels = [[fmt(v) if math.isfinite(v) else "" for v in row] for row in vals]
    size = next((s for s in (10, 9) if max((text_width(t, s) for row in labels for t in row), default=0) + 3 <= pitch),
                None)
    _, _, _, step = _ticks(lo, hi, 6)       # the axis starts at 0 (or a half tick below negative data)
    a = math.floor(lo / (step / 2) + 1e-9) * (step / 2)
    tops = np.fmax(highs, vals) if highs is not None else vals
    tallest = float(np.nanmax(tops)) if np.isfinite(tops).any() else hi
    need = (6 + (_ASCENT + _DESCENT) * size if size else 4) / plot_h      # the room above it, a share of the axis
    b = max(hi, (tallest - need * a) / (1 - need))
    first = math.ceil(a / step - 1e-9) * step
    ticks = [round(first + i * step, 12) for i in range(int((b - first) / step + 1e-9) + 1)]
    scale = plot_h / (b - a)

    def ypx(v):
        return top + (b - v) * scale

    for t in ticks:
        yy = ypx(t)
        svg.line(x0, yy, x0 + plot_w, yy, GRID)
        svg.line(x0 - 4, yy, x0, yy, FRAME)
        svg.text(x0 - 7, yy + 3.5, _tick_label(t, step, percent), 10, "end", fill=MUTED)
    svg.line(x0, top, x0, top + plot_h, FRAME)
    svg.line(x0, top + plot_h, x0 + plot_w, top + plot_h, FRAME)
    svg.text(16, top + plot_h / 2, _fit(y_label, plot_h, 11), 11, "middle", fill=MUTED,
             rotate=(-90, 16, top + plot_h / 2))
    label_y = top + plot_h + 16
    for g, name in enumerate(groups):
        gx = x0 + g * gw + (gw - pitch * S) / 2
        for s in range(S):
            v = vals[s, g]
            bx = gx + s * pitch + (pitch - bw) / 2
            if not math.isfinite(v):
                continue
            color = colors[s]
            base_y = ypx(max(a, 0.0))
            svg.rect(bx, min(ypx(v), base_y), bw, abs(base_y - ypx(v)), color,
                     tip=f"{series[s]} · {name}: {fmt(v)}")
            peak = ypx(v)
            lo_v = lows[s, g] if lows is not None else np.nan
            hi_v = highs[s, g] if highs is not None else np.nan
            if math.isfinite(lo_v) or math.isfinite(hi_v):
                l1 = ypx(lo_v if math.isfinite(lo_v) else v)
                h1 = ypx(hi_v if math.isfinite(hi_v) else v)
                cx, cap = bx + bw / 2, min(bw * 0.25, 6)
                svg.line(cx, l1, cx, h1, INK, 1.2)
                svg.line(cx - cap, l1, cx + cap, l1, INK, 1.2)
                svg.line(cx - cap, h1, cx + cap, h1, INK, 1.2)
                peak = min(peak, h1)
            if size:
                svg.text(bx + bw / 2, peak - 4 - _DESCENT * size, labels[s][g], size, "middle")
        if ref is not None and math.isfinite(ref[g]):
            yy = ypx(ref[g])
            svg.line(x0 + g * gw + 4, yy, x0 + (g + 1) * gw - 4, yy, INK, 1.4, "6 3")
        for i, line in enumerate(_wrap(name, gw - 8, 11, 2)):
            svg.text(x0 + g * gw + gw / 2, label_y + 14 * i, line, 11, "middle")
    return svg.render(label_y + 22, title or "bars")


# ---------------------------------------------------------------------------------------------- heatmap

def _blues(t: float) -> str:
    t = min(max(t, 0.0), 1.0) * (len(BLUES) - 1)
    i = min(int(t), len(BLUES) - 2)
    f = t - i
    a, b = BLUES[i], BLUES[i + 1]
    rgb = [round(int(a[k:k + 2], 16) * (1 - f) + int(b[k:k + 2], 16) * f) for k in (1, 3, 5)]
    return "#" + "".join(f"{v:02x}" for v in rgb)


def _thin(pitch: float, need: float) -> int:
    """n: labelling every n-th of positions ``pitch`` px apart leaves labels ``need`` px wide room."""
    return max(1, math.ceil(need / pitch)) if pitch > 0 else 1_000_000


def heatmap(matrix, row_labels: list[str], col_labels: list[str], title: str = "", x_label: str = "",
            y_label: str = "", value_label: str = "") -> str:
    """A matrix as cells on a sequential (ColorBrewer Blues) scale with a colour bar outside, cropped of the
    trailing rows and columns whose cells are all NaN (no data; a 0 is data); cell values written where cells are ≥ 28 px
    wide, row and column labels thinned so that none overlap."""
    m = np.array(matrix, dtype=float)
    if m.ndim != 2:
        m = m.reshape(len(row_labels), -1) if m.size else np.zeros((0, 0))
    filled = np.isfinite(m)
    rows = int(np.flatnonzero(filled.any(axis=1))[-1] + 1) if filled.any() else 0
    cols = int(np.flatnonzero(filled.any(axis=0))[-1] + 1) if filled.any() else 0
    m = m[:rows, :cols]
    row_labels = [str(v) for v in list(row_labels)[:rows]] + [""] * max(0, rows - len(row_labels))
    col_labels = [str(v) for v in list(col_labels)[:cols]] + [""] * max(0, cols - len(col_labels))
    fs = 11
    label_w = min(160.0, max((text_width(t, fs) for t in row_labels), default=0))
    left = 8 + (18 if y_label else 0) + label_w + 6
    bar_area = 96
    avail = MAX_WIDTH - left - bar_area
    cell = min(avail / max(cols, 1), 460 / max(rows, 1), 56.0)
    W = max(left + cols * cell + bar_area, 360.0, text_width(title, 16, True) + 24)
    svg = _Svg(min(W, MAX_WIDTH))
    y = svg.title(title, 6)
    top = y + 22
    if not rows:
        svg.text(svg.width / 2, top + 20, "no data", 12, "middle", fill=MUTED)
        return svg.render(top + 40, title or "heatmap")
    finite = m[np.isfinite(m)]
    vmin, vmax = min(0.0, float(finite.min())), float(finite.max())
    if vmax <= vmin:
        vmax = vmin + 1.0
    x0 = left
    for i in range(rows):
        for j in range(cols):
            v = m[i, j]
            color = _blues((v - vmin) / (vmax - vmin)) if math.isfinite(v) else EMPTY
            svg.rect(x0 + j * cell, top + i * cell, cell + 0.3, cell + 0.3, color,
                     tip=f"{row_labels[i]} · {col_labels[j]}: {_num(v)}")
    svg.rect(x0, top, cols * cell, rows * cell, "none", FRAME)
    if cell >= 28:          # values in the cells, at the largest size where every value fits
        texts = [[_num(v) if math.isfinite(v) else "" for v in row] for row in m]
        size = next((s for s in (11, 10, 9) if (_ASCENT + _DESCENT) * s + 4 <= cell and
                     max(text_width(t, s) for row in texts for t in row) + 4 <= cell), None)
        if size:
            for i in range(rows):
                for j in range(cols):
                    if texts[i][j]:
                        v = m[i, j]
                        svg.text(x0 + (j + 0.5) * cell, top + (i + 0.5) * cell + 0.35 * size, texts[i][j], size,
                                 "middle", fill=_on(_blues((v - vmin) / (vmax - vmin))))
    # row labels, thinned
    every = _thin(cell, (_ASCENT + _DESCENT) * fs + 2)
    for i in range(0, rows, every):
        svg.text(x0 - 6, top + (i + 0.5) * cell + 0.35 * fs, _fit(row_labels[i], label_w, fs), fs, "end")
    # column labels: horizontal where they fit with less thinning, else vertical
    widest = max((text_width(t, fs) for t in col_labels), default=0)
    long_w = min(widest, 90.0)
    h_every, v_every = _thin(cell, widest + 6), _thin(cell, (_ASCENT + _DESCENT) * fs + 2)
    base = top + rows * cell
    if h_every <= v_every:
        for j in range(0, cols, h_every):
            svg.text(x0 + (j + 0.5) * cell, base + 15, col_labels[j], fs, "middle")
        below = base + 22
    else:
        for j in range(0, cols, v_every):
            cx, cy = x0 + (j + 0.5) * cell + 0.35 * fs, base + 6
            svg.text(cx, cy, _fit(col_labels[j], long_w, fs), fs, "end", rotate=(-90, cx, cy))
        below = base + 12 + long_w
    if x_label:
        label = _fit(x_label, max(cols * cell, 200), 11)
        half = text_width(label, 11) / 2 + 2   # centred under the cells, moved in where it would leave the figure
        svg.text(min(max(x0 + cols * cell / 2, half), svg.width - half), below + 14, label, 11, "middle", fill=MUTED)
        below += 20
    if y_label:
        svg.text(14, top + rows * cell / 2, _fit(y_label, max(rows * cell, 120), 11), 11, "middle", fill=MUTED,
                 rotate=(-90, 14, top + rows * cell / 2))
    # colour bar
    bx, bh = x0 + cols * cell + 18, max(min(rows * cell, 220.0), 110.0)
    if value_label:
        svg.text(bx, top - 8, _fit(value_label, svg.width - bx - 4, 10), 10, fill=MUTED)
    steps = 40
    for s in range(steps):
        svg.rect(bx, top + bh * s / steps, 12, bh / steps + 0.4, _blues(1 - s / (steps - 1)))
    svg.rect(bx, top, 12, bh, "none", FRAME)
    target = max(2, min(6, int(bh // 26)))
    _, _, ticks, step = _ticks(vmin, vmax, target)
    for t in ticks:
        if vmin - 1e-12 <= t <= vmax + 1e-12:
            yy = top + bh * (vmax - t) / (vmax - vmin)
            svg.line(bx + 12, yy, bx + 15, yy, FRAME)
            svg.text(bx + 18, yy + 3.5, _fit(_tick_label(t, step), svg.width - bx - 22, 10), 10, fill=MUTED)
    bottom = max(below, top + bh + 8)
    if not np.isfinite(m).all():
        svg.rect(bx, top + bh + 12, 12, 10, EMPTY)
        svg.text(bx + 16, top + bh + 21, _fit("no value", svg.width - bx - 20, 10), 10, fill=MUTED)
        bottom = max(bottom, top + bh + 30)
    return svg.render(bottom + 6, title or "heatmap")


# ---------------------------------------------------------------------------------------------- small multiples

def small_multiples(series: dict[str, list[float | None]], steps: list[str], threshold: list[float] | float,
                    title: str = "", y_label: str = "z*") -> str:
    """One small panel per series (up to 4 per row, a shared y scale): its values across ``steps`` as a line
    with dots, the threshold as a red dashed line (a step line when given per step), a None as a gap with a
    hollow marker at 0 (absent, or n below min_count); step names under the bottom panel of each column."""
    names = list(series)
    S, T = len(names), len(steps)
    cols = max(1, math.ceil(S / math.ceil(S / 4))) if S else 1     # 5 → 3+2, 7 → 4+3
    W = {1: 440.0, 2: 700.0}.get(cols, float(MAX_WIDTH))
    svg = _Svg(W)
    y = svg.title(title, 6)
    vals = np.array([[np.nan if v is None else float(v) for v in (list(series[n]) + [None] * T)[:T]] for n in names],
                    dtype=float).reshape(S, T)
    thr = np.array([np.nan if t is None else float(t) for t in threshold], dtype=float) \
        if isinstance(threshold, (list, tuple, np.ndarray)) else np.full(T, float(threshold))
    thr = np.concatenate([thr, np.full(max(0, T - len(thr)), np.nan)])[:T]
    gaps = bool(np.isnan(vals).any())
    items = [("linedot", BLUE, y_label), ("dash", RED, "Bonferroni threshold")]
    if gaps:
        items.append(("hollow", BLUE, "n<min (feature absent or below min_count)"))
    y = svg.legend(items, y + 2)
    finite = np.concatenate([vals[np.isfinite(vals)], thr[np.isfinite(thr)]])
    lo = min(0.0, float(finite.min())) if finite.size else 0.0
    hi = max(float(finite.max()) if finite.size else 1.0, lo + 1e-9)
    a, b, ticks, step = _ticks(lo, hi * 1.04 if hi > 0 else hi, 4)
    fs = 10
    tick_w = max(text_width(_tick_label(t, step), fs) for t in ticks)
    left, gap, right = 20 + tick_w + 8, 16.0, 8.0
    plot_w = (W - left - right - (cols - 1) * gap) / cols
    plot_h = 110.0
    pitch = plot_w / max(T, 1)
    widest = max((text_width(s, fs) for s in steps), default=0)
    horizontal = widest + 6 <= pitch
    every = 1 if horizontal else _thin(pitch, (_ASCENT + _DESCENT) * fs + 2)
    long_w = min(widest, 88.0)
    label_h = 20.0 if horizontal else 10 + long_w
    n_rows = math.ceil(S / cols) if S else 0
    if not S:
        svg.text(W / 2, y + 30, "no series", 12, "middle", fill=MUTED)
        return svg.render(y + 50, title or "small multiples")
    cur = y + 4
    for r in range(n_rows):
        labelled = [i for i in range(r * cols, min(S, (r + 1) * cols)) if i + cols >= S]
        top = cur + 18
        for i in range(r * cols, min(S, (r + 1) * cols)):
            c = i - r * cols
            x0 = left + c * (plot_w + gap)
            _small_panel(svg, names[i], vals[i], thr, x0, top, plot_w, plot_h, a, b, ticks, step, fs,
                         first=(c == 0))
            if i in labelled:
                for t in range(0, T, every):
                    cx = x0 + (t + 0.5) * pitch
                    svg.line(cx, top + plot_h, cx, top + plot_h + 3, FRAME)
                    if horizontal:
                        svg.text(cx, top + plot_h + 15, steps[t], fs, "middle", fill=MUTED)
                    else:
                        tx, ty = cx + 0.35 * fs, top + plot_h + 6
                        svg.text(tx, ty, _fit(steps[t], long_w, fs), fs, "end", fill=MUTED, rotate=(-90, tx, ty))
        svg.text(12, top + plot_h / 2, _fit(y_label, plot_h, 11), 11, "middle", fill=MUTED,
                 rotate=(-90, 12, top + plot_h / 2))
        cur = top + plot_h + (label_h if labelled else 6) + 12
    return svg.render(cur, title or "small multiples")


def _small_panel(svg, name, v, thr, x0, top, plot_w, plot_h, a, b, ticks, step, fs, first):
    T = len(v)
    pitch = plot_w / max(T, 1)

    def ypx(val):
        return top + (b - val) / (b - a) * plot_h

    svg.text(x0 + plot_w / 2, top - 6, _fit_middle(name, plot_w, 11.5), 11.5, "middle")
    for t in ticks:
        yy = ypx(t)
        svg.line(x0, yy, x0 + plot_w, yy, GRID)
        if first:
            svg.line(x0 - 3, yy, x0, yy, FRAME)
            svg.text(x0 - 5, yy + 3.5, _tick_label(t, step), fs, "end", fill=MUTED)
    svg.rect(x0, top, plot_w, plot_h, "none", FRAME)
    xs = [x0 + (t + 0.5) * pitch for t in range(T)]
    # threshold: a line, or a step line when it changes across steps
    path, prev = [], None
    for t in range(T):
        if not math.isfinite(thr[t]):
            prev = None
            continue
        yy = ypx(thr[t])
        xa, xb = x0 + t * pitch, x0 + (t + 1) * pitch
        path.append(f"{'L' if prev is not None else 'M'}{xa:.1f} {yy:.1f}L{xb:.1f} {yy:.1f}")
        prev = yy
    if path:
        svg.add(f'<path d="{"".join(path)}" fill="none" stroke="{RED}" stroke-width="1.4" stroke-dasharray="5 3"/>')
    # the series: segments between consecutive values, dots, hollow markers at 0 for gaps
    seg, segs = [], []
    for t in range(T):
        if math.isfinite(v[t]):
            seg.append(f"{xs[t]:.1f},{ypx(v[t]):.1f}")
        else:
            segs.append(seg)
            seg = []
    segs.append(seg)
    for s in segs:
        if len(s) > 1:
            svg.add(f'<polyline points="{" ".join(s)}" fill="none" stroke="{BLUE}" stroke-width="1.8"/>')
    for t in range(T):
        if math.isfinite(v[t]):
            svg.add(f'<circle cx="{xs[t]:.1f}" cy="{ypx(v[t]):.1f}" r="3" fill="{BLUE}"><title>{_e(name)}: '
                    f'{_e(_num(v[t]))}</title></circle>')
        else:
            svg.add(f'<circle cx="{xs[t]:.1f}" cy="{ypx(0.0):.1f}" r="3.2" fill="#ffffff" stroke="{BLUE}" '
                    'stroke-width="1.3"/>')


# ---------------------------------------------------------------------------------------------- row flow

def _segments(step: dict) -> list[tuple[str, int, str, bool]]:
    """(part, rows, colour, flows on) of one step, in drawing order: the passing part, the dropped parts,
    then the added ones (beyond the rows in). A report-only stage (``passes`` None) passes all its rows."""
    rows_in = max(0, int(step.get("rows_in") or 0))
    passes = step.get("passes")
    parts = [(str(k), max(0, int(v or 0))) for k, v in (step.get("parts") or {}).items()]
    kept = [p for p in parts if p[0] == passes]
    added = [p for p in parts if p[0] != passes and "added" in p[0].lower()]
    dropped = [p for p in parts if p not in kept and p not in added]
    if passes is None:
        out = [(name, n, SKY if i == 0 else GREY, True) for i, (name, n) in enumerate(dropped)]
        rest = rows_in - sum(n for _, n in dropped)
        if rest > 0:        # the rows no part counts pass unchanged
            out.insert(0, ("passed", rest, PASS, True))
        return out + [(name, n, ADDED, True) for name, n in added]
    return ([(name, n, PASS, True) for name, n in kept] +
            [(name, n, WARM[i % len(WARM)], False) for i, (name, n) in enumerate(dropped)] +
            [(name, n, ADDED, True) for name, n in added])


def row_flow(steps: list[dict]) -> str:
    """Where the rows went: one horizontal stacked bar per step (length ∝ its rows, a shared scale), its parts
    coloured (the part flowing on blue, dropped parts warm, added rows green beyond the bar), counts inside
    the segments they fit, listed with a colour key right of the bar otherwise, grey connectors from each
    step's flowing parts to the next bar."""
    W = float(MAX_WIDTH)
    svg = _Svg(W)
    if not steps:
        svg.text(W / 2, 30, "no steps", 12, "middle", fill=MUTED)
        return svg.render(50, "row flow")
    fs, bar_h = 11, 26.0
    names = [str(st.get("name", "")) for st in steps]
    ins = [max(0, int(st.get("rows_in") or 0)) for st in steps]
    segs = [[seg for seg in _segments(st) if seg[1] > 0] for st in steps]
    name_w = min(190.0, max(max(text_width(n, 12), text_width(f"{_count(r)} rows in", 10)) for n, r in zip(names, ins)))
    bar_x = 8 + name_w + 12
    total = max([max(r, sum(seg[1] for seg in ss)) for r, ss in zip(ins, segs)] + [1])

    def place(scale):
        """Per step: (bar end, [(x, w, segment, text inside or None)], [segments listed outside])."""
        plan = []
        for ss in segs:
            x, inside, outside = bar_x, [], []
            for seg in ss:
                w = max(seg[1] * scale, 2.0)
                full = f"{_count(seg[1])} {seg[0]}"
                fits = text_width(full, fs) + 8 <= w
                inside.append((x, w, seg, full if fits else None))
                if not fits:
                    outside.append(seg)
                x += w
            plan.append((x, inside, outside))
        return plan

    def ext_width(outside):
        return max((14 + text_width(f"{_count(n)} {name}", fs) for name, n, _, _ in outside), default=-8) + 8

    scale = (W - bar_x - 12) / total
    for _ in range(8):      # shrink the bars until every bar's outside labels fit right of it
        plan = place(scale)
        fit = min([(W - bar_x - 8 - ext_width(out)) / max(sum(seg[1] for seg in ss), 1)
                   for (end, _, out), ss in zip(plan, segs)] + [scale])
        if fit >= scale * 0.999:
            break
        scale = max(fit, 1e-9)
    plan = place(scale)
    y, prev = 8.0, None
    for name, rows_in, (end, inside, outside) in zip(names, ins, plan):
        block = max(bar_h, len(outside) * 15.0)
        by = y + (block - bar_h) / 2
        if prev is not None:        # connectors: the previous step's flowing parts, laid end to end on this bar
            bar_end, at = bar_x + max(end - bar_x, 0), bar_x
            for xa, xb in prev[1]:
                ta, tb = min(at, bar_end), min(at + (xb - xa), bar_end)
                at += xb - xa
                svg.add(f'<polygon points="{xa:.1f},{prev[0]:.1f} {xb:.1f},{prev[0]:.1f} {tb:.1f},{by:.1f} '
                        f'{ta:.1f},{by:.1f}" fill="#000000" fill-opacity="0.05"/>')
                svg.line(xa, prev[0], ta, by, GREY, 0.8)
                svg.line(xb, prev[0], tb, by, GREY, 0.8)
        svg.text(bar_x - 10, by + 11, _fit(name, name_w, 12), 12, "end")
        svg.text(bar_x - 10, by + 25, _fit(f"{_count(rows_in)} rows in", name_w, 10), 10, "end", fill=MUTED)
        flows = []
        for x, w, (part, n, color, flowing), text in inside:
            svg.rect(x, by, w, bar_h, color, tip=f"{name}: {_count(n)} {part}")
            if text:
                svg.text(x + w / 2, by + bar_h / 2 + 0.35 * fs, text, fs, "middle", fill=_on(color))
            if flowing:
                if flows and abs(flows[-1][1] - x) < 0.5:
                    flows[-1] = (flows[-1][0], x + w)
                else:
                    flows.append((x, x + w))
        oy = by + bar_h / 2 - (len(outside) - 1) * 7.5
        for i, (part, n, color, _) in enumerate(outside):
            cy = oy + 15 * i
            svg.rect(end + 6, cy - 5, 10, 10, color)
            svg.text(end + 20, cy + 0.35 * fs, f"{_count(n)} {part}", fs)
        prev = (by + bar_h, flows)
        y += block + 22
    return svg.render(y - 14, "row flow")


# ---------------------------------------------------------------------------------------------- shares

def shares(rows: dict[str, dict[str, int]], title: str = "") -> str:
    """The label distribution per step: one 100%-stacked horizontal bar per step, a colour per label shared by
    all bars, percentages (one decimal) inside the segments that fit them, the legend above, the total rows
    right of each bar."""
    W = float(MAX_WIDTH)
    svg = _Svg(W)
    y = svg.title(title, 6)
    labels: list[str] = []
    for counts in rows.values():
        labels += [str(l) for l in counts if str(l) not in labels]
    color = {l: PALETTE[i % len(PALETTE)] for i, l in enumerate(labels)}
    y = svg.legend([("rect", color[l], l) for l in labels], y + 2)
    if not rows:
        svg.text(W / 2, y + 20, "no steps", 12, "middle", fill=MUTED)
        return svg.render(y + 40, title or "label shares")
    fs = 11
    name_w = min(190.0, max(text_width(str(s), 12) for s in rows))
    totals = {s: sum(max(0, int(v or 0)) for v in c.values()) for s, c in rows.items()}
    total_w = max(text_width(f"{_count(t)} rows", fs) for t in totals.values())
    bar_x = 8 + name_w + 10
    bar_w = W - bar_x - total_w - 18
    bar_h, y = 22.0, y + 6
    for step, counts in rows.items():
        total = totals[step]
        svg.text(bar_x - 8, y + bar_h / 2 + 4, _fit(str(step), name_w, 12), 12, "end")
        if not total:
            svg.rect(bar_x, y, bar_w, bar_h, "#f2f2f2", FRAME)
            svg.text(bar_x + bar_w / 2, y + bar_h / 2 + 0.35 * fs, "no rows", fs, "middle", fill=MUTED)
        x = bar_x
        by_name = {str(k): v for k, v in counts.items()}
        for label in labels:            # the same order in every bar
            n = max(0, int(by_name.get(label) or 0))
            if not total or not n:
                continue
            w = max(bar_w * n / total, 1.0)
            c = color[label]
            svg.rect(x, y, w, bar_h, c,
                     tip=f"{step} · {label}: {_count(n)} ({_pct(n / total)})")
            text = _pct(n / total)
            if text_width(text, fs) + 6 <= w:
                svg.text(x + w / 2, y + bar_h / 2 + 0.35 * fs, text, fs, "middle", fill=_on(c))
            x += w
        svg.text(W - 8, y + bar_h / 2 + 0.35 * fs, f"{_count(total)} rows", fs, "end", fill=MUTED)
        y += bar_h + 10
    return svg.render(y + 2, title or "label shares")


# ---------------------------------------------------------------------------------------------- histogram

def histogram(edges, counts, title: str = "", x_label: str = "", y_label: str = "rows", log_x: bool = False,
              marks: tuple = ()) -> str:
    """Bars of ``counts[i]`` rows over ``[edges[i], edges[i + 1])``: the y axis (rows) starts at zero; the x axis
    is linear, or logarithmic with ``log_x`` (edges > 0; ticks at 1, 2 and 5 × 10^k); a bar too short to see
    carries its count above it, so a tail of a few rows shows; ``marks``: (value, text) as dashed vertical lines."""
    edges, counts = np.asarray(edges, float), np.asarray(counts, float)
    if len(edges) != len(counts) + 1:
        raise ValueError(f"histogram: {len(counts)} counts need {len(counts) + 1} edges, got {len(edges)}")
    W = 720.0
    svg = _Svg(W)
    y = svg.title(title, 6)
    y = svg.legend([("dash", RED, text) for _, text in marks], y + 2)
    x0, top, plot_h = 64.0, y + 18, 220.0
    plot_w = W - x0 - 16
    if not len(counts) or not counts.sum():
        svg.text(W / 2, top + plot_h / 2, "no rows", 12, "middle", fill=MUTED)
        return svg.render(top + plot_h + 10, title or "histogram")
    fx = np.log10 if log_x else (lambda v: np.asarray(v, float))
    lo, hi = float(fx(edges[0])), float(fx(edges[-1]))
    if hi <= lo:
        hi = lo + 1.0

    def xpx(v):
        return x0 + (float(fx(v)) - lo) / (hi - lo) * plot_w

    _, b, ticks, step = _ticks(0.0, float(counts.max()), 5)
    scale = plot_h / b
    for t in ticks:
        yy = top + plot_h - t * scale
        svg.line(x0, yy, x0 + plot_w, yy, GRID)
        svg.text(x0 - 7, yy + 3.5, _tick_label(t, step), 10, "end", fill=MUTED)
    for left, right, n in zip(edges[:-1], edges[1:], counts):
        if not n:
            continue
        bx, bw = xpx(left), max(xpx(right) - xpx(left) - 1, 1.0)
        h = max(n * scale, 1.0)
        svg.rect(bx, top + plot_h - h, bw, h, BLUE, tip=f"{_num(left)} to {_num(right)}: {_count(n)} rows")
        if h < 14:
            svg.text(bx + bw / 2, top + plot_h - h - 3, _count(n), 9, "middle", fill=INK)
    for value, text in marks:
        if edges[0] <= value <= edges[-1]:
            svg.line(xpx(value), top - 6, xpx(value), top + plot_h, RED, 1.4, "5 3")
    svg.line(x0, top, x0, top + plot_h, FRAME)
    svg.line(x0, top + plot_h, x0 + plot_w, top + plot_h, FRAME)
    if log_x:
        marks_x = [m * 10.0 ** k for k in range(math.floor(lo) - 1, math.ceil(hi) + 1) for m in (1, 2, 5)]
        xticks = [v for v in marks_x if edges[0] <= v <= edges[-1]]
    else:
        xticks = [v for v in _ticks(edges[0], edges[-1], 6)[2] if edges[0] <= v <= edges[-1]]
    last = -math.inf
    for v in xticks:
        xx = xpx(v)
        label = _num(v)
        if xx - text_width(label, 10) / 2 < last + 6:
            continue
        svg.line(xx, top + plot_h, xx, top + plot_h + 4, FRAME)
        svg.text(xx, top + plot_h + 16, label, 10, "middle", fill=MUTED)
        last = xx + text_width(label, 10) / 2
    svg.text(x0 + plot_w / 2, top + plot_h + 34, _fit(x_label, plot_w, 11), 11, "middle", fill=MUTED)
    svg.text(16, top + plot_h / 2, _fit(y_label, plot_h, 11), 11, "middle", fill=MUTED,
             rotate=(-90, 16, top + plot_h / 2))
    return svg.render(top + plot_h + 44, title or "histogram")
