"""Algorithm 1 (Wu et al. 2022) over a stage's whole input, once, in order: what ``ZFilterStage.prepare`` runs.

The seed's rows enter Z first; the input streams through ``ZFilter.filter`` in its order (or shuffled with
``shuffle_seed``), and with ``settle`` the earliest-admitted rows that keep a feature of Z over the threshold
(the input's, or the kept rows' own where lower) are taken back after the stream (``ZFilter.settle``). What
comes out is each rejected row's id, reason and hit features (``Decisions``), the seed's rows, and Z and the
input's counts for the report.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from refinery.core.stats import rows_per_label
from refinery.io.raw import rebatch
from refinery.methods.zfilter.algorithm import Settled, ZFilter, add_features, with_features
from refinery.methods.zfilter.decisions import Decisions, position_type
from refinery.methods.zfilter.config import ZFilterConfig
from refinery.pipeline.stage_input import SideInput, StageInput
from refinery.progress import progress

STREAM_REASON = "hits B_Z(label): "
SETTLE_REASON = "over the threshold z* > {threshold:.2f} in the kept rows after the stream: "


@dataclass
class Filtering:
    """What Algorithm 1 decided over one input: the rejected rows (``decisions``), the seed's rows (kept as
    they are, ahead of the input's), ``zf`` (Z and the input's counts, the prior), the rows ``settle`` took
    back and the rows each biased feature rejected (commonest first)."""

    decisions: Decisions
    seed: pa.Table | None
    zf: ZFilter
    settled_out: int
    rejections_by_feature: dict
    settle_exhausted: bool = False   # settle's budget ran out with features still over the threshold
    passed_through: bool = False     # the input's audit found no shortcut: every row kept (``ZFilter.nothing_to_remove``)

    @property
    def seed_by_label(self) -> dict:
        return rows_per_label(self.seed["label"]) if self.seed is not None else {}


def filter_stream(source: StageInput, config: ZFilterConfig) -> Filtering:
    """Algorithm 1 over ``source`` (conditionally on ``config.seed_corpus``, read through its mapping), then
    ``settle``. On Ray, an input of finished corpora is read and featurized by workers; Z stays here."""
    seed = source.read_side(SideInput(tuple(config.seed_corpus), source.mapping))[0] if config.seed_corpus else None
    rows = (b.rows for b in source.iter_batches() if b.rows.num_rows)
    whole = pa.concat_tables(list(rows), promote_options="permissive") if config.shuffle_seed is not None else None
    label_totals = label_counts(source, seed, read_raw=config.prior == "auto", whole=whole)
    order = None   # a shuffled stream's order: its positions mapped back to the input's
    if whole is not None:
        order = np.random.default_rng(config.shuffle_seed).permutation(whole.num_rows)
        rows = iter([whole.take(pa.array(order))])
    elif source.engine == "ray":
        rows = source.shard_files() or rows   # workers read the shards of finished corpora
    zf = ZFilter(list(label_totals), config, label_totals, source.prior)
    if seed is not None and seed.num_rows:
        zf.seed(add_features(seed, config.features))
    rejected, pair_positions, pair_ids = [], [], []   # columns, by stream position
    with progress(desc="zfilter", unit=" rows") as bar:
        featurized = with_features(rows, config.features, source.engine, source.opts.batch_rows)
        for batch in rebatch(zf.interned_ahead(featurized), config.batch_size):
            start = zf.streamed
            keep, hits = zf.filter(batch)
            at = position_type(zf.streamed)
            rejected.append((start + np.flatnonzero(~keep)).astype(at))
            pair_positions.append((start + hits.rows).astype(at))
            pair_ids.append(hits.feature_ids.astype(np.int32))
            bar.update(batch.num_rows)
    zf.end_stream()
    audit = zf.input_audit()
    passed_through = zf.nothing_to_remove(audit)
    if passed_through:
        zf.keep_all()
        rejected, pair_positions, pair_ids = [], [], []
    threshold = audit.threshold
    del audit
    settled = zf.settle(threshold) if config.settle else Settled.none()
    zf.Z.freeze()
    thresholds, prefix_of_settled = np.unique(settled.thresholds, return_inverse=True)
    prefixes = [STREAM_REASON] + [SETTLE_REASON.format(threshold=t) for t in thresholds]
    prefix_index = np.r_[np.zeros(sum(map(len, rejected)), np.int64), 1 + prefix_of_settled]
    # the columns joined as they are handed over, so that the decisions let each go once read
    at = position_type(zf.streamed)
    decisions = Decisions.build(zf.streamed, _joined(rejected, settled.positions, at, order), prefix_index,
                                prefixes, _joined(pair_positions, settled.pair_positions, at, order),
                                _joined(pair_ids, settled.pair_feature_ids, np.int32), zf.Z.names)
    return Filtering(decisions, seed if seed is not None and seed.num_rows else None, zf, len(settled),
                     decisions.rejections_by_feature(), zf.settle_exhausted, passed_through)


def _joined(chunks: list, last: np.ndarray, dtype, order: np.ndarray | None = None) -> np.ndarray:
    """``chunks`` (of ``dtype``; emptied) and ``last`` as one array of ``dtype``; stream positions mapped through
    ``order`` (a shuffled stream's) back to the input's."""
    joined = np.concatenate([*chunks, last.astype(dtype)]) if chunks or len(last) else np.zeros(0, dtype)
    chunks.clear()
    return joined if order is None else order[joined]


def label_counts(source: StageInput, seed: pa.Table | None, read_raw: bool, whole: pa.Table | None = None) -> dict:
    """Rows per label of the seed and the inputs, over the declared label set, else the labels present:
    from the inputs already in memory (``whole``), a finished corpus's manifest, or a read of raw inputs
    that computes no ids. With a declared label set and not ``read_raw``, raw inputs are not read (their
    labels count 0)."""
    mapping = source.mapping
    declared = mapping is not None and bool(mapping.label_set)
    counts = Counter(dict.fromkeys(mapping.label_set, 0) if declared else {})
    if seed is not None:
        counts.update(rows_per_label(seed["label"]))
    if whole is not None:
        counts.update(rows_per_label(whole["label"]))
    else:
        counts.update(source.rows_per_label(read_raw=read_raw or not declared))
    return dict(sorted(counts.items()))
