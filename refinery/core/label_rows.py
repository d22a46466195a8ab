"""A stage's labels before → after: each label's rows (sums of weights for weighted rows), the share of them kept,
its share of the corpus on each side, and which labels the stage lost.

A label is lost when it lost rows and kept none of them, or under ``LABEL_KEPT`` (half) the rate the other labels,
pooled, kept:

    lost(l)  ⇔  r_l < b_l  and  (r_l = 0  or  r_l / b_l < LABEL_KEPT · Σ_{k≠l} r_k / Σ_{k≠l} b_k),

b and r the rows before and after. A filter that deletes most of a class has removed the class with its shortcut,
and that is no "ok"; one that keeps a third of every label loses none, and up-sampling, which removes no row, none.
The other labels are the yardstick, not the whole corpus: a label's share after over its share before is its keep
rate over the corpus's, and a label that is most of the corpus sets most of the corpus's rate (MSRP's paraphrase,
67% of the rows, kept at 35% where non-paraphrase kept 80%: its share 67% → 47%, 0.7 of before, yet lost).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from refinery.core.features import null_row

LABEL_KEPT = 0.5    # a label that kept under this fraction of the other labels' rate (and lost rows) is lost


@dataclass(frozen=True)
class LabelRows:
    """A label's rows before and after (sums of weights for weighted rows), and its share of all rows on each side."""

    before: float
    after: float
    share_before: float
    share_after: float

    @property
    def kept(self) -> float:
        """The label's rows after over its rows before, r / b (1: all kept; over 1 where rows were added)."""
        return self.after / self.before if self.before else 1.0

    def text(self, label: str) -> str:
        """``paraphrase 2,712 → 949 rows (35% kept), 67.8% → 48.0% of the corpus``."""
        kept = f"{100 * self.kept:.0f}% kept" if round(self.kept, 2) <= 1 else f"×{self.kept:.2f}"   # 1.0004: 100%
        return (f"{label} {count(self.before)} → {count(self.after)} rows ({kept}), "
                f"{100 * self.share_before:.1f}% → {100 * self.share_after:.1f}% of the corpus")


def of_audits(before, after, labels: list) -> dict[str, LabelRows]:
    """Each label's rows on both sides of two audits (``core.stats.ZStats``), from the ``null`` feature (in every row:
    its counts are the label's rows); {} where an audit does not hold it."""
    def rows(stats) -> np.ndarray | None:
        at = null_row(stats.features)
        return None if at < 0 else stats.counts[at][[stats.labels.index(l) for l in labels]].astype(float)
    b, a = rows(before), rows(after)
    if b is None or a is None or not b.sum():
        return {}
    share_b, share_a = b / b.sum(), a / a.sum() if a.sum() else np.zeros_like(a)
    return {l: LabelRows(float(b[j]), float(a[j]), float(share_b[j]), float(share_a[j])) for j, l in enumerate(labels)}


def rest_kept(rows: dict[str, LabelRows], label: str) -> float:
    """Σ_{k≠l} r_k / Σ_{k≠l} b_k: the share of the other labels' rows kept, pooled (1 where there are none)."""
    before, after = (sum(getattr(r, side) for l, r in rows.items() if l != label) for side in ("before", "after"))
    return after / before if before else 1.0


def lost_labels(rows: dict[str, LabelRows]) -> list[str]:
    """The labels lost (the module's rule), in ``rows``' order."""
    return [l for l, r in rows.items()
            if r.after < r.before and (not r.after or r.kept < LABEL_KEPT * rest_kept(rows, l))]


def count(n: float) -> str:
    """Rows, or a sum of weights: ``2,712``, ``2,711.5``."""
    return f"{n:,.0f}" if float(n).is_integer() else f"{n:,.1f}"
