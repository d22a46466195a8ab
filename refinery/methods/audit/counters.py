"""The audit's counters (exact, sketch, or exact counts of a few candidates) and what adds to them: one
canonical batch's features, or the hypothesis-only probe's predictions."""
from __future__ import annotations

import pyarrow as pa

from refinery.core.counts import make_counter
from refinery.core.exact_counts import ExactCounts
from refinery.io.spill import memory_budget
from refinery.methods.audit.config import AuditConfig


def new_counter(config: AuditConfig, only: pa.Array | None = None):
    """The configured counter; exact counts of just the features ``only`` in the recount pass; exact counts
    spill past ``config.memory_budget``."""
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


def probe_counts(table: pa.Table, config: AuditConfig) -> ExactCounts:
    """Counts of ``hypo-only-pred=<label>``: a cross-fitted hypothesis-only probe's prediction per row."""
    from refinery.models import NGramClassifier, cross_fit_proba

    proba, classes = cross_fit_proba(lambda: NGramClassifier("hypothesis"), table, k=config.probe_folds)
    pred = pa.array([f"hypo-only-pred={classes[i]}" for i in proba.argmax(axis=1)], pa.string())
    counts = pa.table({"feature": pred, "label": table["label"]}).group_by(["feature", "label"]).aggregate(
        [([], "count_all")]).rename_columns(["feature", "label", "count"])
    out = ExactCounts()
    out.add_counts(counts)
    return out


def add_probe(counter, tables, config):
    """Add the hypothesis-only probe's counts over ``tables`` (none: nothing) to ``counter``."""
    if tables:
        probe = probe_counts(pa.concat_tables(tables), config)
        counter.add_counts(probe.counts())
