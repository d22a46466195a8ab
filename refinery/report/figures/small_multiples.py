"""Small multiples: one panel per series across steps, against a threshold."""
from __future__ import annotations

import math

import numpy as np

from refinery.report.figures.canvas import (BLUE, FRAME, GRID, MAX_WIDTH, MUTED, RED, Svg, escape, label_every,
                                            nice_ticks, tick_label)
from refinery.report.figures.measure import ASCENT, DESCENT, fit, fit_middle, text_width
from refinery.report.format import MINUS, number


def small_multiples(series: dict[str, list[float | None]], steps: list[str], threshold: list[float] | float,
                    title: str = "", y_label: str = "z*") -> str:
    """One small panel per series (up to 4 per row, a shared y scale): its values across ``steps`` as a line
    with dots, the threshold as a red dashed line (a step line when given per step), a None as a gap with a
    hollow marker at 0 (absent, or n below min_count); step names under the bottom panel of each column."""
    names = list(series)
    S, T = len(names), len(steps)
    cols = max(1, math.ceil(S / math.ceil(S / 4))) if S else 1     # 5 → 3+2, 7 → 4+3
    W = {1: 440.0, 2: 700.0}.get(cols, float(MAX_WIDTH))
    svg = Svg(W)
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
    a, b, ticks, step = nice_ticks(lo, hi * 1.04 if hi > 0 else hi, 4)
    fs = 10
    tick_w = max(text_width(tick_label(t, step), fs) for t in ticks)
    left, gap, right = 20 + tick_w + 8, 16.0, 8.0
    plot_w = (W - left - right - (cols - 1) * gap) / cols
    plot_h = 110.0
    pitch = plot_w / max(T, 1)
    widest = max((text_width(s, fs) for s in steps), default=0)
    horizontal = widest + 6 <= pitch
    every = 1 if horizontal else label_every(pitch, (ASCENT + DESCENT) * fs + 2)
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
            _small_panel(svg, names[i], vals[i], thr, (x0, top, plot_w, plot_h), (a, b, ticks, step), fs=fs,
                         first=(c == 0))
            if i in labelled:
                for t in range(0, T, every):
                    cx = x0 + (t + 0.5) * pitch
                    svg.line(cx, top + plot_h, cx, top + plot_h + 3, FRAME)
                    if horizontal:
                        svg.text(cx, top + plot_h + 15, steps[t], fs, "middle", fill=MUTED)
                    else:
                        tx, ty = cx + 0.35 * fs, top + plot_h + 6
                        svg.text(tx, ty, fit(steps[t], long_w, fs), fs, "end", fill=MUTED, rotate=(-90, tx, ty))
        svg.text(12, top + plot_h / 2, fit(y_label, plot_h, 11), 11, "middle", fill=MUTED,
                 rotate=(-90, 12, top + plot_h / 2))
        cur = top + plot_h + (label_h if labelled else 6) + 12
    return svg.render(cur, title or "small multiples")


def _small_panel(svg, name, v, thr, frame: tuple, axis: tuple, *, fs: float, first: bool):
    """One series' panel: ``frame`` = (left, top, width, height) of its plot, ``axis`` = (low, high, ticks, step)
    of the y scale the panels share."""
    (x0, top, plot_w, plot_h), (a, b, ticks, step) = frame, axis
    T = len(v)
    pitch = plot_w / max(T, 1)

    def ypx(val):
        return top + (b - val) / (b - a) * plot_h

    svg.text(x0 + plot_w / 2, top - 6, fit_middle(name, plot_w, 11.5), 11.5, "middle")
    for t in ticks:
        yy = ypx(t)
        svg.line(x0, yy, x0 + plot_w, yy, GRID)
        if first:
            svg.line(x0 - 3, yy, x0, yy, FRAME)
            svg.text(x0 - 5, yy + 3.5, tick_label(t, step), fs, "end", fill=MUTED)
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
            svg.add(f'<circle cx="{xs[t]:.1f}" cy="{ypx(v[t]):.1f}" r="3" fill="{BLUE}"><title>{escape(name)}: '
                    f'{escape(number(v[t], minus=MINUS))}</title></circle>')
        else:
            svg.add(f'<circle cx="{xs[t]:.1f}" cy="{ypx(0.0):.1f}" r="3.2" fill="#ffffff" stroke="{BLUE}" '
                    'stroke-width="1.3"/>')
