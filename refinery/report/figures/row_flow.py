"""Where the rows went: a stacked bar per pipeline step."""
from __future__ import annotations


from refinery.report.figures.canvas import ADDED, GREY, MAX_WIDTH, MUTED, PASS, SKY, Svg, WARM, ink_on
from refinery.report.figures.measure import fit, text_width
from refinery.report.format import count


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
    svg = Svg(W)
    if not steps:
        svg.text(W / 2, 30, "no steps", 12, "middle", fill=MUTED)
        return svg.render(50, "row flow")
    fs, bar_h = 11, 26.0
    names = [str(st.get("name", "")) for st in steps]
    ins = [max(0, int(st.get("rows_in") or 0)) for st in steps]
    segs = [[seg for seg in _segments(st) if seg[1] > 0] for st in steps]
    name_w = min(190.0, max(max(text_width(n, 12), text_width(f"{count(r)} rows in", 10)) for n, r in zip(names, ins)))
    bar_x = 8 + name_w + 12
    total = max([max(r, sum(seg[1] for seg in ss)) for r, ss in zip(ins, segs)] + [1])

    def place(scale):
        """Per step: (bar end, [(x, w, segment, text inside or None)], [segments listed outside])."""
        plan = []
        for ss in segs:
            x, inside, outside = bar_x, [], []
            for seg in ss:
                w = max(seg[1] * scale, 2.0)
                full = f"{count(seg[1])} {seg[0]}"
                fits = text_width(full, fs) + 8 <= w
                inside.append((x, w, seg, full if fits else None))
                if not fits:
                    outside.append(seg)
                x += w
            plan.append((x, inside, outside))
        return plan

    def ext_width(outside):
        return max((14 + text_width(f"{count(n)} {name}", fs) for name, n, _, _ in outside), default=-8) + 8

    scale = (W - bar_x - 12) / total
    for _ in range(8):      # shrink the bars until every bar's outside labels fit right of it
        plan = place(scale)
        widest = min([(W - bar_x - 8 - ext_width(out)) / max(sum(seg[1] for seg in ss), 1)
                      for (end, _, out), ss in zip(plan, segs)] + [scale])
        if widest >= scale * 0.999:
            break
        scale = max(widest, 1e-9)
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
        svg.text(bar_x - 10, by + 11, fit(name, name_w, 12), 12, "end")
        svg.text(bar_x - 10, by + 25, fit(f"{count(rows_in)} rows in", name_w, 10), 10, "end", fill=MUTED)
        flows = []
        for x, w, (part, n, color, flowing), text in inside:
            svg.rect(x, by, w, bar_h, color, tip=f"{name}: {count(n)} {part}")
            if text:
                svg.text(x + w / 2, by + bar_h / 2 + 0.35 * fs, text, fs, "middle", fill=ink_on(color))
            if flowing:
                if flows and abs(flows[-1][1] - x) < 0.5:
                    flows[-1] = (flows[-1][0], x + w)
                else:
                    flows.append((x, x + w))
        oy = by + bar_h / 2 - (len(outside) - 1) * 7.5
        for i, (part, n, color, _) in enumerate(outside):
            cy = oy + 15 * i
            svg.rect(end + 6, cy - 5, 10, 10, color)
            svg.text(end + 20, cy + 0.35 * fs, f"{count(n)} {part}", fs)
        prev = (by + bar_h, flows)
        y += block + 22
    return svg.render(y - 14, "row flow")
