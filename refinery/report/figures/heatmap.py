"""A matrix as a heatmap on a sequential scale with a colour bar."""
from __future__ import annotations

import math

import numpy as np

from refinery.report.figures.canvas import (BLUES, EMPTY, FRAME, MAX_WIDTH, MUTED, Svg, ink_on, label_every,
                                            nice_ticks, tick_label)
from refinery.report.figures.measure import ASCENT, DESCENT, fit, text_width
from refinery.report.format import MINUS, number


def _blues(t: float) -> str:
    t = min(max(t, 0.0), 1.0) * (len(BLUES) - 1)
    i = min(int(t), len(BLUES) - 2)
    f = t - i
    a, b = BLUES[i], BLUES[i + 1]
    rgb = [round(int(a[k:k + 2], 16) * (1 - f) + int(b[k:k + 2], 16) * f) for k in (1, 3, 5)]
    return "#" + "".join(f"{v:02x}" for v in rgb)


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
    svg = Svg(min(W, MAX_WIDTH))
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
                     tip=f"{row_labels[i]} · {col_labels[j]}: {number(v, minus=MINUS)}")
    svg.rect(x0, top, cols * cell, rows * cell, "none", FRAME)
    if cell >= 28:          # values in the cells, at the largest size where every value fits
        texts = [[number(v, minus=MINUS) if math.isfinite(v) else "" for v in row] for row in m]
        size = next((s for s in (11, 10, 9) if (ASCENT + DESCENT) * s + 4 <= cell and
                     max(text_width(t, s) for row in texts for t in row) + 4 <= cell), None)
        if size:
            for i in range(rows):
                for j in range(cols):
                    if texts[i][j]:
                        v = m[i, j]
                        svg.text(x0 + (j + 0.5) * cell, top + (i + 0.5) * cell + 0.35 * size, texts[i][j], size,
                                 "middle", fill=ink_on(_blues((v - vmin) / (vmax - vmin))))
    # row labels, thinned
    every = label_every(cell, (ASCENT + DESCENT) * fs + 2)
    for i in range(0, rows, every):
        svg.text(x0 - 6, top + (i + 0.5) * cell + 0.35 * fs, fit(row_labels[i], label_w, fs), fs, "end")
    # column labels: horizontal where they fit with less thinning, else vertical
    widest = max((text_width(t, fs) for t in col_labels), default=0)
    long_w = min(widest, 90.0)
    h_every, v_every = label_every(cell, widest + 6), label_every(cell, (ASCENT + DESCENT) * fs + 2)
    base = top + rows * cell
    if h_every <= v_every:
        for j in range(0, cols, h_every):
            svg.text(x0 + (j + 0.5) * cell, base + 15, col_labels[j], fs, "middle")
        below = base + 22
    else:
        for j in range(0, cols, v_every):
            cx, cy = x0 + (j + 0.5) * cell + 0.35 * fs, base + 6
            svg.text(cx, cy, fit(col_labels[j], long_w, fs), fs, "end", rotate=(-90, cx, cy))
        below = base + 12 + long_w
    if x_label:
        label = fit(x_label, max(cols * cell, 200), 11)
        half = text_width(label, 11) / 2 + 2   # centred under the cells, moved in where it would leave the figure
        svg.text(min(max(x0 + cols * cell / 2, half), svg.width - half), below + 14, label, 11, "middle", fill=MUTED)
        below += 20
    if y_label:
        svg.text(14, top + rows * cell / 2, fit(y_label, max(rows * cell, 120), 11), 11, "middle", fill=MUTED,
                 rotate=(-90, 14, top + rows * cell / 2))
    # colour bar
    bx, bh = x0 + cols * cell + 18, max(min(rows * cell, 220.0), 110.0)
    if value_label:
        svg.text(bx, top - 8, fit(value_label, svg.width - bx - 4, 10), 10, fill=MUTED)
    steps = 40
    for s in range(steps):
        svg.rect(bx, top + bh * s / steps, 12, bh / steps + 0.4, _blues(1 - s / (steps - 1)))
    svg.rect(bx, top, 12, bh, "none", FRAME)
    target = max(2, min(6, int(bh // 26)))
    _, _, ticks, step = nice_ticks(vmin, vmax, target)
    for t in ticks:
        if vmin - 1e-12 <= t <= vmax + 1e-12:
            yy = top + bh * (vmax - t) / (vmax - vmin)
            svg.line(bx + 12, yy, bx + 15, yy, FRAME)
            svg.text(bx + 18, yy + 3.5, fit(tick_label(t, step), svg.width - bx - 22, 10), 10, fill=MUTED)
    bottom = max(below, top + bh + 8)
    if not np.isfinite(m).all():
        svg.rect(bx, top + bh + 12, 12, 10, EMPTY)
        svg.text(bx + 16, top + bh + 21, fit("no value", svg.width - bx - 20, 10), 10, fill=MUTED)
        bottom = max(bottom, top + bh + 30)
    return svg.render(bottom + 6, title or "heatmap")
