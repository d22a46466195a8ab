"""The z-plot (Gardner et al. 2021, Fig. 1): p̂(label | feature) against n, one panel per label."""
from __future__ import annotations

import math
from dataclasses import astuple, dataclass

import numpy as np

from refinery.core.stats import ZStats, significance_curve
from refinery.report.figures.canvas import BLUE, FRAME, GRID, MAX_WIDTH, MUTED, ORANGE, RED, Svg, escape, panel_columns
from refinery.report.figures.measure import ASCENT, DESCENT, fit, fit_middle, text_width
from refinery.report.format import MINUS, count_label, number


def zplot(stats: ZStats, k: int = 8, title: str = "", max_points: int = 6000) -> str:
    """Gardner et al. (2021), Fig. 1, one panel per label: p̂(l|x) against n (log scale) of the features in at
    least min_count rows (translucent dots: the largest-n half of ``max_points`` and a seeded sample of the
    rest), the prior p0 (dashed), the Bonferroni significance curve p0 + z·sqrt(p0(1−p0)/n) (red), the top-k
    features (orange), the top 5 numbered in the plot and named in a list under it."""
    C = len(stats.labels)
    cols = panel_columns(max(C, 1))
    W = MAX_WIDTH if cols >= 2 else 560
    svg = Svg(W)
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
        _zpanel(svg, stats, j, _Panel(panel_x, y + r * panel_h, pw, left, plot_w, plot_h, lo, hi),
                n_all, p_all[:, j] if len(p_all) else p_all, top.get(label, []), first=(c == 0), finite=finite)
    return svg.render(y + n_rows * panel_h, f"{title}: z-statistics" if title else "z-statistics")


@dataclass(frozen=True)
class _Panel:
    """Where one label's panel is drawn: its left edge and top, its width, the plot's left margin, width and
    height, and the log10(n) range the panels share."""

    x: float
    top: float
    width: float
    left: float
    plot_w: float
    plot_h: float
    lo: float
    hi: float


def _zpanel(svg, stats, j, panel: _Panel, n_all, p_col, marked, *, first: bool, finite: bool):
    """Label ``j``'s panel: its features' dots, p0, the significance curve, the top features numbered and named."""
    label = stats.labels[j]
    panel_x, top_y, pw, left, plot_w, plot_h, lo, hi = astuple(panel)
    x0, y0 = panel_x + left, top_y + 22
    p_lo, p_hi = -0.03, 1.03

    def px(n):
        return x0 + (np.log10(np.maximum(np.asarray(n, dtype=float), 1e-9)) - lo) / (hi - lo) * plot_w

    def py(p):
        return y0 + (p_hi - np.asarray(p, dtype=float)) / (p_hi - p_lo) * plot_h

    svg.text(x0 + plot_w / 2, top_y + 14, fit(label, pw - 16, 13, True), 13, "middle", bold=True)
    # grid, frame and ticks
    for tick in np.linspace(0, 1, 6):
        yy = float(py(tick))
        svg.line(x0, yy, x0 + plot_w, yy, GRID)
        svg.line(x0 - 4, yy, x0, yy, FRAME)
        svg.text(x0 - 6, yy + 3.5, f"{tick:.1f}", 10, "end", fill=MUTED)
    decades = list(range(math.ceil(lo), math.floor(hi) + 1))
    per_decade = plot_w / (hi - lo)
    widest = max((text_width(count_label(10.0 ** d), 10) for d in decades), default=0)
    every = max(1, math.ceil((widest + 8) / per_decade))
    for d in decades:
        xx = float(px(10.0 ** d))
        svg.line(xx, y0, xx, y0 + plot_h, GRID)
        if (d - decades[0]) % every == 0:
            svg.line(xx, y0 + plot_h, xx, y0 + plot_h + 4, FRAME)
            svg.text(xx, y0 + plot_h + 17, count_label(10.0 ** d), 10, "middle", fill=MUTED)
    svg.rect(x0, y0, plot_w, plot_h, "none", FRAME)
    svg.text(x0 + plot_w / 2, y0 + plot_h + 33, fit("n = rows with the feature (log scale)", plot_w, 11), 11,
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
        note = fit(f"no feature in ≥ {stats.min_count:,} rows", plot_w - 10, 11)
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
        z = f"z* {number(e['z'], zeros=True, minus=MINUS)}"
        zw = text_width(z, 11)
        name = fit_middle(e["feature"], pw - 16 - zw - 14 - 16, 11)
        svg.text(panel_x + 8, yy, f"{rank} {name}", 11,
                 body=f'<tspan fill="#8a5a00">{rank}</tspan> {escape(name)}')
        svg.text(panel_x + pw - 8, yy, z, 11, "end", fill=MUTED)
        yy += 15
    if not marked:
        svg.text(panel_x + 8, yy, fit("no top feature", pw - 16, 11), 11, fill=MUTED)


def _place_number(svg: Svg, text: str, sx: float, sy: float, bounds, dots) -> bool:
    """Greedy placement of a rank number next to its dot: the first candidate offset (8 directions, growing
    distances, a leader line beyond the nearest) that stays in the plot and clears texts and top-k dots."""
    size = 10
    w, h = text_width(text, size), (ASCENT + DESCENT) * size
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
            baseline = cy + h / 2 - DESCENT * size
            svg.text(cx, baseline, text, size, "middle", halo=True)
            return True
    return False
