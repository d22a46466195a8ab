"""z-filtering (Wu et al. 2022, Algorithm 1; METHODS §2) over a stream of batches.

Z starts empty or as a seed corpus. For each batch D′_t, the biased set B_Z(l) is the top-k
features per label by z*(x,l | Z) (n ≥ min_count); a row (P, H, l) joins Z when
features(I) ∩ B_Z(l) = ∅, else it goes to Z⁻ with the features it hit. Accepted rows
update Z's counts incrementally. The result depends on the order of the stream: keep the
given order or shuffle with a seed.

The prior p0 of z* is chosen once, from the label counts of the seed and the input (``auto``:
uniform when they are balanced, else empirical; see ``stats.choose_prior``); an empirical p0
then follows Z's own label shares as Z grows. ``null`` (in every row) stays a candidate for
B_Z: under the uniform prior it enters B_Z(l) when Z's share of label l drifts above 1/C, and
rows of l are rejected until it falls back, which is what Wu et al. add it for ("to avoid skewed
label distribution", Table 9); under the empirical prior its z* is 0 and it never enters. The
reports list it apart, as the label prior, not among the biases.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core import stats as zstats
from refinery.core.features import NULL_FEATURE, FeatureConfig, row_feature_lists
from refinery.core.incremental_counts import IncrementalCounts
from refinery.core.stats import rows_per_label
from refinery.io.raw import rebatch
from refinery.methods.zfilter.biased_set import BiasedSet
from refinery.methods.zfilter.config import ZFilterConfig
from refinery.pipeline.engine import stream_map


def add_features(batch: pa.Table, config: FeatureConfig) -> pa.Table:
    """The batch with a ``features`` list column (row-wise: any split of the stream gives the same rows)."""
    return batch.append_column("features", row_feature_lists(batch, config))


def with_features(tables, config: FeatureConfig, engine: str = "local", batch_rows: int = 65_536
                  ) -> Iterator[pa.Table]:
    """``add_features`` over a stream of tables or a ``ParquetSource``, in stream order (on Ray: on workers)."""
    return stream_map(tables, add_features, engine, {"config": config}, batch_rows, stage="zfilter")


class ZFilter:
    """Algorithm 1 as a stateful operator: ``seed`` rows into Z, then ``filter`` batches in order.

    ``label_totals``: the rows per label of the seed and the input, from which an ``auto`` prior is
    chosen (None: no counts, so ``auto`` is uniform).
    """

    def __init__(self, labels: list, config: ZFilterConfig = ZFilterConfig(), label_totals: dict | None = None):
        self.config = config
        self.prior = zstats.choose_prior(config.prior, label_totals or {})
        self.Z = IncrementalCounts(labels)
        self.seen = IncrementalCounts(labels, vocabulary=self.Z)  # every streamed row: the input's audit
        self.biased = BiasedSet(self.Z, config.k, config.min_count, self.prior.name)
        self._touched: list[np.ndarray] = []  # features whose Z counts changed since B_Z was updated
        self.kept = KeptRows() if config.settle else None   # what ``settle`` may take back
        self.streamed = 0                                     # rows filtered so far: the next row's position

    def _pairs(self, table: pa.Table, counts: IncrementalCounts):
        feats = table["features"].combine_chunks() if isinstance(table["features"], pa.ChunkedArray) \
            else table["features"]
        rows = pc.list_parent_indices(feats).to_numpy()
        fids = counts.ids(pc.list_flatten(feats))
        return rows, fids

    def _label_ids(self, table: pa.Table) -> np.ndarray:
        idx = self.Z.label_index
        labels = table["label"].to_pylist()
        unknown = set(labels) - set(idx)
        if unknown:
            raise ValueError(f"labels {sorted(unknown)} are not in the label set {self.Z.labels}")
        return np.array([idx[l] for l in labels], dtype=np.int64)

    def _add_to_z(self, fids: np.ndarray, label_ids: np.ndarray, row_labels: list) -> None:
        self.Z.add(fids, label_ids, row_labels)
        self._touched.append(np.unique(fids))

    def seed(self, table: pa.Table) -> None:
        """Rows of D_seed enter Z unconditionally."""
        rows, fids = self._pairs(table, self.Z)
        lab = self._label_ids(table)
        self._add_to_z(fids, lab[rows], table["label"].to_pylist())

    def biased_cells(self) -> np.ndarray:
        """B_Z on the current Z as sorted cells ``feature · C + label`` (empty during the warm-up)."""
        if self.Z.rows < max(self.config.warmup, 1):
            return np.empty(0, dtype=np.int64)
        touched = np.unique(np.concatenate(self._touched)) if self._touched else np.empty(0, np.int64)
        self._touched = []
        self.biased.update(touched)
        return self.biased.cells()

    def filter(self, table: pa.Table) -> tuple[np.ndarray, list]:
        """Decide a batch against the current Z; accepted rows update Z. Returns (keep, hit features)."""
        rows, fids = self._pairs(table, self.Z)
        lab = self._label_ids(table)
        self.seen.add(fids, lab[rows], table["label"].to_pylist())
        pair_hit = np.isin(fids * len(self.Z.labels) + lab[rows], self.biased_cells())
        hit_rows = np.bincount(rows[pair_hit], minlength=table.num_rows) > 0
        keep = ~hit_rows
        acc = keep[rows]
        self._add_to_z(fids[acc], lab[rows[acc]], [l for l, k in zip(table["label"].to_pylist(), keep) if k])
        if self.kept is not None:
            kept_rows = np.flatnonzero(keep)
            self.kept.add(self.streamed + kept_rows, lab[kept_rows],
                          np.bincount(rows[acc], minlength=table.num_rows)[kept_rows], fids[acc])
        self.streamed += table.num_rows
        hits: list[list[str]] = [[] for _ in range(table.num_rows)]
        for r, name in zip(rows[pair_hit], self.Z.names(fids[pair_hit]).to_pylist()):
            hits[r].append(name)
        return keep, hits

    def threshold(self) -> float:
        """The significance threshold of the input's audit: Φ⁻¹(1 − α/m), m its tested (feature, label) cells."""
        return self.seen.stats(self.prior.name, self.config.min_count, self.config.alpha).threshold

    def settle(self, input_threshold: float, max_rounds: int = 100) -> dict[int, tuple[float, list[str]]]:
        """Bring every feature of Z under the threshold by taking back the fewest of its earliest-admitted rows.

        The threshold is the input's audit's (``input_threshold``), or Z's own where lower: Φ⁻¹(1 − α/m) of Z's
        m tested cells, fewer than the input's, so that an audit of the kept rows alone finds none over it
        either; it is recomputed each round, as rows leave. While some (x, l) has z*(x, l | Z) > threshold
        (n ≥ min_count; ``null``, the label prior, aside), the r earliest kept stream rows of label l that carry
        x leave Z, r the least for which z*(x, l) falls to the threshold or n(x) under min_count; cells are
        settled together and the round repeats on the new counts. Seed rows stay. Returns {stream position: (the
        threshold of the round that took the row back, the features over it)}.
        """
        if self.kept is None:
            return {}
        fids, row_of_pair, labels, positions = self.kept.arrays()
        C = len(self.Z.labels)
        alive = np.ones(len(positions), dtype=bool)
        taken: dict[int, tuple[float, list[str]]] = {}
        for _ in range(max_rounds):
            cells, need, threshold = self._over(input_threshold)
            if not len(cells):
                break
            m = np.flatnonzero(np.isin(fids, np.unique(cells // C)))   # the pairs of the features over it
            m = m[alive[row_of_pair[m]]]
            key = fids[m].astype(np.int64) * C + labels[row_of_pair[m]]
            m, key = m[np.isin(key, cells)], key[np.isin(key, cells)]
            order = np.lexsort((row_of_pair[m], key))                  # by cell, then by stream order
            k, r = key[order], row_of_pair[m][order]
            first = np.r_[0, np.flatnonzero(k[1:] != k[:-1]) + 1]
            rank = np.arange(len(k)) - np.repeat(first, np.diff(np.r_[first, len(k)]))
            chosen = rank < need[np.searchsorted(cells, k)]
            if not chosen.any():   # what is over the threshold lies in the seed's rows
                break
            names = self.Z.names(k[chosen] // C).to_pylist()
            for row, name in zip(r[chosen], names):
                taken.setdefault(int(positions[row]), (threshold, []))[1].append(name)
            out = np.unique(r[chosen])
            alive[out] = False
            gone = np.isin(row_of_pair, out)
            self.Z.subtract(fids[gone], labels[row_of_pair[gone]], [self.Z.labels[j] for j in labels[out]])
        self._touched.append(np.unique(fids))
        return taken

    def _over(self, input_threshold: float) -> tuple[np.ndarray, np.ndarray, float]:
        """Cells ``feature · C + label`` of Z over the threshold (sorted), for each the rows of that label to take
        back: the least r ≥ 1 with z*((c − r)/(n − r)) ≤ threshold or n − r < min_count; and the threshold, the
        lower of ``input_threshold`` and Z's own (its m tested cells: features with n ≥ min_count, × C)."""
        counts = self.Z.matrix[: self.Z.num_features]
        n = zstats.row_totals(counts)
        ids = np.flatnonzero(n >= self.config.min_count)
        own = zstats.bonferroni_threshold(self.config.alpha, len(ids) * len(self.Z.labels))
        threshold = min(input_threshold, own)
        p0 = zstats.prior_vector(self.Z.labels, self.Z.label_totals, self.prior.name)
        z = zstats.z_score(counts[ids] / n[ids, None], n[ids, None], p0[None, :])
        f, j = np.nonzero(z > threshold)
        keep = pc.not_equal(self.Z.names(ids[f]), NULL_FEATURE).to_numpy(zero_copy_only=False) if len(f) else \
            np.zeros(0, dtype=bool)
        f, j = ids[f[keep]], j[keep]
        need = np.empty(len(f), dtype=np.int64)
        for i, (x, l) in enumerate(zip(f, j)):
            c, total = int(counts[x, l]), int(n[x])
            r = np.arange(1, c + 1)
            left = np.maximum(total - r, 1)
            fine = (zstats.z_score((c - r) / left, left, p0[l]) <= threshold) \
                | (total - r < self.config.min_count)
            need[i] = r[np.argmax(fine)] if fine.any() else c
        cells = f * len(self.Z.labels) + j
        order = np.argsort(cells)
        return cells[order], need[order], threshold


class KeptRows:
    """The stream's kept rows as ``ZFilter.settle`` reads them: position, label id and feature ids (about
    4 bytes a feature and 20 a row)."""

    def __init__(self):
        self._parts: list[tuple] = []

    def add(self, positions: np.ndarray, label_ids: np.ndarray, sizes: np.ndarray, feature_ids: np.ndarray):
        self._parts.append((positions.astype(np.int64), label_ids.astype(np.int32), sizes.astype(np.int32),
                            feature_ids.astype(np.int32)))

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(feature ids, each pair's row, each row's label id, each row's stream position); int32 but the last."""
        if not self._parts:
            e = np.empty(0, dtype=np.int64)
            return e, e, e, e
        positions, labels, sizes, fids = (np.concatenate(c) for c in zip(*self._parts))
        self._parts = []
        return fids, np.repeat(np.arange(len(sizes), dtype=np.int32), sizes), labels, positions



def run_in_memory(table: pa.Table, config: ZFilterConfig = ZFilterConfig()) -> int:
    """Algorithm 1 over an in-memory table in batches; the number of rows kept (no outputs written)."""
    label_totals = dict(sorted(rows_per_label(table["label"]).items()))
    zf = ZFilter(list(label_totals), config, label_totals)
    kept = 0
    for batch in rebatch(with_features(iter([table]), config.features), config.batch_size):
        keep, _ = zf.filter(batch)
        kept += int(keep.sum())
    return kept
