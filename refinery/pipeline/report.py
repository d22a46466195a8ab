"""Reports people read: the z-statistics plot of Gardner et al. (2021) and small HTML pages."""
from __future__ import annotations

import base64
import html
import io
import json

import numpy as np

from refinery.core.stats import ZStats, significance_curve


def zplot_png(stats: ZStats, k: int = 8, title: str = "", max_points: int = 12_000) -> bytes:
    """p̂(l|x) against n (log x) per label, the Bonferroni significance curve, the top features numbered and named."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    C = len(stats.labels)
    width = 4.6 * C
    fig, axes = plt.subplots(1, C, figsize=(width, 4.2), sharey=True, squeeze=False)
    # margins in inches: tight_layout would draw the sampled points once more to measure the labels
    fig.subplots_adjust(left=0.7 / width, right=1 - 0.15 / width, bottom=0.12, top=0.86 if title else 0.92,
                        wspace=0.06)
    rows, p_all, _ = stats.eligible(max(stats.min_count, 1))
    n_all = stats.n[rows]
    if len(n_all) > max_points:  # plot the largest-n features and a seeded sample of the rest
        rng = np.random.default_rng(0)
        order = np.argsort(-n_all)
        idx = np.concatenate([order[: max_points // 2], rng.choice(order[max_points // 2:], max_points // 2, False)])
        n_all, p_all = n_all[idx], p_all[idx]
    top = stats.top_k(k)
    n_grid = np.logspace(np.log10(max(stats.min_count, 1)), np.log10(max(stats.n.max(initial=10), 10)), 200)
    for j, (ax, label) in enumerate(zip(axes[0], stats.labels)):
        ax.scatter(n_all, p_all[:, j], s=4, alpha=0.35, color="#4c72b0", rasterized=True, linewidths=0)
        p0 = stats.p0[j]
        ax.plot(n_grid, np.minimum(significance_curve(n_grid, p0, stats.threshold), 1.0), color="#c44e52", lw=1.2,
                label=f"α=0.01 Bonferroni (z={stats.threshold:.2f})")
        ax.axhline(p0, color="grey", lw=0.8, ls="--")
        marked = top[label]
        named = marked[:5]   # numbered on the plot, named in a list where no points fall
        ax.scatter([e["n"] for e in marked], [e["p"] for e in marked], s=10, color="#dd8452")
        for rank, e in enumerate(named, 1):
            ax.annotate(str(rank), (e["n"], e["p"]), fontsize=7, xytext=(2, 3), textcoords="offset points")
        if named:
            ax.text(0.97, 0.70, "\n".join(f"{r}  {e['feature']}" for r, e in enumerate(named, 1)), fontsize=7,
                    ha="right", va="top", multialignment="left", transform=ax.transAxes, linespacing=1.5,
                    bbox={"boxstyle": "round", "fc": "white", "ec": "#dddddd", "alpha": 0.9})
        ax.set_xscale("log")
        ax.set_ylim(0, 1.02)
        ax.set_title(label)
        ax.set_xlabel("n (rows with the feature)")
        if j == 0:
            ax.set_ylabel("p̂(label | feature)")
            ax.legend(fontsize=7, loc="lower right")
    if title:
        fig.suptitle(title)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


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


def terminal_topk(topk: dict, k: int = 5) -> str:
    lines = []
    for label, entries in topk.items():
        lines.append(f"{label}")
        for e in entries[:k]:
            lines.append(f"  {e['z']:8.2f}  n={e['n']:<8,} p={e['p']:.3f}  {e['feature']}")
    return "\n".join(lines)
