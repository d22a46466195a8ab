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

from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core import stats as zstats
from refinery.core.features import NULL_FEATURE, FeatureConfig
from refinery.core.row_features import row_feature_lists
from refinery.core.incremental_counts import IncrementalCounts
from refinery.core.stats import rows_per_label
from refinery.messages import Refusal
from refinery.io.raw import rebatch
from refinery.io.spill import SpilledSlices
from refinery.methods.zfilter.biased_set import BiasedSet
from refinery.methods.zfilter.config import ZFilterConfig
from refinery.pipeline.engine import computed_ahead, stream_map


def add_features(batch: pa.Table, config: FeatureConfig) -> pa.Table:
    """What Algorithm 1 reads of the batch's rows: each row's ``label`` and its ``features`` list (row-wise: any split
    of the stream gives the same rows)."""
    return pa.table({"label": batch["label"], "features": row_feature_lists(batch, config)})


def with_features(tables, config: FeatureConfig, engine: str = "local", batch_rows: int = 65_536
                  ) -> Iterator[pa.Table]:
    """``add_features`` over a stream of tables or a ``ParquetSource``, in stream order (on Ray: on workers, so the
    driver receives labels and features, not the rows' texts; locally, two batches ahead in a thread of their own,
    beside Algorithm 1's compiled passes)."""
    return stream_map(tables, add_features, engine, {"config": config}, batch_rows, stage="zfilter", ahead=2)


class ZFilter:
    """Algorithm 1 as a stateful operator: ``seed`` rows into Z, then ``filter`` batches in order.

    ``label_totals``: the rows per label of the seed and the input, from which an ``auto`` prior is
    chosen (None: no counts, so ``auto`` is uniform) unless the input ``carried`` one (``stats.choose_prior``).
    """

    def __init__(self, labels: list, config: ZFilterConfig = ZFilterConfig(), label_totals: dict | None = None,
                 carried: zstats.Prior | None = None):
        self.config = config
        self.prior = zstats.choose_prior(config.prior, label_totals or {}, carried)
        self.Z = IncrementalCounts(labels)
        self.seen = IncrementalCounts(labels, vocabulary=self.Z)  # every streamed row: the input's audit
        self.biased = BiasedSet(self.Z, config.k, config.min_count, self.prior.name)
        self._touched: list[np.ndarray] = []  # features whose Z counts changed since B_Z was updated
        self.kept = KeptRows() if config.settle else None   # what ``settle`` may take back
        self._flag, self._flagged = np.zeros(0, dtype=bool), np.zeros(0, np.int64)   # the features of B_Z's cells
        self.streamed = 0                                     # rows filtered so far: the next row's position
        self.tested = 0   # m: the input's features with n ≥ min_count up to the last row decided (``interned``)
        self.seeded = False                                   # rows entered Z unconditionally (``seed``)
        self.settle_exhausted = False   # settle's budget ran out with features still over the threshold

    def interned(self, table: pa.Table) -> pa.Table:
        """``table`` (``add_features``'s) with each row's features as Z's feature ids (``feature_ids``, as
        ``_feature_ids``), counted into the input's counts, and each row's ``tested``: the input's features with
        n ≥ min_count once it is counted, the m of Z's threshold when its batch is decided. The input's counts
        only grow and do not follow the decisions, so this runs ahead of them (``interned_ahead``); once per
        featurized batch, before the decision batches cut it."""
        table = self._feature_ids(table)
        offsets, fids = self._lists(table)
        tested = self.seen.add_all_rows(fids, offsets, table["label_id"].to_numpy(), self.config.min_count)
        return table.append_column("tested", pa.array(tested))

    def interned_ahead(self, featurized: Iterator[pa.Table]) -> Iterator[pa.Table]:
        """``interned`` over a stream of ``add_features``'s tables, in order, the next two in a thread of their own
        while the caller decides the earlier ones (``filter``): the vocabulary only grows, and the decisions read
        only the features of rows already interned."""
        return computed_ahead(map(self.interned, featurized), 2)

    def _feature_ids(self, table: pa.Table) -> pa.Table:
        """``table`` (``add_features``'s) with each row's features as Z's feature ids (``feature_ids``) and its
        ``label_id``: each distinct string of a chunk interned once, in the order of its first use, so that a
        feature's id is the same whatever the batches."""
        column = table["features"]
        lists = []
        for chunk in column.chunks if isinstance(column, pa.ChunkedArray) else [column]:
            offsets = chunk.offsets.to_numpy()
            ids = self.Z.ids(pc.list_flatten(chunk))
            lists.append(pa.ListArray.from_arrays(pa.array((offsets - offsets[0]).astype(np.int32)), pa.array(ids)))
        column = pa.chunked_array(lists, pa.list_(pa.int64()))
        return pa.table({"label": table["label"], "label_id": self._label_ids(table), "feature_ids": column})

    def _lists(self, table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """(offsets, one more than the rows; feature ids) of the batch's rows (``_feature_ids``'s table): row r's
        feature ids are ``ids[offsets[r]:offsets[r + 1]]``."""
        column = table["feature_ids"]
        chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
        offsets, fids, start = [np.zeros(1, np.int64)], [np.zeros(0, np.int64)], 0
        for chunk in chunks:
            bounds = chunk.offsets.to_numpy()
            offsets.append(bounds[1:] - bounds[0] + start)
            fids.append(chunk.values.to_numpy()[bounds[0]:bounds[-1]])
            start += int(bounds[-1] - bounds[0])
        return np.concatenate(offsets), np.concatenate(fids)

    def _label_ids(self, table: pa.Table) -> np.ndarray:
        """Each row's label id: the label column dictionary-encoded, each distinct label looked up once."""
        column = table["label"]
        encoded = pc.dictionary_encode(column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column)
        values = encoded.dictionary.to_pylist()
        unknown = set(values) - set(self.Z.label_index)
        if unknown:
            raise Refusal(f"labels {sorted(unknown)} are not in the label set {self.Z.labels}", code="bad-input")
        ids = np.array([self.Z.label_index[v] for v in values], dtype=np.int64)
        return ids[encoded.indices.to_numpy(zero_copy_only=False)] if len(ids) else np.zeros(0, np.int64)

    def seed(self, table: pa.Table) -> None:
        """Rows of D_seed (``add_features``'s table) enter Z unconditionally."""
        table = self._feature_ids(table)
        offsets, fids = self._lists(table)
        self._touched.append(self.Z.add_rows(fids, offsets, table["label_id"].to_numpy()))
        self.seeded = True

    def biased_cells(self) -> np.ndarray:
        """B_Z on the current Z as sorted cells ``feature · C + label`` (empty during the warm-up): each label's
        top-k of the features over Z's significance threshold Φ⁻¹(1 − α/m), m = C × Z's features with
        n ≥ min_count (``biased_set`` significant), or of every feature (top-k)."""
        if self.Z.rows < max(self.config.warmup, 1):
            return np.empty(0, dtype=np.int64)
        touched = self._touched[0] if len(self._touched) == 1 else \
            np.unique(np.concatenate(self._touched)) if self._touched else np.empty(0, np.int64)
        self._touched = []
        self.biased.update(touched)
        if self.config.biased_set == "top-k":
            return self.biased.cells()
        return self.biased.cells(zstats.bonferroni_threshold(self.config.alpha, self.tested * len(self.Z.labels)))

    def filter(self, table: pa.Table) -> tuple[np.ndarray, "Hits"]:
        """Decide a batch (``interned``'s, or ``add_features``'s, interned here) against the current Z; accepted rows
        update Z. Returns (keep, the B_Z features each rejected row hit)."""
        table = table if "tested" in table.column_names else self.interned(table)
        offsets, fids = self._lists(table)
        lab = table["label_id"].to_numpy()
        if table.num_rows:
            self.tested = table["tested"][table.num_rows - 1].as_py()
        cells = self.biased_cells()
        keep, hit_rows, hit_fids, touched, kept_ids = self.Z.add_rows_missing(fids, offsets, lab, self._flags(cells),
                                                                               cells)
        self._touched.append(touched)
        if self.kept is not None:
            kept_rows = np.flatnonzero(keep)
            self.kept.add(self.streamed + kept_rows, lab[kept_rows], np.diff(offsets)[kept_rows], kept_ids)
        self.streamed += table.num_rows
        return keep, Hits(hit_rows, hit_fids)

    def _flags(self, cells: np.ndarray) -> np.ndarray:
        """A flag per feature, true for the features of B_Z's sorted ``cells`` (so that most of a batch's pairs cost
        one lookup)."""
        if len(self._flag) < self.Z.num_features:   # grown by half, as Z's vocabulary
            self._flag = np.zeros(self.Z.num_features * 3 // 2, dtype=bool)
        self._flag[self._flagged] = False
        self._flagged = cells // len(self.Z.labels)
        self._flag[self._flagged] = True
        return self._flag

    def end_stream(self) -> None:
        """The stream is over: what only its batches used is let go (the input's counting arrays, B_Z and its flags),
        before ``settle`` and the decisions take their memory."""
        self.seen.freeze()
        self.biased = None
        self._flag, self._flagged = np.zeros(0, dtype=bool), np.zeros(0, np.int64)

    def input_audit(self) -> zstats.ZStats:
        """The input's audit (every streamed row), whose threshold Φ⁻¹(1 − α/m) ``settle`` holds Z to."""
        return self.seen.stats(self.prior.name, self.config.min_count, self.config.alpha)

    def nothing_to_remove(self, audit: zstats.ZStats) -> bool:
        """Whether z-filtering should leave the input as it is: ``biased_set`` significant, no seed, and the input's
        ``audit`` finds no (feature, label) over its threshold (``null``, the label prior, aside). The stream rejects
        a row for a feature over Z's threshold *so far*, which a feature just under the input's can cross by chance
        while Z grows; an input with no shortcut then passes through unchanged (a z-filter's output through
        another), as ``refinery audit`` of it would lead a user to expect."""
        if self.config.biased_set != "significant" or self.seeded:
            return False
        over = np.flatnonzero(audit.significant().any(axis=1))
        return not len(over) or set(audit.features.take(pa.array(over)).to_pylist()) == {NULL_FEATURE}

    def keep_all(self) -> None:
        """Z becomes every streamed row (``nothing_to_remove``): what the stream kept, and no more."""
        self.Z.matrix, self.Z.label_totals = self.seen.matrix.copy(), dict(self.seen.label_totals)
        self.kept = None   # nothing over the threshold: nothing for ``settle`` to take back

    def settle(self, input_threshold: float, max_rounds: int = 100) -> "Settled":
        """Bring the features of Z under the threshold by taking back the fewest of their earliest-admitted rows,
        within a budget.

        The threshold is the input's audit's (``input_threshold``), or Z's own where lower: Φ⁻¹(1 − α/m) of Z's
        m tested cells, fewer than the input's, so that an audit of the kept rows alone finds none over it
        either; it is recomputed each round, as rows leave. While some (x, l) has z*(x, l | Z) > threshold
        (n ≥ min_count; ``null``, the label prior, aside), the r earliest kept stream rows of label l that carry
        x leave Z, r the least for which z*(x, l) falls to the threshold or n(x) under min_count
        (``_rows_to_take``); cells are settled together and the round repeats on the new counts. Seed rows stay.

        The budget (``config.settle_limit``) is a share of the rows of each label the stream kept, so that the
        kept label shares stay as they were (a label thinned alone would make every common word lean to the
        others). Each round settles the cells whose rows fit in what is left of their label's budget, the largest
        effect p̂(l|x) − p0(l) first (``_within``); when none fits, the pass ends and what is still over the
        threshold stays (the verdict names it). z* grows with √n, so on
        millions of rows features a fraction of a point off p0 are significant, and settling all of them would
        take back most of the corpus; on small corpora the budget is not reached.
        """
        if self.kept is None:
            return Settled.none()
        fids, offsets, labels, positions = self.kept.arrays()
        try:
            taken_rows, taken_thresholds, pair_rows, pair_fids = self._take_back(fids, offsets, labels, input_threshold,
                                                                                 max_rounds)
        finally:
            fids.close()
            self.kept = None
        if not taken_rows:
            return Settled.none()
        return Settled(positions[np.concatenate(taken_rows)], np.concatenate(taken_thresholds),
                       positions[np.concatenate(pair_rows)], np.concatenate(pair_fids))

    def _take_back(self, fids: "KeptIds", offsets: np.ndarray, labels: np.ndarray, input_threshold: float,
                   max_rounds: int) -> tuple[list, list, list, list]:
        """``settle``'s rounds: (the kept rows taken back, each round's; their thresholds; pairs (row, feature id) of
        the features each was taken back for)."""
        C = len(self.Z.labels)
        budget = int(self.config.settle_limit * len(labels))
        alive = np.ones(len(labels), dtype=bool)
        taken_rows, taken_thresholds, pair_rows, pair_fids = [], [], [], []
        for _ in range(max_rounds):
            cells, need, effect, threshold = self._over(input_threshold)
            if not len(cells):
                break
            fits = _within(need, effect, budget)
            self.settle_exhausted = not fits.all()
            if not fits.any():
                break
            cells, need = cells[fits], need[fits]
            m, ids = fids.among(np.unique(cells // C), self.Z.num_features)   # the pairs of the features
            row = np.searchsorted(offsets, m, side="right") - 1         # each pair's row
            ids, row = ids[alive[row]], row[alive[row]]
            key = ids.astype(np.int64) * C + labels[row]
            inside = np.isin(key, cells)
            row, key = row[inside], key[inside]
            order = np.lexsort((row, key))                              # by cell, then by stream order
            k, r = key[order], row[order]
            first = np.r_[0, np.flatnonzero(k[1:] != k[:-1]) + 1]
            rank = np.arange(len(k)) - np.repeat(first, np.diff(np.r_[first, len(k)]))
            chosen = rank < need[np.searchsorted(cells, k)]
            if not chosen.any():   # what is over the threshold lies in the seed's rows
                break
            pair_rows.append(r[chosen])
            pair_fids.append(k[chosen] // C)
            out = np.unique(r[chosen])
            taken_rows.append(out)
            taken_thresholds.append(np.full(len(out), threshold))
            budget -= len(out)
            alive[out] = False
            sizes = offsets[out + 1] - offsets[out]
            gone = np.repeat(offsets[out] - np.r_[0, np.cumsum(sizes)[:-1]], sizes) + np.arange(sizes.sum())
            self._touched.append(self.Z.subtract(fids.take(gone), np.repeat(labels[out], sizes), labels[out]))
        return taken_rows, taken_thresholds, pair_rows, pair_fids

    def _over(self, input_threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """Cells ``feature · C + label`` of Z over the threshold (sorted), for each the rows of that label to take
        back (``_rows_to_take``) and its effect p̂(l|x) − p0(l); and the threshold, the lower of
        ``input_threshold`` and Z's own (its m tested cells: features with n ≥ min_count, × C)."""
        counts = self.Z.matrix[: self.Z.num_features]
        n = zstats.row_totals(counts)
        ids = np.flatnonzero(n >= self.config.min_count)
        own = zstats.bonferroni_threshold(self.config.alpha, len(ids) * len(self.Z.labels))
        threshold = min(input_threshold, own)
        p0 = zstats.prior_vector(self.Z.labels, self.Z.label_totals, self.prior.name)
        p_hat = counts[ids] / n[ids, None]
        z = zstats.z_score(p_hat, n[ids, None], p0[None, :])
        f, j = np.nonzero(z > threshold)
        effect = p_hat[f, j] - p0[j]
        prior = pc.equal(self.Z.names(ids[f]), NULL_FEATURE).to_numpy(zero_copy_only=False) if len(f) else \
            np.zeros(0, dtype=bool)
        keep = ~prior | (self.prior.name == "uniform")
        effect = np.where(prior, np.inf, effect)   # a label's share over 1/C: settled first, as the others lean
        f, j, effect = ids[f[keep]], j[keep], effect[keep]
        need = _rows_to_take(counts[f, j].astype(np.int64), n[f].astype(np.int64), p0[j], threshold,
                             self.config.min_count)
        cells = f * len(self.Z.labels) + j
        order = np.argsort(cells)
        return cells[order], need[order], effect[order], threshold


def _within(need: np.ndarray, effect: np.ndarray, budget: int) -> np.ndarray:
    """Which cells to settle with at most ``budget`` rows: the largest effect first, each whose ``need`` fits in
    what is left (a cell too large is passed over for the smaller ones after it)."""
    chosen = np.zeros(len(need), dtype=bool)
    for i in np.argsort(-effect, kind="stable"):
        if need[i] <= budget:
            chosen[i] = True
            budget -= need[i]
    return chosen


def _rows_to_take(c: np.ndarray, n: np.ndarray, p0: np.ndarray, threshold: float, min_count: int) -> np.ndarray:
    """For each cell with c rows of its label among the n rows of its feature, the least r ≥ 1 for which
    z*((c − r)/(n − r), n − r) ≤ threshold, or n − r < min_count (r = c at most).

    With m = n − r rows left and d = n − c rows of other labels, z* ≤ t reads (1 − p0) − d/m ≤ t·s/√m,
    s = √(p0(1 − p0)): a quadratic in u = 1/√m, d·u² + t·s·u − (1 − p0) ≥ 0, whose root gives the largest m
    that passes; the integer r is then found among a few neighbours of n − m, checked exactly (z* falls as r
    grows, so the first that passes is the least)."""
    s = np.sqrt(p0 * (1 - p0))
    d = (n - c).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        u = np.where(d > 0, (-threshold * s + np.sqrt((threshold * s) ** 2 + 4 * d * (1 - p0))) / (2 * d),
                     (1 - p0) / (threshold * s))
        m = np.nan_to_num(np.floor(1 / u ** 2), posinf=0)
    start = np.clip(n - m.astype(np.int64) - 2, 1, np.maximum(c, 1))
    need = np.full(len(c), -1, dtype=np.int64)
    for step in range(6):
        r = np.minimum(start + step, c)
        hit = (need < 0) & _under(c, n, p0, threshold, r)
        need[hit] = r[hit]
    for i in np.flatnonzero(need < 0):   # not among the neighbours (rounding): the exact search
        r = np.arange(1, c[i] + 1)
        passes = _under(c[i], n[i], p0[i], threshold, r)
        need[i] = r[np.argmax(passes)] if passes.any() else c[i]
    return np.clip(np.minimum(need, n - min_count + 1), 1, np.maximum(c, 1))


def _under(c, n, p0, threshold: float, r):
    """Whether taking back r of the c rows leaves z*((c − r)/(n − r), n − r) ≤ threshold."""
    left = np.maximum(n - r, 1)
    return zstats.z_score((c - r) / left, left, p0) <= threshold


class Hits:
    """The B_Z features the rows of a batch hit: pairs (row in the batch, feature id)."""

    def __init__(self, rows: np.ndarray, feature_ids: np.ndarray):
        self.rows, self.feature_ids = rows, feature_ids

    def names(self, zf: "ZFilter", num_rows: int) -> list[list[str]]:
        """Per row, the names of the features it hit (a test's and a report's view; the stream keeps the ids)."""
        out: list[list[str]] = [[] for _ in range(num_rows)]
        for r, name in zip(self.rows, zf.Z.names(self.feature_ids).to_pylist()):
            out[r].append(name)
        return out


class Settled:
    """The rows ``ZFilter.settle`` took back: their stream positions, the threshold of the round that took each,
    and pairs (stream position, feature id) of the features over it that each was taken back for."""

    def __init__(self, positions: np.ndarray, thresholds: np.ndarray, pair_positions: np.ndarray,
                 pair_feature_ids: np.ndarray):
        self.positions, self.thresholds = positions, thresholds
        self.pair_positions, self.pair_feature_ids = pair_positions, pair_feature_ids

    @classmethod
    def none(cls) -> "Settled":
        e = np.empty(0, dtype=np.int64)
        return cls(e, np.empty(0), e, e)

    def __len__(self) -> int:
        return len(self.positions)


class KeptRows:
    """The stream's kept rows as ``ZFilter.settle`` reads them: position, label id and size of each row in memory
    (about 20 bytes a row), their feature ids on disk (``KeptIds``, 4 bytes a feature), so that what settle holds
    follows the rows only by those 20 bytes."""

    def __init__(self):
        self._rows: list[tuple] = []
        self.ids = KeptIds()

    def add(self, positions: np.ndarray, label_ids: np.ndarray, sizes: np.ndarray, feature_ids: np.ndarray):
        self._rows.append((positions.astype(np.int64), label_ids.astype(np.int32), sizes.astype(np.int32)))
        self.ids.append(feature_ids)

    def arrays(self) -> tuple["KeptIds", np.ndarray, np.ndarray, np.ndarray]:
        """(the feature ids, each row's offset into them (one more than the rows), each row's label id (int32),
        each row's stream position)."""
        parts, self._rows = self._rows, []
        positions = np.concatenate([p for p, _, _ in parts]) if parts else np.zeros(0, np.int64)
        labels = np.concatenate([l for _, l, _ in parts]) if parts else np.zeros(0, np.int32)
        sizes = np.concatenate([s for _, _, s in parts]) if parts else np.zeros(0, np.int32)
        self.ids.finish()
        return self.ids, np.r_[0, np.cumsum(sizes, dtype=np.int64)], labels, positions


class KeptIds:
    """Feature ids (int32) appended batch by batch to a scratch file (``io.spill.SpilledSlices``, slices of ``SLICE``
    ids, each written by a thread of its own while the stream goes on), then read back a slice at a time: the ids
    among some features (``among``), or those at some positions (``take``)."""

    SLICE = 1 << 22

    def __init__(self):
        self._pending: list[np.ndarray] = []
        self._held = 0
        self._file = SpilledSlices(["ids"], prefix="zfilter-kept-")
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="refinery-kept-ids")
        self._writes: list = []
        self._starts = [0]   # each slice's first position, and the end

    def append(self, ids: np.ndarray) -> None:
        self._pending.append(ids.astype(np.int32, copy=False))
        self._held += len(ids)
        if self._held >= self.SLICE:
            self._write()

    def _write(self) -> None:
        if self._held:
            self._writes.append(self._writer.submit(self._file.append, "ids", np.concatenate(self._pending)))
            self._starts.append(self._starts[-1] + self._held)
        self._pending, self._held = [], 0

    def finish(self) -> None:
        """Write what is held, and wait for every slice to be written (a write's error is raised here)."""
        self._write()
        writes, self._writes = self._writes, []
        for write in writes:
            write.result()

    def __len__(self) -> int:
        return self._starts[-1] + self._held

    def _slices(self) -> Iterator[tuple[int, np.ndarray]]:
        for k, start in enumerate(self._starts[:-1]):
            yield start, self._file.read("ids", k)

    def among(self, features: np.ndarray, num_features: int) -> tuple[np.ndarray, np.ndarray]:
        """(positions, ids) of the ids that are among ``features``: a lookup table read a slice at a time."""
        wanted = np.zeros(num_features, dtype=bool)
        wanted[features] = True
        positions, ids = [np.empty(0, np.int64)], [np.empty(0, np.int32)]
        for start, chunk in self._slices():
            hit = np.flatnonzero(wanted[chunk])
            positions.append(start + hit)
            ids.append(chunk[hit])
        return np.concatenate(positions), np.concatenate(ids)

    def take(self, positions: np.ndarray) -> np.ndarray:
        """The ids at ``positions`` (ascending)."""
        out = np.empty(len(positions), np.int32)
        bounds = np.searchsorted(positions, self._starts)
        for k, (start, chunk) in enumerate(self._slices()):
            if bounds[k] < bounds[k + 1]:
                out[bounds[k]:bounds[k + 1]] = chunk[positions[bounds[k]:bounds[k + 1]] - start]
        return out

    def close(self) -> None:
        self._writer.shutdown(wait=True)
        self._file.close()


def run_in_memory(table: pa.Table, config: ZFilterConfig = ZFilterConfig()) -> int:
    """Algorithm 1 over an in-memory table in batches; the number of rows kept (no outputs written)."""
    label_totals = dict(sorted(rows_per_label(table["label"]).items()))
    zf = ZFilter(list(label_totals), config, label_totals)
    kept = 0
    for batch in rebatch(zf.interned_ahead(with_features(iter([table]), config.features)), config.batch_size):
        keep, _ = zf.filter(batch)
        kept += int(keep.sum())
    return kept
