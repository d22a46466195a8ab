"""The data map (Swayamdipta et al. 2020, Fig. 1): each row's confidence μ against its variability σ, coloured by
its correctness, on a seeded sample for a large corpus; the selection's boundary dashed."""
from __future__ import annotations

import numpy as np

from refinery.report.figures.canvas import BLUES, FRAME, GRID, MUTED, RED, Svg
from refinery.report.figures.measure import fit


def datamap(confidence, variability, correctness, title: str = "", boundary: tuple | None = None,
            max_points: int = 5000, seed: int = 0) -> str:
    """The map of ``confidence`` (y, 0–1) against ``variability`` (x, 0–0.5: a probability's std is at most ½),
    both axes from zero, each row a translucent dot coloured by ``correctness`` (its share of epochs right, in
    bins of a fifth); over ``max_points`` rows a seeded sample of them, said in the legend. ``boundary``:
    ("x" | "y", value, text), the selection's edge as a dashed line."""
    confidence, variability = np.asarray(confidence, float), np.asarray(variability, float)
    correctness = np.asarray(correctness, float)
    rows = len(confidence)
    shown = np.arange(rows)
    if rows > max_points:
        shown = np.sort(np.random.default_rng(seed).choice(rows, max_points, replace=False))
    W = 560.0
    svg = Svg(W)
    y = svg.title(title, 6)
    bins = np.minimum((correctness[shown] * 5).astype(int), 4)   # [0, .2), …, [.8, 1]
    colours = [BLUES[i] for i in (2, 4, 5, 7, 8)]
    items = [("dot", colours[b], f"correct {b * 20}–{b * 20 + 20}%" if b < 4 else "correct 80–100%")
             for b in range(5)]
    if boundary is not None:
        items.append(("dash", RED, boundary[2]))
    y = svg.legend(items, y + 2)
    x0, top, plot_w, plot_h = 56.0, y + 8, W - 56 - 16, 300.0

    def px(v):
        return x0 + np.asarray(v, float) / 0.5 * plot_w

    def py(v):
        return top + (1 - np.asarray(v, float)) * plot_h

    for tick in np.linspace(0, 1, 6):
        yy = float(py(tick))
        svg.line(x0, yy, x0 + plot_w, yy, GRID)
        svg.text(x0 - 6, yy + 3.5, f"{tick:.1f}", 10, "end", fill=MUTED)
    for tick in np.linspace(0, 0.5, 6):
        xx = float(px(tick))
        svg.line(xx, top, xx, top + plot_h, GRID)
        svg.text(xx, top + plot_h + 15, f"{tick:.1f}", 10, "middle", fill=MUTED)
    svg.rect(x0, top, plot_w, plot_h, "none", FRAME)
    for b in range(5):
        mine = shown[bins == b]
        if len(mine):
            pts = np.unique(np.stack([np.round(px(variability[mine]) * 2) / 2,
                                      np.round(py(confidence[mine]) * 2) / 2], axis=1), axis=0)
            dots = "".join(f"M{a:g} {c:g}h0" for a, c in pts)
            svg.add(f'<path d="{dots}" stroke="{colours[b]}" stroke-opacity="0.55" stroke-width="3.2" '
                    'stroke-linecap="round" fill="none"/>')
    if boundary is not None:
        axis, value = boundary[0], float(boundary[1])
        if axis == "x":
            svg.line(float(px(value)), top, float(px(value)), top + plot_h, RED, 1.4, "5 3")
        else:
            svg.line(x0, float(py(value)), x0 + plot_w, float(py(value)), RED, 1.4, "5 3")
    for text, at in (("easy-to-learn", (0.06, 0.93)), ("ambiguous", (0.42, 0.5)), ("hard-to-learn", (0.06, 0.07))):
        svg.text(float(px(at[0])), float(py(at[1])), text, 11, "start", fill=MUTED, halo=True)
    svg.text(x0 + plot_w / 2, top + plot_h + 32, "variability σ: std of p(gold) across epochs", 11, "middle",
             fill=MUTED)
    svg.text(16, top + plot_h / 2, "confidence μ: mean p(gold)", 11, "middle", fill=MUTED,
             rotate=(-90, 16, top + plot_h / 2))
    sample = f"{len(shown):,} of {rows:,} rows (a seeded sample)" if rows > max_points else f"{rows:,} rows"
    svg.text(W / 2, top + plot_h + 50, fit(sample, W - 20, 11), 11, "middle", fill=MUTED)
    return svg.render(top + plot_h + 60, title or "data map")
