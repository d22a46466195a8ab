"""What IBADR did to the shortcuts (``ShortcutAudit``): the original rows are audited once (the audit's features and
prior rule); the original's top features are measured in each iteration's accepted pseudo samples under the
original's p0, and the pool is judged against the original (``core.verdict``). IBADR promises to make no shortcut
stronger and to weaken the original's: the verdict warns when a feature crossed the threshold or a label's max z*
rose, and notes when nothing was weakened. The pool is counted as the original plus the accepted samples (one
tokenization of each).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from refinery.core import stats as zstats
from refinery.core.audit_record import AuditRecord
from refinery.core.features import FeatureConfig
from refinery.core.verdict import Verdict, judge
from refinery.core.weighted_counts import WeightedCounts
from refinery.messages import Message, Setting
from refinery.methods.ibadr.config import IbadrConfig


class ShortcutAudit:
    """The audit of the original rows and of the pool they grow into, on the audit's ``features`` and prior rule
    (``carried`` with the input, else decided on the original).

    The original is counted once (``WeightedCounts``, two weightings: the original and the pool); ``top`` are its
    k most biased features per label (z* under its p0, n ≥ 10). ``in_rows``: those features' z* in other rows (the
    pseudo samples) under the same p0. ``judge_pool``: the verdict on the pool (the original and the accepted
    samples) against the original. Under an empirical prior each side's p0 is its own label shares: the samples'
    labels are drawn uniformly, so the pool's shares move, and under the original's shares every common word of
    a label that gained rows would read as a bias.
    """

    def __init__(self, table: pa.Table, features: FeatureConfig, k: int = 10, carried: zstats.Prior | None = None):
        self.features = features
        self.counts = WeightedCounts(None, features, 2).add(table, None, None)
        self.prior = zstats.choose_prior("auto", self.counts.label_totals(0), carried)
        self.before = self.counts.stats(0, self._p0(0))
        self.top = self.before.top_k(k)

    def _p0(self, weighting: int) -> np.ndarray:
        totals = self.counts.label_totals(weighting)
        return zstats.prior_vector(list(totals), totals, self.prior.name)

    def in_rows(self, rows: pa.Table) -> dict:
        """For each of the original's top features (``{label: [{"feature", "z_original", "z_generated"}]}``) its z*
        in ``rows`` under the original's p0 (every feature counted, min count 1; None where absent)."""
        z = {}
        if rows.num_rows:
            counts = WeightedCounts(self.before.labels, self.features).add(rows, None)
            stats = counts.stats(0, self.before.p0, min_count=1).to_table(1)
            z = dict(zip(zip(stats["feature"].to_pylist(), stats["label"].to_pylist()), stats["z"].to_pylist()))
        return {label: [{"feature": e["feature"], "z_original": e["z"], "z_generated": z.get((e["feature"], label))}
                        for e in entries] for label, entries in self.top.items()}

    def judge_pool(self, accepted: pa.Table, config: IbadrConfig) -> tuple[Verdict, AuditRecord | None]:
        """The verdict on the pool, the original with the ``accepted`` pseudo samples (call once), and the pool's
        audit (its after side) to keep with it."""
        if accepted.num_rows:
            self.counts.add(accepted, np.zeros(accepted.num_rows), None)
        after = self.counts.stats(1, self._p0(1))
        v = judge(self.before, after, stage="ibadr", under_threshold=False,
                  prior=str(self.prior), remedy_worsened=Message(
                      "the accepted pseudo samples carry these features: lower ", Setting("tau"),
                      f" (now {config.tau}; the task model, fit on the corpus, is surest of samples that carry its "
                      "shortcuts) or generate from the least biased group only (", Setting("lowest_indicator", True),
                      "); generated/ holds each sample and its confidence."))
        if self.prior.name == "empirical":
            v.notes.append("p0 of each side is its own label shares (the pseudo samples' labels are drawn uniformly)")
        if v.ok and v.weakened_nothing():
            v.notes.append(str(Message(   # a verdict's notes are text: its page escapes them
                f"no shortcut weakened by the {accepted.num_rows:,} accepted pseudo samples; to add more, raise ",
                Setting("per_iteration"), f" (now {config.per_iteration:,}) or ", Setting("iterations"),
                f" (now {config.iterations}).")))
        record = None if self.counts.left_out else AuditRecord.of_output(
            after, self.prior, {l: round(n) for l, n in self.counts.label_totals(1).items()}, self.features)
        return v, record


def top_z(summary: dict, accepted: int) -> dict:
    """The mean z* of the original's top features (``ShortcutAudit.in_rows``) in the original and in the
    ``accepted`` samples, where a feature absent from them counts as 0 (None: no sample accepted), and how many
    features there are and are absent."""
    entries = [e for v in summary.values() for e in v]
    return {"original": _mean([e["z_original"] for e in entries]), "features": len(entries),
            "absent": sum(e["z_generated"] is None for e in entries), "accepted_rows": accepted,
            "accepted": _mean([e["z_generated"] or 0.0 for e in entries]) if accepted else None}


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None
