"""The audit's counters (exact, sketch, or exact counts of a few candidates) and what adds to them: one
canonical batch's features, or the hypothesis-only probe's predictions."""
from __future__ import annotations

import pyarrow as pa

from refinery.core.counts import make_counter
from refinery.core.exact_counts import ExactCounts
from refinery.core.weighted_audit_counts import WEIGHTED_COUNTS_SCHEMA, WeightedAuditCounts, row_weights
from refinery.io.spill import memory_budget
from refinery.methods.audit.config import AuditConfig


def new_counter(config: AuditConfig, only: pa.Array | None = None, weighted: bool = False):
    """The configured counter; exact counts of just the features ``only`` in the recount pass; exact counts
    spill past ``config.memory_budget``; ``weighted``: sums of the rows' weights (``WeightedAuditCounts``)."""
    if weighted:
        return WeightedAuditCounts()
    if only is not None:
        return ExactCounts(only)
    if config.counting == "sketch":
        return make_counter("sketch", lg_max_k=config.sketch_lg_k)
    return make_counter(config.counting, memory_budget=memory_budget(config.memory_budget))


def count_table(table: pa.Table, config: AuditConfig, counter=None, only: pa.Array | None = None):
    """Add one canonical batch's feature–label counts to ``counter`` (a new one if None).

    ``only``: count just these features (rows' label totals are still all counted).
    """
    counter = counter if counter is not None else new_counter(config, only)
    counter.add_table(table, config.features)
    return counter


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
