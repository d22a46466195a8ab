"""A stage's verdict (``refinery.core.verdict``) as a report section: the one line, each label's max z*
before → after against the threshold, each label's rows and share of the corpus before → after, the warnings with
the remedy, and the tables of the features still over the threshold, the features that worsened, those no longer
significant and those over it by the label shares' drift alone.

    Report(…).section(HEADING, section(verdict))…
"""
from __future__ import annotations

import html

from refinery.core.label_rows import LABEL_KEPT, rest_kept
from refinery.core.verdict import MIN_EFFECT_RISE, FeatureChange, Verdict
from refinery.report import format as fmt
from refinery.report.page import note, table

HEADING = "Verdict: the shortcuts before and after"


def section(v: Verdict) -> str:
    """The verdict's HTML: a headline (red when the stage broke its promise) and its tables."""
    css = "" if v.ok else ' class="bad"'
    parts = [f"<p{css}>{html.escape(v.line())}</p>"]
    parts += [f"<p{css}>{html.escape(str(w))}</p>" for w in v.warnings()]
    parts += [note(n) for n in v.notes]
    risen = set(v.risen)
    parts.append(table([{"label": l, "max z* before": m.before, "feature before": m.feature_before,
                         "max z* after": m.after, "feature after": m.feature_after,
                         "over the threshold": fmt.z(v.threshold) if m.after is None
                         else ("yes, and rose" if l in risen else "yes" if m.after > v.threshold else "no")}
                        for l, m in v.max_z.items()],
                       ["label", "max z* before", "feature before", "max z* after", "feature after",
                        "over the threshold"], {"max z* before": fmt.z, "max z* after": fmt.z}))
    lost = set(v.lost)
    if v.label_rows:
        parts.append(table([{"label": l, "rows before": r.before, "rows after": r.after, "rows kept": 100 * r.kept,
                             "other labels' rows kept": 100 * rest_kept(v.label_rows, l),
                             "share before": 100 * r.share_before, "share after": 100 * r.share_after,
                             "lost": "yes" if l in lost else "no"}
                            for l, r in v.label_rows.items()],
                           ["label", "rows before", "rows after", "rows kept", "other labels' rows kept",
                            "share before", "share after", "lost"],
                           {"rows kept": _percent, "other labels' rows kept": _percent, "share before": _percent,
                            "share after": _percent}))
    parts.append(note(f"z*(x, l) = (p̂(l|x) − p0) / sqrt(p0 (1 − p0) / n) (Gardner et al. 2021); a feature is "
                      f"significant when z* > {fmt.z(v.threshold)}, the Bonferroni-corrected threshold the output "
                      "is held to" + (f"; prior {v.prior}" if v.prior else "") + ". δ = p̂(l|x) − p0 is the "
                      "effect in points: z* grows with √n, δ does not. A label whose largest z* ends "
                      "over it and higher than before is a warning even where no single feature crossed it (the "
                      "table above). Rows kept: the label's rows after as a percentage of its rows before; share "
                      "before and after: its part of all rows. A label that lost rows and kept under "
                      f"{LABEL_KEPT:.0%} of the rate the other labels kept (or none) is lost: a warning too. A "
                      "feature over the threshold only because the label shares moved away from p0 (p̂(l|x) within "
                      "sampling error of the label's own share, as for a word in nearly every row) is the "
                      "label shares' change, not a shortcut: listed apart, not counted."))
    remaining = [c for cs in v.remaining.values() for c in cs]
    total = sum(v.remaining_total.values())
    parts.append(_changes("Features still over the threshold", remaining, total, "z* after"))
    parts.append(_changes(f"Features that crossed the threshold or rose by ≥ {v.margin:g} in z* (and "
                          f"{100 * MIN_EFFECT_RISE:g} point in δ or a tenth of z*)", v.worsened, v.worsened_total,
                          "z* after"))
    parts.append(_changes("Significant features of the input no longer significant", v.fixed, v.fixed_total,
                          "z* before", f" of {v.significant_before:,}"))
    if v.drifted_total:
        parts.append(_changes("Features over the threshold by the label shares' drift alone (not shortcuts)",
                              v.drifted, v.drifted_total, "z* after"))
    return "".join(parts)


def _changes(title: str, changes: list[FeatureChange], total: int, by: str, of: str = "") -> str:
    """A titled table of feature changes ("none" on the title's line when there are none)."""
    head = f"<p><b>{html.escape(title)}</b> ({total:,}{of})" + (": none</p>" if not total else "</p>")
    if not total:
        return head
    rows = [{"feature": c.feature, "label": c.label, "z* before": c.z_before, "z* after": c.z_after,
             "δ before (points)": _points(c.effect_before), "δ after (points)": _points(c.effect_after),
             "n before": c.n_before, "n after": c.n_after} for c in changes]
    more = note(f"the {len(changes):,} largest by {by} of {total:,}") if total > len(changes) else ""
    return head + table(rows, ["feature", "label", "z* before", "z* after", "δ before (points)", "δ after (points)",
                               "n before", "n after"],
                        {"z* before": fmt.z, "z* after": fmt.z, "n before": fmt.number, "n after": fmt.number}) + more


def _points(effect: float | None) -> str | None:
    """δ = p̂ − p0 in points, signed (None: untested)."""
    return None if effect is None else f"{100 * effect:+.1f}"


def _percent(value) -> str:
    return f"{value:.1f}%"
