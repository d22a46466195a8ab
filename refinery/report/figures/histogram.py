"""A histogram with a zero-based count axis."""
from __future__ import annotations

import math

import numpy as np

from refinery.report.figures.canvas import BLUE, FRAME, GRID, INK, MUTED, RED, Svg, nice_ticks, tick_label
from refinery.report.figures.measure import fit, text_width
from refinery.report.format import MINUS, count, number


def histogram(edges, counts, title: str = "", x_label: str = "", y_label: str = "rows", log_x: bool = False,
              marks: tuple = ()) -> str:
    """Bars of ``counts[i]`` rows over ``[edges[i], edges[i + 1])``: the y axis (rows) starts at zero; the x axis
    is linear, or logarithmic with ``log_x`` (edges > 0; ticks at 1, 2 and 5 × 10^k); a bar too short to see
    carries its count above it, so a tail of a few rows shows; ``marks``: (value, text) as dashed vertical lines,
    each of its own colour, the x axis widened to take in each."""
    edges, counts = np.asarray(edges, float), np.asarray(counts, float)
    if len(edges) != len(counts) + 1:
        raise RuntimeError(f"histogram: {len(counts)} counts need {len(counts) + 1} edges, got {len(edges)}")
    W = 720.0
    svg = Svg(W)
    y = svg.title(title, 6)
    colours = (INK, RED, MUTED)
    y = svg.legend([("dash", colours[i % 3], text) for i, (_, text) in enumerate(marks)], y + 2)
    x0, top, plot_h = 64.0, y + 18, 220.0
    plot_w = W - x0 - 16
    if not len(counts) or not counts.sum():
        svg.text(W / 2, top + plot_h / 2, "no rows", 12, "middle", fill=MUTED)
        return svg.render(top + plot_h + 10, title or "histogram")
    fx = np.log10 if log_x else (lambda v: np.asarray(v, float))
    first, last_edge = min([edges[0], *(v for v, _ in marks)]), max([edges[-1], *(v for v, _ in marks)])
    lo, hi = float(fx(first)), float(fx(last_edge))
    if hi <= lo:
        hi = lo + 1.0

    def xpx(v):
        return x0 + (float(fx(v)) - lo) / (hi - lo) * plot_w

    _, b, ticks, step = nice_ticks(0.0, float(counts.max()), 5)
    scale = plot_h / b
    for t in ticks:
        yy = top + plot_h - t * scale
        svg.line(x0, yy, x0 + plot_w, yy, GRID)
        svg.text(x0 - 7, yy + 3.5, tick_label(t, step), 10, "end", fill=MUTED)
    for left, right, n in zip(edges[:-1], edges[1:], counts):
        if not n:
            continue
        bx, bw = xpx(left), max(xpx(right) - xpx(left) - 1, 1.0)
        h = max(n * scale, 1.0)
        svg.rect(bx, top + plot_h - h, bw, h, BLUE, tip=f"{number(left, minus=MINUS)} to {number(right, minus=MINUS)}: {count(n)} rows")
        if h < 14:
            svg.text(bx + bw / 2, top + plot_h - h - 3, count(n), 9, "middle", fill=INK)
    for i, (value, _) in enumerate(marks):
        svg.line(xpx(value), top - 6, xpx(value), top + plot_h, colours[i % 3], 1.4, "5 3")
    svg.line(x0, top, x0, top + plot_h, FRAME)
    svg.line(x0, top + plot_h, x0 + plot_w, top + plot_h, FRAME)
    if log_x:
        marks_x = [m * 10.0 ** k for k in range(math.floor(lo) - 1, math.ceil(hi) + 1) for m in (1, 2, 5)]
        xticks = [v for v in marks_x if first <= v <= last_edge]
    else:
        xticks = [v for v in nice_ticks(first, last_edge, 6)[2] if first <= v <= last_edge]
    last = -math.inf
    for v in xticks:
        xx = xpx(v)
        label = number(v, minus=MINUS)
        if xx - text_width(label, 10) / 2 < max(last + 6, x0 - 6):   # clear of the last and of the count axis' 0
            continue
        svg.line(xx, top + plot_h, xx, top + plot_h + 4, FRAME)
        svg.text(xx, top + plot_h + 16, label, 10, "middle", fill=MUTED)
        last = xx + text_width(label, 10) / 2
    svg.text(x0 + plot_w / 2, top + plot_h + 34, fit(x_label, plot_w, 11), 11, "middle", fill=MUTED)
    svg.text(16, top + plot_h / 2, fit(y_label, plot_h, 11), 11, "middle", fill=MUTED,
             rotate=(-90, 16, top + plot_h / 2))
    return svg.render(top + plot_h + 44, title or "histogram")
