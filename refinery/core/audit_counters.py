"""The audit's counters (exact, sketch, or exact counts of a few candidates) and one canonical batch's features
counted into them."""
from __future__ import annotations

import pyarrow as pa

from refinery.core.audit_config import AuditConfig
from refinery.core.counts import make_counter
from refinery.core.exact_counts import ExactCounts
from refinery.core.weighted_audit_counts import WeightedAuditCounts
from refinery.io.memory import memory_budget


def new_counter(config: AuditConfig, only: pa.Array | None = None, weighted: bool = False):
    """The configured counter; exact counts of just the features ``only`` in the recount pass; exact counts
    spill past the run's memory budget (``io.memory``); ``weighted``: sums of the rows' weights
    (``WeightedAuditCounts``)."""
    if weighted:
        return WeightedAuditCounts()
    if only is not None:
        return ExactCounts(only)
    if config.counting == "sketch":
        return make_counter("sketch", lg_max_k=config.sketch_lg_k)
    return make_counter(config.counting, memory_budget=memory_budget())


def count_table(table: pa.Table, config: AuditConfig, counter=None, only: pa.Array | None = None):
    """Add one canonical batch's feature–label counts to ``counter`` (a new one if None).

    ``only``: count just these features (rows' label totals are still all counted).
    """
    counter = counter if counter is not None else new_counter(config, only)
    counter.add_table(table, config.features)
    return counter
