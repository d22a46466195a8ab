"""Grouped bars with confidence whiskers (accuracies of corpora on evaluation sets)."""
from __future__ import annotations

import math

import numpy as np

from refinery.report.figures.canvas import (FRAME, GRID, INK, MAX_WIDTH, MUTED, PALETTE, Svg, lighter, nice_ticks,
                                            tick_label)
from refinery.report.figures.measure import ASCENT, DESCENT, fit, text_width, wrap
from refinery.report import format as fmt


def bars(groups: list[str], series: list[str], values: list[list[float]], low: list[list[float]] | None = None,
         high: list[list[float]] | None = None, reference: list[float] | None = None, *,
         reference_label: str = "majority class", title: str = "", y_label: str = "accuracy",
         percent: bool = True, paired: bool = False) -> str:
    """Grouped vertical bars: ``values[s][g]`` = series s (e.g. a training corpus, one colour) on group g (e.g. an
    evaluation set; a G×S nesting is read too when G ≠ S), whiskers from ``low``/``high``, a dashed reference
    line per group, value labels above the bars where they fit. The y axis starts at 0 (a bar's length is its
    value: a 2-point difference looks like 2 points), below 0 only for negative values. ``paired``: series come
    in pairs (a corpus on two slices), a pair in one hue, its second bar lighter."""
    G, S = len(groups), len(series)
    colors = [lighter(PALETTE[(s // 2) % len(PALETTE)]) if paired and s % 2 else
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
        raise RuntimeError(f"bars: expected {S} series × {G} groups, got shape {a.shape}")

    vals, lows, highs = grid(values), grid(low), grid(high)
    ref = np.array([np.nan if v is None else v for v in reference], dtype=float) if reference is not None else None
    if ref is not None and len(ref) != G:
        raise RuntimeError(f"bars: reference needs one value per group ({G}), got {len(ref)}")
    W = float(min(MAX_WIDTH, max(520, 100 + G * (S * 60 + 50))))
    svg = Svg(W)
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
    shown = fmt.percent if percent else (lambda v: fmt.number(v, minus=fmt.MINUS))
    labels = [[shown(v) if math.isfinite(v) else "" for v in row] for row in vals]
    size = next((s for s in (10, 9) if max((text_width(t, s) for row in labels for t in row), default=0) + 3 <= pitch),
                None)
    _, _, _, step = nice_ticks(lo, hi, 6)       # the axis starts at 0 (or a half tick below negative data)
    a = math.floor(lo / (step / 2) + 1e-9) * (step / 2)
    tops = np.fmax(highs, vals) if highs is not None else vals
    tallest = float(np.nanmax(tops)) if np.isfinite(tops).any() else hi
    need = (6 + (ASCENT + DESCENT) * size if size else 4) / plot_h      # the room above it, a share of the axis
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
        svg.text(x0 - 7, yy + 3.5, tick_label(t, step, percent), 10, "end", fill=MUTED)
    svg.line(x0, top, x0, top + plot_h, FRAME)
    svg.line(x0, top + plot_h, x0 + plot_w, top + plot_h, FRAME)
    svg.text(16, top + plot_h / 2, fit(y_label, plot_h, 11), 11, "middle", fill=MUTED,
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
                     tip=f"{series[s]} · {name}: {shown(v)}")
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
                svg.text(bx + bw / 2, peak - 4 - DESCENT * size, labels[s][g], size, "middle")
        if ref is not None and math.isfinite(ref[g]):
            yy = ypx(ref[g])
            svg.line(x0 + g * gw + 4, yy, x0 + (g + 1) * gw - 4, yy, INK, 1.4, "6 3")
        for i, line in enumerate(wrap(name, gw - 8, 11, 2)):
            svg.text(x0 + g * gw + gw / 2, label_y + 14 * i, line, 11, "middle")
    return svg.render(label_y + 22, title or "bars")
