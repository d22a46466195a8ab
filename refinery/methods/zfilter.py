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

import dataclasses
import functools
import json
import os
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import feather

from refinery.core import stats as zstats
from refinery.core.incremental_counts import IncrementalCounts
from refinery.core.features import NULL_FEATURE, FeatureConfig, row_feature_lists
from refinery.core.stats import rows_per_label
from refinery.core.verdict import Verdict, judge
from refinery.core.validation import OPEN_UNIT_INTERVAL, SEED, Allowed, at_least, one_of, setting, validate
from refinery.io.corpus import (
    Corpus,
    CorpusWriter,
    is_corpus,
    iter_input_batches,
    load,
)
from refinery.io.raw import rebatch
from refinery.io.readers import ReadOptions
from refinery.io.schema import Mapping
from refinery.io.location import join
from refinery.io.publishing import AtomicDir
from refinery.pipeline.engine import ParquetSource, stream_map
from refinery.pipeline.filter import verdict_headline
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage import Stage, StageInput, StageResult
from refinery.progress import progress
from refinery.report import figures
from refinery.report import format as fmt
from refinery.report import verdict as verdict_html
from refinery.report.page import Report, config_table, corpus_name, fields, figure, link, note, table, top_features


@dataclass
class ZFilterConfig:
    k: int = setting(20, at_least(1), "|B_Z(l)|: top-k biased features per label.")
    batch_size: int = setting(1000, at_least(1), "Rows per decision batch.")
    min_count: int = setting(10, at_least(1), "Rows a feature must be in (in Z) to be biased.")
    warmup: int = setting(0, at_least(0), "Rows Z must hold before any row is rejected.")
    settle: bool = setting(True, help="After the stream, reject the fewest earliest-admitted kept rows that bring "
                           "every feature of Z under the significance threshold (rows admitted before their shortcut "
                           "could be ranked); off: Algorithm 1 as written.")
    prior: str = setting("auto", one_of(*zstats.PRIORS), zstats.PRIOR_HELP + " auto looks at the input's labels.")
    alpha: float = setting(0.01, OPEN_UNIT_INTERVAL, "Family-wise level of the reports' significance threshold.")
    shuffle_seed: int | None = setting(None, SEED.or_none(), "Shuffle the stream with this seed (none: its own order).")
    features: FeatureConfig = field(default_factory=FeatureConfig)
    seed_corpus: tuple[str, ...] = setting((), help="A corpus Z starts as (conditional filtering; repeat for more), "
                                           "or a pipeline step's name.", multiple=True)

    def __post_init__(self):
        validate(self)

    def to_dict(self) -> dict:
        return {**asdict(self), "features": self.features.to_dict()}


def add_features(batch: pa.Table, config: FeatureConfig) -> pa.Table:
    """The batch with a ``features`` list column (row-wise: any split of the stream gives the same rows)."""
    return batch.append_column("features", row_feature_lists(batch, config))


def with_features(tables, config: FeatureConfig, engine: str = "local", batch_rows: int = 65_536
                  ) -> Iterator[pa.Table]:
    """``add_features`` over a stream of tables or a ``ParquetSource``, in stream order (on Ray: on workers)."""
    return stream_map(tables, add_features, engine, {"config": config}, batch_rows, stage="zfilter")


@dataclass
class ZFilterResult:
    kept: int
    rejected: int
    seed: int
    input_counts: IncrementalCounts
    kept_counts: IncrementalCounts
    rejected_by_label: dict
    kept_by_label: dict
    rejections_by_feature: dict
    input_rejected: int = 0  # rows the readers rejected, kept in kept/'s rejects
    prior: zstats.Prior = zstats.Prior("uniform")
    settled_out: int = 0   # of ``rejected``: rows taken back by ``ZFilter.settle`` after the stream
    seed_by_label: dict = field(default_factory=dict)   # of ``kept_by_label``: the seed's rows, kept as they are


STREAM_REASON = "hits B_Z(label): "


class DecidedBatches:
    """The stream's decided batches (rows, keep mask, hit features), spilled to a local temporary folder as
    Arrow files of about 65,536 rows, and read back in order once ``ZFilter.settle`` has decided."""

    def __init__(self, chunk_rows: int = 65_536):
        self.dir = tempfile.TemporaryDirectory(prefix="refinery-zfilter-")
        self.chunk_rows, self.files, self._held, self._rows = chunk_rows, [], [], 0

    def add(self, plain: pa.Table, keep: np.ndarray, reasons: list) -> None:
        self._held.append(plain.append_column("_keep", pa.array(keep)).append_column(
            "_hits", pa.array([h for _, h in reasons], pa.list_(pa.string()))))
        self._rows += plain.num_rows
        if self._rows >= self.chunk_rows:
            self._flush()

    def _flush(self) -> None:
        if self._held:
            path = os.path.join(self.dir.name, f"{len(self.files):06d}.arrow")
            feather.write_feather(pa.concat_tables(self._held, promote_options="permissive"), path,
                                  compression="lz4")
            self.files.append(path)
        self._held, self._rows = [], 0

    def read(self) -> Iterator[tuple[int, pa.Table, np.ndarray, list]]:
        """(stream position of the first row, rows, keep mask, [(reason, hit features)]) per spilled file."""
        self._flush()
        start = 0
        try:
            for path in self.files:
                t = feather.read_table(path)
                keep = t["_keep"].to_numpy(zero_copy_only=False).copy()
                reasons = [(STREAM_REASON, h) for h in t["_hits"].to_pylist()]
                yield start, t.drop_columns(["_keep", "_hits"]), keep, reasons
                start += t.num_rows
        finally:
            self.dir.cleanup()


class BiasedSet:
    """B_Z(l): the top-k features of each label by z*(x,l | Z) among features with n ≥ min_count.

    Kept up to date as Z grows, at a cost that follows the batch rather than the vocabulary.
    Under the uniform prior z*(x,l) = (p̂(l|x) − p0) / sqrt(p0(1 − p0)/n) (METHODS §1) depends
    only on x's own counts, so an update changes the scores of only the features it touched.
    Each label keeps a shortlist S_l and a bound θ_l such that z(x,l) < θ_l for every x outside
    S_l and z(x,l) ≥ θ_l inside it: rescored features join or leave S_l by θ_l, and the top-k of
    S_l is exact while S_l holds at least k features; when it does not, S_l is rebuilt from all
    candidates. The empirical prior moves p0 with Z's label shares, so every candidate is
    rescored at each update.
    """

    def __init__(self, Z: IncrementalCounts, k: int, min_count: int, prior: str, shortlist: int = 4096):
        self.Z, self.k, self.min_count, self.prior = Z, k, min_count, prior
        self.shortlist = max(shortlist, k)
        self.members: list[np.ndarray] | None = None  # S_l, ids per label; None until the first build
        self.scores: list[np.ndarray] = []
        self.bounds = np.full(len(Z.labels), -np.inf)

    def _z(self, ids: np.ndarray) -> np.ndarray:
        counts = self.Z.matrix[ids].astype(np.float64)
        n = np.maximum(counts.sum(axis=1), 1)[:, None]
        p0 = zstats.prior_vector(self.Z.labels, self.Z.label_totals, self.prior)
        return zstats.z_score(counts / n, n, p0[None, :])

    def _candidates(self, ids: np.ndarray | None = None) -> np.ndarray:
        """Of ``ids`` (default: every feature), those with n ≥ min_count."""
        counts = self.Z.matrix[: self.Z.num_features] if ids is None else self.Z.matrix[ids]
        eligible = np.flatnonzero(zstats.row_totals(counts) >= self.min_count)
        return eligible if ids is None else ids[eligible]

    def _cut(self, ids: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """The ``shortlist`` best of ``ids`` (all those tied with the last) and the bound below them."""
        if len(ids) <= self.shortlist or self.prior != "uniform":  # rescored in full at each update
            return ids, z, -np.inf
        theta = np.partition(z, -self.shortlist)[-self.shortlist]
        inside = z >= theta
        return ids[inside], z[inside], float(theta)

    def rebuild(self) -> None:
        ids = self._candidates()
        z = self._z(ids)
        self.members, self.scores = [], []
        for j in range(len(self.Z.labels)):
            m, s, self.bounds[j] = self._cut(ids, z[:, j])
            self.members.append(m)
            self.scores.append(s)

    def update(self, touched: np.ndarray) -> None:
        """Rescore the features whose counts changed (``touched``, distinct ids)."""
        if self.members is None or self.prior != "uniform":
            return self.rebuild()
        ids = self._candidates(touched)
        z = self._z(ids)
        for j in range(len(self.Z.labels)):
            old = ~np.isin(self.members[j], ids, assume_unique=True)
            enter = z[:, j] >= self.bounds[j]
            m = np.concatenate([self.members[j][old], ids[enter]])
            s = np.concatenate([self.scores[j][old], z[enter, j]])
            if len(m) < self.k:
                return self.rebuild()
            if len(m) > 2 * self.shortlist:
                m, s, theta = self._cut(m, s)
                self.bounds[j] = max(self.bounds[j], theta)
            self.members[j], self.scores[j] = m, s

    def cells(self) -> np.ndarray:
        """Sorted cells ``feature · C + label`` of B_Z: per label the k best, ties broken by name."""
        C = len(self.Z.labels)
        return np.sort(np.concatenate([self._top(s, m) * C + j
                                       for j, (m, s) in enumerate(zip(self.members, self.scores))]))

    def _top(self, zj: np.ndarray, ids: np.ndarray) -> np.ndarray:
        k = min(self.k, len(zj))
        if k == 0:
            return np.empty(0, dtype=np.int64)
        kth = np.partition(zj, -k)[-k]
        above = ids[zj > kth]
        tied_ids = ids[zj == kth]
        tied = tied_ids[np.argsort(self.Z.names(tied_ids).to_numpy(zero_copy_only=False), kind="stable")]
        return np.concatenate([above, tied[: k - len(above)]]).astype(np.int64)


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

    def settle(self, threshold: float, max_rounds: int = 100) -> dict[int, list[str]]:
        """Bring every feature of Z under ``threshold`` by taking back the fewest of its earliest-admitted rows.

        While some (x, l) has z*(x, l | Z) > threshold (n ≥ min_count; ``null``, the label prior, aside), the
        r earliest kept stream rows of label l that carry x leave Z, r the least for which z*(x, l) falls to the
        threshold or n(x) under min_count; cells are settled together and the round repeats on the new counts.
        Seed rows stay. Returns {stream position: the features that took the row back}.
        """
        if self.kept is None:
            return {}
        fids, row_of_pair, labels, positions = self.kept.arrays()
        C = len(self.Z.labels)
        alive = np.ones(len(positions), dtype=bool)
        taken: dict[int, list[str]] = {}
        for _ in range(max_rounds):
            cells, need = self._over(threshold)
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
                taken.setdefault(int(positions[row]), []).append(name)
            out = np.unique(r[chosen])
            alive[out] = False
            gone = np.isin(row_of_pair, out)
            self.Z.subtract(fids[gone], labels[row_of_pair[gone]], [self.Z.labels[j] for j in labels[out]])
        self._touched.append(np.unique(fids))
        return taken

    def _over(self, threshold: float) -> tuple[np.ndarray, np.ndarray]:
        """Cells ``feature · C + label`` of Z over ``threshold`` (sorted) and, for each, the rows of that label
        to take back: the least r ≥ 1 with z*((c − r)/(n − r)) ≤ threshold or n − r < min_count."""
        counts = self.Z.matrix[: self.Z.num_features]
        n = zstats.row_totals(counts)
        ids = np.flatnonzero(n >= self.config.min_count)
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
        return cells[order], need[order]


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


def _tag(table: pa.Table, stage: str) -> pa.Table:
    """Set ``source_stage`` (seed | filtered), replacing a value from an earlier filtering."""
    if "source_stage" in table.column_names:
        table = table.drop_columns(["source_stage"])
    return table.append_column("source_stage", pa.array([stage] * table.num_rows, pa.string()))


def _strip(table: pa.Table) -> pa.Table:
    return table.drop_columns([c for c in ("features",) if c in table.column_names])


def run(inputs, out: str, mapping: Mapping | None = None, opts: ReadOptions = ReadOptions(),
        config: ZFilterConfig = ZFilterConfig(), engine: str = "local", batches=None) -> dict:
    """Filter ``inputs`` (conditionally on ``config.seed_corpus``) into ``out/kept`` and ``out/rejected``; the
    seed's rows lead ``kept``. ``batches``: a callable giving the inputs' canonical batches when they are not
    read file by file (named splits, each row's ``split`` its own)."""
    seed_inputs = list(config.seed_corpus)
    seed_table = load(seed_inputs, mapping, opts)[0] if seed_inputs else None
    input_rejects: list[pa.Table] = []

    def rows():  # the input's rejects are set aside here and written with the kept rows' corpus
        for b in batches() if batches else (b for _, b in iter_input_batches(inputs, mapping, opts)):
            if b.rejects.num_rows:
                input_rejects.append(b.rejects)
            if b.rows.num_rows:
                yield b.rows

    whole = pa.concat_tables(list(rows()), promote_options="permissive") if config.shuffle_seed is not None else None
    label_totals = _label_counts(mapping, inputs, opts, seed_table, read_raw=config.prior == "auto", whole=whole)
    labels = list(label_totals)
    if whole is not None:
        order = np.random.default_rng(config.shuffle_seed).permutation(whole.num_rows)
        source = iter([whole.take(pa.array(order))])
    elif engine == "ray" and batches is None and all(is_corpus(u, opts.storage_options) for u in inputs):
        corpora = [Corpus.open(u, opts.storage_options) for u in inputs]  # workers read the shards
        source = ParquetSource(tuple(f for c in corpora for f in c.files), storage_options=opts.storage_options)
        input_rejects.extend(c.read_rejects() for c in corpora if c.manifest.get("rejected"))
    else:
        source = rows()
    zf = ZFilter(labels, config, label_totals)
    kept_by, rej_by, by_feature = {l: 0 for l in labels}, {l: 0 for l in labels}, {}
    cfg_dict = {"zfilter": config.to_dict(), "inputs": list(inputs)}
    writer = functools.partial(CorpusWriter, config=cfg_dict, storage_options=opts.storage_options,
                               inputs=[*inputs, *seed_inputs])
    with writer(join(out, "kept")) as kept_w, writer(join(out, "rejected")) as rej_w:
        seeded = 0
        if seed_table is not None and seed_table.num_rows:
            zf.seed(add_features(seed_table, config.features))
            kept_w.write(_tag(seed_table, "seed"))
            seeded = seed_table.num_rows
            for l, c in rows_per_label(seed_table["label"]).items():
                kept_by[l] += c
        def decided(plain: pa.Table, keep: np.ndarray, reasons: list) -> None:
            """Write a decided batch: kept rows to kept/, the others to rejected/ with their features and reason."""
            kept_w.write(_tag(plain.filter(pa.array(keep)), "filtered"))
            rej_idx = np.nonzero(~keep)[0]
            hit_lists = [sorted(reasons[i][1]) for i in rej_idx]
            rejected = plain.take(pa.array(rej_idx))
            rejected = rejected.append_column("biased_features", pa.array(hit_lists, pa.list_(pa.string())))
            rej_w.write(rejected.append_column("reason", pa.array(
                [reasons[i][0] + ", ".join(h) for i, h in zip(rej_idx, hit_lists)], pa.string())))
            for l, k in zip(plain["label"].to_pylist(), keep):
                (kept_by if k else rej_by)[l] += 1
            for h in hit_lists:
                for f in h:
                    by_feature[f] = by_feature.get(f, 0) + 1

        spill = DecidedBatches() if config.settle else None   # held until settle has had its say
        with progress(desc="zfilter", unit=" rows") as bar:
            for batch in rebatch(with_features(source, config.features, engine, opts.batch_rows), config.batch_size):
                keep, hits = zf.filter(batch)
                (spill.add if spill else decided)(_strip(batch), keep, [(STREAM_REASON, h) for h in hits])
                bar.update(batch.num_rows)
        if spill is not None:
            threshold = zf.threshold()
            taken = zf.settle(threshold)
            reason = f"over the threshold z* > {threshold:.2f} in the kept rows after the stream: "
            for start, plain, keep, reasons in spill.read():
                for i in np.flatnonzero(keep):
                    if start + i in taken:
                        keep[i], reasons[i] = False, (reason, taken[start + i])
                decided(plain, keep, reasons)
            settled_out = len(taken)
        else:
            settled_out = 0
        for rejects in input_rejects:
            kept_w.write(rejects=rejects)
        if not sum(kept_by.values()) + sum(rej_by.values()):
            kept_w.commit_all_rejected(inputs)   # the rejects stay in kept/, named by the error
        kept_m = kept_w.commit()
        rej_m = rej_w.commit()
    result = ZFilterResult(kept_m["rows"], rej_m["rows"], seeded, zf.seen, zf.Z, rej_by, kept_by,
                           dict(sorted(by_feature.items(), key=lambda kv: -kv[1])), kept_m["rejected"], zf.prior,
                           settled_out, rows_per_label(seed_table["label"]) if seeded else {})
    return write_report(result, out, config, [*inputs, *seed_inputs], opts.storage_options)


def _label_counts(mapping, inputs, opts, seed_table, read_raw: bool, whole: pa.Table | None = None) -> dict:
    """Rows per label of the seed and the inputs, over the declared label set, else the labels present:
    from the inputs already in memory (``whole``), a finished corpus's manifest, or a read of raw inputs
    that computes no ids. With a declared label set and not ``read_raw``, raw inputs are not read (their
    labels count 0)."""
    declared = mapping is not None and bool(mapping.label_set)
    counts = Counter(dict.fromkeys(mapping.label_set, 0) if declared else {})
    if seed_table is not None:
        counts.update(rows_per_label(seed_table["label"]))
    if whole is not None:
        counts.update(rows_per_label(whole["label"]))
        return dict(sorted(counts.items()))
    raw = []
    for url in inputs:
        if is_corpus(url, opts.storage_options):
            counts.update(Corpus.open(url, opts.storage_options).manifest["labels"])
        else:
            raw.append(url)
    unread = [] if declared and not read_raw else raw
    for _, b in iter_input_batches(unread, mapping, dataclasses.replace(opts, row_ids=False)):
        counts.update(rows_per_label(b.rows["label"]))
    return dict(sorted(counts.items()))


def _summary(stats: zstats.ZStats, config: ZFilterConfig, title: str) -> tuple[dict, str]:
    """Top-k and the z-plot of one audit."""
    return stats.top_k(config.k), figures.zplot(stats, 6, title)


def remedies(config: ZFilterConfig, seeded: bool, where: str = "OUT/kept") -> str:
    """What removes the features a z-filtering left over the threshold, with the option that applies."""
    if not config.settle:
        return ("drop --no-settle (settle: true): after the stream it takes back the fewest earliest-admitted rows "
                f"that bring these under the threshold; or raise --k (now {config.k}).")
    if seeded:
        return ("the seed's rows are kept as they are, so its own shortcuts stay: filter the seed corpus first "
                "(refinery compose --composition seqz).")
    return f"raise --k (now {config.k}), or run refinery zfilter on {where} again."


def write_report(result: ZFilterResult, out: str, config: ZFilterConfig, inputs=(),
                 storage_options: dict | None = None) -> dict:
    corpus = corpus_name(inputs, storage_options)
    before = result.input_counts.stats(result.prior.name, config.min_count, config.alpha)
    after = result.kept_counts.stats(result.prior.name, config.min_count, config.alpha)
    remedy = remedies(config, bool(result.seed), join(out, "kept"))
    verdict = judge(before, after, stage="zfilter", remedy_remaining=remedy, remedy_worsened=remedy,
                    prior=str(result.prior))
    top_before, plot_before = _summary(before, config, f"{corpus}: input")
    top_after, plot_after = _summary(after, config, f"{corpus}: kept rows")
    del before, after
    report = {
        "prior": str(result.prior), "threshold": round(verdict.threshold, 4), "verdict": verdict.to_dict(),
        "kept": result.kept, "rejected": result.rejected, "seed": result.seed, "settled_out": result.settled_out,
        "input": result.kept + result.rejected - result.seed, "input_rejected": result.input_rejected,
        "kept_by_label": result.kept_by_label, "rejected_by_label": result.rejected_by_label,
        "seed_by_label": {l: result.seed_by_label.get(l, 0) for l in result.kept_by_label},
        "max_z_before": {l: (v[0]["z"] if v else None) for l, v in top_before.items()},
        "max_z_after": {l: (v[0]["z"] if v else None) for l, v in top_after.items()},
        "top_rejecting_features": dict(list(result.rejections_by_feature.items())[:30]),
        "topk_before": top_before, "topk_after": top_after, "config": config.to_dict(),
    }
    with AtomicDir(join(out, "report"), storage_options) as d:
        d.write_text("report.json", json.dumps(report, indent=1))
        d.write_text("report.html", _html(report, verdict, plot_before, plot_after, corpus, list(inputs)))
        d.commit()
    return report


def _html(report: dict, verdict: Verdict, plot_before: str, plot_after: str, corpus: str, inputs: list) -> str:
    seeds = report["seed_by_label"]
    by_label = [{"label": l, **({"seed rows": seeds[l]} if report["seed"] else {}),
                 "kept": kept - seeds[l], "filtered out": report["rejected_by_label"][l],   # of the input's rows
                 "share kept": (kept - seeds[l]) / max(kept - seeds[l] + report["rejected_by_label"][l], 1),
                 "max z* before": report["max_z_before"].get(l), "max z* after": report["max_z_after"].get(l)}
                for l, kept in report["kept_by_label"].items()]
    rows = {"input rows": report["input"], "input rejects": report["input_rejected"]}
    if report["seed"]:
        rows["seed rows (kept as they are)"] = report["seed"]
    rows |= {"kept (seed rows included)" if report["seed"] else "kept": report["kept"],
             "filtered out": report["rejected"]}
    if report["settled_out"]:
        rows["of them, taken back after the stream (settle)"] = report["settled_out"]
    rows["prior p0"] = report["prior"]
    return (Report("z-filter: rows whose features leak the label, filtered out (Wu et al. 2022)", corpus, inputs)
            .section(verdict_html.HEADING, verdict_html.section(verdict))
            .section("Rows", fields(rows))
            .section("Per label", table(by_label, formats={"share kept": fmt.percent, "max z* before": fmt.z,
                                                            "max z* after": fmt.z}))
            .section("z-statistics of the input", figure(plot_before))
            .section("z-statistics of the kept rows", figure(plot_after, _after_caption(report)))
            .section("Features that caused most rows to be filtered out", table(
                [{"feature": f, "rows filtered out": n} for f, n in report["top_rejecting_features"].items()]))
            .section("Top features of the input", top_features(report["topk_before"], report["threshold"]))
            .section("Top features of the kept rows", top_features(report["topk_after"], report["threshold"]))
            .section("Configuration", config_table(report["config"]))
            .html())


def _after_caption(report: dict) -> str:
    """What the kept rows' statistics show, as the figures have it."""
    before, after = report["max_z_before"], report["max_z_after"]
    stuck = [l for l, z in after.items() if z is not None and before.get(l) is not None and z >= before[l] - 0.01]
    if not stuck:
        return "The same statistics over the rows the filter kept: every label's largest z* fell."
    return (f"The same statistics over the rows the filter kept. The largest z* of {', '.join(stuck)} did not fall. "
            "z-filtering reads the rows in order and decides each batch on the counts so far, so an input sorted by "
            "class or template keeps whole groups before their bias shows: shuffle_seed reads it in a seeded "
            "random order.")


COMPOSITIONS = ("zaug", "parz", "seqz")
PARTS = {"original": "original (D0)", "generated": "generated (G)", "together": "together (D0 ∪ G)"}


def compose(kind: str, original, generated, out: str, mapping: Mapping | None = None,
            opts: ReadOptions = ReadOptions(), config: ZFilterConfig = ZFilterConfig(), engine: str = "local") -> dict:
    """Wu et al. §4.2: ``zaug`` = D0 ∪ Z(G | D0); ``parz`` = Z(D0) ∪ Z(G); ``seqz`` = Z(D0) ∪ Z(G | Z(D0)).

    Each filtering runs under ``out/stages`` with its own report (``z_original``, ``z_generated``; Z-Aug reads
    D0 unfiltered into ``stages/original``). The composition is then written whole: ``out/kept`` (the rows kept,
    with the input rejects of D0 and G), ``out/rejected`` (every row filtered out, of D0 and of G), each row's
    ``source`` set to ``original`` or ``generated`` where it has none, and ``out/report``: each part and the two
    together, counted and audited before and after with one prior (``compose_report``). The report's ``input``,
    ``kept``, ``rejected`` and ``input_rejected`` are the output folders' rows.
    """
    if kind not in COMPOSITIONS:
        raise ValueError(f"composition must be {', '.join(COMPOSITIONS)}, not {kind!r}")
    from refinery.io.corpus import convert

    stages = join(out, "stages")
    filtering = functools.partial(dataclasses.replace, config)
    if kind == "zaug":
        d0_kept, d0_rejected = join(stages, "original"), None
        convert(list(original), d0_kept, mapping, opts, config={"compose": kind, "original": "D0 as it is"})
    else:
        run(original, join(stages, "z_original"), mapping, opts, filtering(seed_corpus=()), engine=engine)
        d0_kept, d0_rejected = join(stages, "z_original", "kept"), join(stages, "z_original", "rejected")
    run(generated, join(stages, "z_generated"), mapping, opts,
        filtering(seed_corpus=() if kind == "parz" else (d0_kept,)), engine=engine)
    g_kept = join(stages, "z_generated", "kept")
    kept = [(d0_kept, "original"), (g_kept, "generated")] if kind == "parz" else [(g_kept, "generated")]
    rejected = [(d0_rejected, "original")] * (d0_rejected is not None) + [(join(stages, "z_generated", "rejected"),
                                                                         "generated")]
    audit, input_rejects = _write_composition(kept, rejected, [(d0_kept, "original"), (g_kept, "generated")], out,
                                              config, opts, {"compose": kind, "zfilter": config.to_dict()},
                                              [*original, *generated])
    return compose_report(kind, audit, input_rejects, out, config, [*original, *generated], opts.storage_options)


class PartCounts:
    """Feature–label counts of a composition's rows read (``input``) and kept (``kept``), per part (original,
    generated) and together, on one vocabulary: every part is audited on the same features."""

    def __init__(self, labels: list, features: FeatureConfig):
        self.features = features
        first = IncrementalCounts(labels)
        self.counts = {(side, part): IncrementalCounts(labels, vocabulary=first)
                       for side in ("input", "kept") for part in PARTS}

    def add(self, table: pa.Table, parts: np.ndarray, kept: bool) -> None:
        """Count ``table``'s rows (``parts``: each row's part) as read and, when ``kept``, as kept."""
        first = self.counts["input", "together"]
        feats = row_feature_lists(table, self.features)
        rows = pc.list_parent_indices(feats).to_numpy()
        fids = first.ids(pc.list_flatten(feats))
        labels = table["label"].to_pylist()
        lab = np.array([first.label_index[l] for l in labels], dtype=np.int64)
        for part in ("original", "generated"):
            mine = parts == part
            pairs = mine[rows]
            row_labels = [l for l, m in zip(labels, mine) if m]
            for side in ("input", "kept") if kept else ("input",):
                for counted in (part, "together"):
                    self.counts[side, counted].add(fids[pairs], lab[rows[pairs]], row_labels)

    def stats(self, side: str, part: str, prior: str, config: ZFilterConfig) -> zstats.ZStats:
        return self.counts[side, part].stats(prior, config.min_count, config.alpha)


def _write_composition(kept: list, rejected: list, reject_sources: list, out: str, config: ZFilterConfig,
                       opts: ReadOptions, cfg: dict, inputs: list) -> tuple[PartCounts, dict]:
    """``out/kept`` and ``out/rejected`` from the filterings' folders ([(corpus, part)]; a row a filtering kept
    as its seed (``source_stage`` seed) is D0's), ``source`` set where it has none and ``source_stage`` left
    out, and the input rejects of ``reject_sources``' corpora with the kept rows. Returns the rows counted per
    part and the input rejects per part."""
    folders = [p for p, _ in kept + rejected]
    labels = sorted({l for p in folders for l in Corpus.open(p, opts.storage_options).manifest["labels"]})
    audit = PartCounts(labels, config.features)
    input_rejects = {"original": 0, "generated": 0}
    writer = functools.partial(CorpusWriter, config=cfg, storage_options=opts.storage_options, inputs=inputs)
    with writer(join(out, "kept")) as kept_w, writer(join(out, "rejected")) as rej_w:
        for sources, w, is_kept in ((kept, kept_w, True), (rejected, rej_w, False)):
            for path, part in sources:
                for table in Corpus.open(path, opts.storage_options).iter_tables(batch_rows=opts.batch_rows):
                    parts = np.full(table.num_rows, part, dtype=object)
                    if "source_stage" in table.column_names:
                        parts[np.asarray(table["source_stage"].to_pylist(), dtype=object) == "seed"] = "original"
                        table = table.drop_columns(["source_stage"])
                    audit.add(table, parts, is_kept)
                    w.write(_with_source(table, parts))
        for path, part in reject_sources:
            corpus = Corpus.open(path, opts.storage_options)
            if corpus.manifest.get("rejected"):
                rejects = corpus.read_rejects()
                input_rejects[part] += rejects.num_rows
                kept_w.write(rejects=rejects)
        kept_w.commit()
        rej_w.commit()
    return audit, input_rejects


def _with_source(table: pa.Table, parts: np.ndarray) -> pa.Table:
    """``source`` = the row's part where the row has no source of its own (``original``, ``generated``)."""
    part = pa.array(parts.tolist(), pa.string())
    if "source" not in table.column_names:
        return table.append_column("source", part)
    i = table.column_names.index("source")
    return table.set_column(i, "source", pc.coalesce(table["source"].cast(pa.string()), part))


def compose_report(kind: str, audit: PartCounts, input_rejects: dict, out: str, config: ZFilterConfig,
                   inputs: list, storage_options: dict | None = None) -> dict:
    """Each part of a composition and the two together: rows read, kept and filtered out per label, and a
    verdict (``core.verdict``) of its rows read against its rows kept, all under one prior (``auto``: from the
    labels of D0 and G together); written to ``out/report`` (report.json, report.html)."""
    prior = zstats.choose_prior(config.prior, audit.counts["input", "together"].label_totals)
    remedy = remedies(config, False)   # OUT/kept: the same words for the verb and a pipeline step
    # A part filtered on its own, and a composition of filtered parts, promise every label under the threshold;
    # Z-Aug's composition (D0 whole) only that nothing got worse. D0 kept whole (Z-Aug) and G filtered against
    # the counts of D0 and G together (Seq-Z, Z-Aug) promise nothing of their own (None): such G rows lean
    # against D0's shortcuts on purpose. Every part is still counted and audited.
    promise = {"original": True if kind != "zaug" else None, "generated": True if kind == "parz" else None,
               "together": kind != "zaug"}
    verdicts, parts, summaries, notes = {}, {}, {}, []
    for part in PARTS:
        before = audit.stats("input", part, prior.name, config)
        after = audit.stats("kept", part, prior.name, config)
        verdicts[part] = judge(before, after, stage="compose", under_threshold=bool(promise[part]),
                               remedy_remaining=remedy, remedy_worsened=remedy, prior=str(prior))
        if promise[part] is None:
            notes.append(_unjudged(kind, part, verdicts[part]))
        if kind == "zaug" and part == "together":
            verdicts[part].notes.append("Z-Aug keeps D0 as it is, shortcuts included; --composition seqz filters "
                                        "D0 first.")
        read = audit.counts["input", part].label_totals
        kept_by = audit.counts["kept", part].label_totals
        rejects = sum(input_rejects.values()) if part == "together" else input_rejects[part]
        parts[part] = {"input": sum(read.values()), "input_rejected": rejects, "kept": sum(kept_by.values()),
                       "rejected": sum(read.values()) - sum(kept_by.values()), "kept_by_label": dict(kept_by),
                       "rejected_by_label": {l: read[l] - kept_by[l] for l in read}}
        if part == "together":
            summaries = {"before": _summary(before, config, f"{corpus_name(inputs, storage_options)}: D0 ∪ G"),
                         "after": _summary(after, config, "kept rows")}
        del before, after
    together = parts["together"]
    report = {"kind": kind, "input": together["input"], "seed": 0, "kept": together["kept"],
              "rejected": together["rejected"], "input_rejected": together["input_rejected"], "prior": str(prior),
              "threshold": round(verdicts["together"].threshold, 4), "parts": parts,
              "verdicts": {PARTS[p]: v.to_dict() for p, v in verdicts.items() if promise[p] is not None},
              "notes": notes,
              "max_z_before": {l: m.before for l, m in verdicts["together"].max_z.items()},
              "max_z_after": {l: m.after for l, m in verdicts["together"].max_z.items()},
              "topk_before": summaries["before"][0], "topk_after": summaries["after"][0],
              "stages": {name: f"stages/{name}/report/report.html" for name in ("z_original", "z_generated")
                         if kind != "zaug" or name == "z_generated"},
              "config": config.to_dict()}
    with AtomicDir(join(out, "report"), storage_options) as d:
        d.write_text("report.json", json.dumps(report, indent=1))
        d.write_text("report.html", _compose_html(report, verdicts, summaries["before"][1], summaries["after"][1],
                                                  corpus_name(inputs, storage_options), inputs))
        d.commit()
    return report


def _unjudged(kind: str, part: str, verdict: Verdict) -> str:
    """Why a part of the composition has no verdict of its own, with what its rows alone show."""
    if part == "original":
        return f"{PARTS[part]}: kept as it is (Z-Aug), so no verdict of its own."
    over = sorted((c for cs in verdict.remaining.values() for c in cs), key=lambda c: -c.z_after)
    shown = "; ".join(f"{c.feature} ({c.label}) z* {c.z_after:.2f}" for c in over[:3])
    return (f"{PARTS[part]}: filtered against the counts of {'D0' if kind == 'zaug' else 'Z(D0)'} and G together, "
            "not on its own, so its rows alone may lean against D0's shortcuts on purpose"
            + (f" ({sum(verdict.remaining_total.values()):,} feature(s) over the threshold {verdict.threshold:.2f}: "
               f"{shown})" if over else "; none of their features is over the threshold")
            + "; the verdict on D0 ∪ G is the one that holds them to it.")


def _compose_html(report: dict, verdicts: dict, plot_before: str, plot_after: str, corpus: str, inputs: list) -> str:
    parts = report["parts"]
    rows = [{"part": PARTS[p], "rows read": v["input"], "input rejects": v["input_rejected"], "kept": v["kept"],
             "filtered out": v["rejected"], "share kept": v["kept"] / max(v["input"], 1)} for p, v in parts.items()]
    by_label = [{"label": l, "part": PARTS[p], "kept": v["kept_by_label"][l], "filtered out": v["rejected_by_label"][l],
                 "share kept": v["kept_by_label"][l] / max(v["kept_by_label"][l] + v["rejected_by_label"][l], 1),
                 "max z* before": verdicts[p].max_z[l].before, "max z* after": verdicts[p].max_z[l].after}
                for l in parts["together"]["kept_by_label"] for p, v in parts.items()]
    page = Report(f"compose ({report['kind']}): original and generated rows, z-filtered (Wu et al. 2022 §4.2)",
                  corpus, inputs)
    page.section("Rows", table(rows, formats={"share kept": fmt.percent}),
                 note(f"Every row read is kept or filtered out: kept/ holds {report['kept']:,} rows, rejected/ "
                      f"{report['rejected']:,}; each row's source column says its part. prior p0: {report['prior']}."),
                 *(note(n) for n in report["notes"]))
    for p, v in verdicts.items():
        if PARTS[p] in report["verdicts"]:
            page.section(f"Verdict: {PARTS[p]}", verdict_html.section(v))
    page.section("Per label", table(by_label, formats={"share kept": fmt.percent, "max z* before": fmt.z,
                                                       "max z* after": fmt.z}))
    page.section("z-statistics of D0 ∪ G", figure(plot_before))
    page.section("z-statistics of the kept rows", figure(plot_after))
    page.section("Top features of D0 ∪ G", top_features(report["topk_before"], report["threshold"]))
    page.section("Top features of the kept rows", top_features(report["topk_after"], report["threshold"]))
    page.section("Each filtering", note("Each filtering's own report (its input against the corpus it kept; Z "
                                        "includes the seed's rows): ")
                 + "".join(f"<p>{link('../' + path, path)}</p>" for path in report["stages"].values()))
    return page.section("Configuration", config_table(report["config"])).html()


def run_in_memory(table: pa.Table, config: ZFilterConfig = ZFilterConfig()) -> int:
    """Algorithm 1 over an in-memory table in batches; the number of rows kept (no outputs written)."""
    label_totals = dict(sorted(rows_per_label(table["label"]).items()))
    zf = ZFilter(list(label_totals), config, label_totals)
    kept = 0
    for batch in rebatch(with_features(iter([table]), config.features), config.batch_size):
        keep, _ = zf.filter(batch)
        kept += int(keep.sum())
    return kept


def accounting(r: dict) -> tuple[int, dict]:
    """(rows in, where they went) of a z-filter or composition report: seed rows lead ``kept``."""
    return r["input"] + r["seed"] + r["input_rejected"], {
        "kept": r["kept"], "filtered out": r["rejected"], "input rejects": r["input_rejected"]}


def _lines(r: dict) -> tuple:
    """The terminal summary of a z-filter or composition report: the rows (a composition's per part), then each
    verdict."""
    settled = f" ({r['settled_out']:,} of them taken back after the stream)" if r.get("settled_out") else ""
    verdicts = {"": r["verdict"]} if "verdict" in r else {f"{part}: ": v for part, v in r["verdicts"].items()}
    rows = ([f"{PARTS[p]}: {v['input']:,} rows read, kept {v['kept']:,} ({fmt.percent(v['kept'] / max(v['input'], 1))}),"
             f" filtered out {v['rejected']:,}, input rejects {v['input_rejected']:,}" for p, v in r["parts"].items()]
            if "parts" in r else [])
    head = f"prior {r['prior']}" if rows else f"kept {r['kept']:,}, rejected {r['rejected']:,}{settled}; prior {r['prior']}"
    return (*rows, head,
            *(line for part, v in verdicts.items()
              for line in (part + v["line"], *(f"  {w}" for w in v["warnings"]),
                           *(f"  note: {n}" for n in v.get("notes", [])))),
            *(f"note: {n}" for n in r.get("notes", [])))


class ZFilterStage(Stage):
    """z-filtering (Wu et al. 2022, Algorithm 1): keep the rows that carry no top-k biased feature.

    Writes ``kept/`` (with the input's rejects), ``rejected/`` (with the features each row hit) and ``report/``.
    """

    name, Config = "zfilter", ZFilterConfig
    needs = ("id", "text_a", "label")
    adds = ("source_stage",)
    references = ("seed_corpus",)

    def run(self, source: StageInput, out: StageOutput) -> StageResult:
        config = replace(self.config, features=self.config.features.named(source.field_names, source.single_text))
        r = run(source.paths, out.folder, source.mapping, source.opts, config, engine=source.engine,
                batches=source.iter_batches if source.named else None)
        seeded = f" ({r['seed']:,} seed rows)" if r["seed"] else ""
        return StageResult(*accounting(r), r, f"kept {r['kept']:,}{seeded}, rejected {r['rejected']:,}; "
                           f"{verdict_headline(r['verdict'])}", _lines(r))


@dataclass
class ComposeConfig:
    composition: str = setting("seqz", one_of(*COMPOSITIONS), "Wu et al. §4.2: Z-Aug, Par-Z or Seq-Z.")
    original: tuple[str, ...] = setting(("input",), Allowed(lambda v: len(v) > 0, "a non-empty list"),
                                        "D0: a corpus (repeat for more), or a pipeline step's name.", multiple=True)
    zfilter: ZFilterConfig = field(default_factory=ZFilterConfig)

    def __post_init__(self):
        validate(self)


class ComposeStage(Stage):
    """z-filtered composition of original rows D0 (--original) and generated rows G (the input; Wu et al. §4.2).

    Writes ``kept/`` (each row's ``source``: original or generated, where it had none), ``rejected/``,
    ``report/`` (each part and the two together) and each filtering under ``stages/``.
    """

    name, Config = "compose", ComposeConfig
    version = 2   # kept/ and rejected/ hold the whole composition, rows carry source, report/ per part
    needs = ("id", "text_a", "label")
    adds = ("source",)
    references = ("original",)

    def run(self, source: StageInput, out: StageOutput) -> StageResult:
        c = self.config
        zconfig = replace(c.zfilter, features=c.zfilter.features.named(source.field_names, source.single_text))
        r = compose(c.composition, list(c.original), source.paths, out.folder, source.mapping, source.opts, zconfig,
                    source.engine)
        return StageResult(*accounting(r), r, f"{c.composition}: kept {r['kept']:,} of D0 and G, "
                                              f"rejected {r['rejected']:,}", _lines(r))
