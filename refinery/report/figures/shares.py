"""Label shares per corpus as stacked bars."""
from __future__ import annotations


from refinery.report.figures.canvas import FRAME, MAX_WIDTH, MUTED, PALETTE, Svg, ink_on
from refinery.report.figures.measure import fit, text_width
from refinery.report.format import count, percent


def shares(rows: dict[str, dict[str, int]], title: str = "") -> str:
    """The label distribution per step: one 100%-stacked horizontal bar per step, a colour per label shared by
    all bars, percentages (one decimal) inside the segments that fit them, the legend above, the total rows
    right of each bar."""
    W = float(MAX_WIDTH)
    svg = Svg(W)
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
    total_w = max(text_width(f"{count(t)} rows", fs) for t in totals.values())
    bar_x = 8 + name_w + 10
    bar_w = W - bar_x - total_w - 18
    bar_h, y = 22.0, y + 6
    for step, counts in rows.items():
        total = totals[step]
        svg.text(bar_x - 8, y + bar_h / 2 + 4, fit(str(step), name_w, 12), 12, "end")
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
                     tip=f"{step} · {label}: {count(n)} ({percent(n / total)})")
            text = percent(n / total)
            if text_width(text, fs) + 6 <= w:
                svg.text(x + w / 2, y + bar_h / 2 + 0.35 * fs, text, fs, "middle", fill=ink_on(c))
            x += w
        svg.text(W - 8, y + bar_h / 2 + 0.35 * fs, f"{count(total)} rows", fs, "end", fill=MUTED)
        y += bar_h + 10
    return svg.render(y + 2, title or "label shares")
