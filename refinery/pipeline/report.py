"""Reports people read: the z-statistics plot of Gardner et al. (2021) and small HTML pages."""
from __future__ import annotations

import base64
import html
import json
import math

import numpy as np

from refinery.core.stats import ZStats, significance_curve


_PANEL_W, _PANEL_H = 440, 380                   # one label's panel, in px
_LEFT, _RIGHT, _TOP, _BOTTOM = 58, 14, 30, 46    # its margins around the axes
_FONT = 'font-family="system-ui,sans-serif"'


def _count_label(value: float) -> str:
    """10 → "10", 1000 → "1k", 10⁶ → "1M": tick labels of the log n axis."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def zplot_svg(stats: ZStats, k: int = 8, title: str = "", max_points: int = 6_000) -> str:
    """p̂(l|x) against n (log x) per label, the Bonferroni significance curve, the top features numbered
    and named (Gardner et al. 2021, Fig. 1), as an SVG drawn directly: vector, a few hundred kB at most
    (the largest-n features and a seeded sample of the rest), and milliseconds to draw."""
    C = len(stats.labels)
    head = 28 if title else 0
    width, height = C * _PANEL_W, _PANEL_H + head
    rows, p_all, _ = stats.eligible(max(stats.min_count, 1))
    n_all = stats.n[rows]
    if len(n_all) > max_points:
        order = np.argsort(-n_all, kind="stable")
        sample = np.random.default_rng(0).choice(order[max_points // 2:], max_points - max_points // 2, False)
        idx = np.concatenate([order[: max_points // 2], sample])
        n_all, p_all = n_all[idx], p_all[idx]
    lo = math.log10(max(stats.min_count, 1))
    hi = max(math.log10(max(float(stats.n.max(initial=10)), 10.0)), lo + 1)
    hi += 0.04 * (hi - lo)
    plot_w, plot_h = _PANEL_W - _LEFT - _RIGHT, _PANEL_H - _TOP - _BOTTOM
    top = stats.top_k(k)
    n_grid = np.logspace(lo, hi, 120)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" {_FONT} font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>']
    if title:
        out.append(f'<text x="{width / 2:.0f}" y="20" text-anchor="middle" font-size="15">{html.escape(title)}</text>')
    for j, label in enumerate(stats.labels):
        x0, y0 = j * _PANEL_W + _LEFT, head + _TOP

        def px(n, p):
            return x0 + (np.log10(np.maximum(n, 1e-9)) - lo) / (hi - lo) * plot_w, y0 + (1.02 - np.asarray(p)) / 1.02 * plot_h

        out.append(f'<g><text x="{x0 + plot_w / 2:.0f}" y="{y0 - 8}" text-anchor="middle" font-size="13">'
                   f'{html.escape(str(label))}</text>')
        out.append(f'<rect x="{x0}" y="{y0}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#444"/>')
        for tick in range(math.ceil(lo), math.floor(hi) + 1):   # x: powers of ten
            x = px(10.0 ** tick, 0)[0]
            out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y0 + plot_h}" y2="{y0 + plot_h + 4}" stroke="#444"/>'
                       f'<text x="{x:.1f}" y="{y0 + plot_h + 17}" text-anchor="middle">{_count_label(10.0 ** tick)}</text>')
        for tick in np.linspace(0, 1, 6):
            y = px(1, tick)[1]
            out.append(f'<line x1="{x0 - 4}" x2="{x0}" y1="{y:.1f}" y2="{y:.1f}" stroke="#444"/>'
                       + (f'<text x="{x0 - 7}" y="{y + 4:.1f}" text-anchor="end">{tick:.1f}</text>' if j == 0 else ""))
        out.append(f'<text x="{x0 + plot_w / 2:.0f}" y="{y0 + plot_h + 36}" text-anchor="middle">'
                   'n (rows with the feature)</text>')
        if j == 0:
            out.append(f'<text transform="translate({x0 - 40},{y0 + plot_h / 2:.0f}) rotate(-90)" '
                       'text-anchor="middle">p̂(label | feature)</text>')
        xs, ys = px(n_all, p_all[:, j])
        dots = "".join(f"M{x:.1f} {y:.1f}h0" for x, y in zip(xs, ys))
        out.append(f'<path d="{dots}" stroke="#4c72b0" stroke-opacity="0.35" stroke-width="3.2" '
                   'stroke-linecap="round" fill="none"/>')
        p0 = float(stats.p0[j])
        yp0 = px(1, p0)[1]
        out.append(f'<line x1="{x0}" x2="{x0 + plot_w}" y1="{yp0:.1f}" y2="{yp0:.1f}" stroke="grey" '
                   'stroke-dasharray="5 3"/>')
        if math.isfinite(stats.threshold):
            cx, cy = px(n_grid, np.minimum(significance_curve(n_grid, p0, stats.threshold), 1.02))
            points = " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(cx, cy))
            out.append(f'<polyline points="{points}" fill="none" stroke="#c44e52" stroke-width="1.4"/>')
        marked = top[label]
        for rank, e in enumerate(marked, 1):
            x, y = px(e["n"], e["p"])
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.6" fill="#dd8452"/>')
            if rank <= 5:
                out.append(f'<text x="{x + 3:.1f}" y="{y - 4:.1f}" font-size="10">{rank}</text>')
        named = [f"{rank}  {e['feature']}" for rank, e in enumerate(marked[:5], 1)]
        if named:   # the names in a box where few points fall: below the top, right-aligned
            box_w = min(plot_w - 8, 12 + 6.1 * max(len(t) for t in named))
            bx, by = x0 + plot_w - 6 - box_w, y0 + 0.30 * plot_h
            out.append(f'<rect x="{bx:.1f}" y="{by:.1f}" width="{box_w:.1f}" height="{8 + 15 * len(named)}" rx="4" '
                       'fill="white" fill-opacity="0.9" stroke="#ddd"/>')
            out += [f'<text x="{bx + 6:.1f}" y="{by + 18 + 15 * i:.1f}" font-size="11">{html.escape(t)}</text>'
                    for i, t in enumerate(named)]
        if j == 0 and math.isfinite(stats.threshold):
            lx, ly = x0 + plot_w - 200, y0 + plot_h - 14
            out.append(f'<line x1="{lx}" x2="{lx + 22}" y1="{ly - 4}" y2="{ly - 4}" stroke="#c44e52" stroke-width="1.4"/>'
                       f'<text x="{lx + 28}" y="{ly}" font-size="11">α={stats.alpha:g} Bonferroni '
                       f'(z={stats.threshold:.2f})</text>')
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def img_tag(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}"/>'


def topk_table(topk: dict) -> str:
    rows = []
    for label, entries in topk.items():
        for rank, e in enumerate(entries, 1):
            rows.append(f"<tr><td>{html.escape(label)}</td><td>{rank}</td><td>{html.escape(e['feature'])}</td>"
                        f"<td>{e['z']:.2f}</td><td>{e['n']:,}</td><td>{e['p']:.3f}</td></tr>")
    return ("<table><tr><th>label</th><th>#</th><th>feature</th><th>z*</th><th>n</th><th>p̂</th></tr>"
            + "".join(rows) + "</table>")


def dict_table(d: dict) -> str:
    return "<table>" + "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(json.dumps(v, default=str) if isinstance(v, (dict, list)) else str(v))}</td></tr>"
        for k, v in d.items()) + "</table>"


def page(title: str, sections: list[tuple[str, str]]) -> str:
    body = "".join(f"<h2>{html.escape(h)}</h2>{content}" for h, content in sections)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1500px}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:left}}th{{background:#f3f3f3}}img{{max-width:100%}}</style>
</head><body><h1>{html.escape(title)}</h1>{body}</body></html>"""


def label_prior_table(label_prior: dict) -> str:
    """The label shares the ``null`` feature measures, the prior p0 and z*(null, l), as an HTML table."""
    rows = "".join(f"<tr><td>{html.escape(str(label))}</td><td>{v['share']:.1%}</td><td>{v['p0']:.3f}</td>"
                   f"<td>{v['z']:.2f}</td></tr>" for label, v in label_prior.items())
    return f"<table><tr><th>label</th><th>share of rows</th><th>prior p0</th><th>z*</th></tr>{rows}</table>"


def terminal_label_prior(label_prior: dict) -> str:
    """The label shares the ``null`` feature measures, one line; z*(null, l) where p0 is not the share."""
    def cell(label, v):
        z = f" (z* {v['z']:.1f})" if abs(v["share"] - v["p0"]) > 1e-9 else ""
        return f"{label} {v['share']:.3f}{z}"
    return "label prior (the null feature, not ranked): " + ", ".join(cell(l, v) for l, v in label_prior.items())


def terminal_topk(topk: dict, k: int = 5) -> str:
    lines = []
    for label, entries in topk.items():
        lines.append(f"{label}")
        for e in entries[:k]:
            lines.append(f"  {e['z']:8.2f}  n={e['n']:<8,} p={e['p']:.3f}  {e['feature']}")
    return "\n".join(lines)
