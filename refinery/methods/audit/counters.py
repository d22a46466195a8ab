"""What the hypothesis-only probe adds to the audit's counters (``core.audit_counters``): its cross-fitted
predictions, counted as features."""
from __future__ import annotations

import pyarrow as pa

from refinery.core.audit_config import AuditConfig
from refinery.core.exact_counts import ExactCounts
from refinery.core.weighted_audit_counts import WEIGHTED_COUNTS_SCHEMA, row_weights

PROBE_COLUMNS = ("id", "text_a", "text_b", "label")   # what the hypothesis-only probe reads of a row


def probe_counts(table: pa.Table, config: AuditConfig, weighted: bool = False) -> pa.Table:
    """Long counts of ``hypo-only-pred=<label>``: a cross-fitted hypothesis-only probe's prediction per row (with
    ``weighted``, the sums of the rows' weights and of their squares)."""
    from refinery.models import NGramClassifier, cross_fit_proba

    proba, classes = cross_fit_proba(lambda: NGramClassifier("hypothesis"), table, k=config.probe_folds)
    pred = pa.array([f"hypo-only-pred={classes[i]}" for i in proba.argmax(axis=1)], pa.string())
    w = row_weights(table) if weighted else None
    rows = pa.table({"feature": pred, "label": table["label"], **({"count": w, "square": w * w} if weighted else {})})
    aggregate = [("count", "sum"), ("square", "sum")] if weighted else [([], "count_all")]
    counts = rows.group_by(["feature", "label"]).aggregate(aggregate)
    counts = counts.rename_columns(["feature", "label", "count", "square"][:counts.num_columns])
    if weighted:
        return counts.select(WEIGHTED_COUNTS_SCHEMA.names).cast(WEIGHTED_COUNTS_SCHEMA)
    out = ExactCounts()
    out.add_counts(counts)
    return out.counts()


def add_probe(counter, tables, config, weighted: bool = False):
    """Add the hypothesis-only probe's counts over ``tables`` (none: nothing) to ``counter``."""
    if tables:
        counter.add_counts(probe_counts(pa.concat_tables(tables), config, weighted))
