"""Weighted feature–label counts (``WeightedCounts``): the audit of a corpus whose rows carry weights.

A row of weight w adds w, not 1, to count(x, l) of each feature x it contains (once per row, as the audit
counts presence) and to its label's total, so that

    p̂_w(l|x) = Σ_{rows of x with label l} w / Σ_{rows of x} w,     n_w(x) = Σ_{rows of x} w,

and z* is computed on these weighted n and counts (``stats.from_matrix`` takes the float matrix): what a model
trained on rows drawn ∝ w (Zhang et al. 2019's leakage-neutral training) sees. Several weightings are counted
in one pass (``add(table, w1, w2, …)``; ``None``: every row weighs 1, the plain audit), so an input and its
re-weighted output are compared on exactly the same features.

Features are the audit's: n-grams of each text field through the audit's compiled tokenizer (the same tokens,
stopword rule and field names), the ``null`` feature, and the other row-level families through
``features.extract``. The hypothesis-only probe (``hypo-only``) needs a model fit and is not counted here.
Cost: the tokenizer's, plus a sort of each batch's (n-gram, row) pairs to count each once per row (a few
seconds per million rows).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core import stats as zstats
from refinery.core.feature_counts import _FieldCounts
from refinery.core.features import NULL_FEATURE, FeatureConfig, extract, text_fields
from refinery.core.verdict import Verdict, judge

COMPACT_KEYS = 4_000_000   # per-batch partial sums held per n-gram table before they are merged
UNCOUNTED = ("hypo-only",)  # families a weighted audit leaves out


class _WeightedTable:
    """Σ w per (int64 key, label × weighting) of one n-gram table, from per-batch partial sums merged lazily."""

    def __init__(self, columns: int):
        self.columns = columns
        self.parts: list[tuple[np.ndarray, np.ndarray]] = []
        self.held = 0

    def add(self, keys: np.ndarray, rows: np.ndarray, labels: np.ndarray, weights: np.ndarray, n_labels: int):
        """Count each (key, row) once: its row's weight(s) go to (key, the row's label)."""
        if not len(keys):
            return
        order = np.argsort(keys, kind="stable")   # tokens come in row order: a key's rows stay ascending
        keys, rows = keys[order], rows[order]
        new_key = np.concatenate([[True], keys[1:] != keys[:-1]])
        first = new_key | np.concatenate([[True], rows[1:] != rows[:-1]])   # a (key, row) pair's first token
        distinct = keys[new_key]
        index, row = (np.cumsum(new_key) - 1)[first], rows[first]
        cells = index * n_labels + labels[row]
        sums = np.empty((len(distinct), self.columns))
        for s in range(weights.shape[1]):
            sums[:, s * n_labels:(s + 1) * n_labels] = np.bincount(
                cells, weights=weights[row, s], minlength=len(distinct) * n_labels).reshape(-1, n_labels)
        self.parts.append((distinct, sums))
        self.held += len(distinct)
        if self.held > COMPACT_KEYS and len(self.parts) > 1:
            self.compact()

    def compact(self) -> tuple[np.ndarray, np.ndarray]:
        """(distinct keys, their sums), the parts merged into one."""
        if len(self.parts) > 1:
            keys = np.concatenate([k for k, _ in self.parts])
            distinct, index = np.unique(keys, return_inverse=True)
            sums = np.zeros((len(distinct), self.columns))
            np.add.at(sums, index, np.concatenate([s for _, s in self.parts]))
            self.parts = [(distinct, sums)]
            self.held = len(distinct)
        return self.parts[0] if self.parts else (np.empty(0, np.int64), np.zeros((0, self.columns)))


class WeightedCounts:
    """Weighted presence counts of the audit's features × ``labels`` for ``weightings`` weightings at once.

    ``add(table, *weights)``: one weight array per weighting (``None``: all 1) for the batch's rows.
    ``stats(i, p0, min_count, alpha)``: the ``ZStats`` of weighting i. ``label_totals(i)``: Σ w per label.
    """

    def __init__(self, labels: list, config: FeatureConfig, weightings: int = 1):
        self.labels = list(labels)
        self.config = config
        self.weightings = weightings
        self.fields: dict[str, _FieldCounts] | None = None
        self.tables: dict[tuple[str, int], _WeightedTable] = {}
        C = len(self.labels)
        self.row_families = tuple(f for f in config.families
                                  if f not in ("unigram", "bigram", "null", *UNCOUNTED))
        self.row_features: dict[str, np.ndarray] = {}        # other row-level features: sums per label × weighting
        self.totals = np.zeros(C * weightings)
        self.rows = 0

    @property
    def left_out(self) -> tuple:
        """The configured families this weighted audit does not count."""
        return tuple(f for f in self.config.families if f in UNCOUNTED)

    def add(self, table: pa.Table, *weights) -> "WeightedCounts":
        if len(weights) != self.weightings:
            raise ValueError(f"give {self.weightings} weight arrays (None: all 1), got {len(weights)}")
        n, C = table.num_rows, len(self.labels)
        w = np.column_stack([np.ones(n) if x is None else np.asarray(x, np.float64) for x in weights])
        labels = pc.index_in(table["label"], value_set=pa.array(self.labels, pa.string()))
        if labels.null_count:
            unknown = sorted(set(table["label"].to_pylist()) - set(self.labels))
            raise ValueError(f"labels {unknown} are not among the audit's labels {self.labels}")
        labels = labels.to_numpy(zero_copy_only=False).astype(np.int64)
        per_label = np.stack([np.bincount(labels, weights=w[:, s], minlength=C) for s in range(self.weightings)])
        self.totals += per_label.reshape(-1)
        if self.fields is None:
            self.fields = {col: _FieldCounts(name, self.config) for col, name in text_fields(table, self.config)
                           if any(f in self.config.families for f in ("unigram", "bigram"))}
        for col, field in self.fields.items():
            ids, parents = field.tokenize(table[col])
            parents = parents.astype(np.int64)
            for order in field.orders:
                if order == 1:
                    keys, rows = ids.astype(np.int64), parents
                else:
                    same = parents[1:] == parents[:-1]
                    keys = (ids[:-1][same].astype(np.int64) << 32) | ids[1:][same].astype(np.int64)
                    rows = parents[:-1][same]
                table_ = self.tables.setdefault((col, order), _WeightedTable(C * self.weightings))
                table_.add(keys, rows, labels, w, C)
        if self.row_families:
            long = extract(table, FeatureConfig(self.row_families, self.config.tokenizer, self.config.field_names,
                                                self.config.single_field_name))
            codes = pc.dictionary_encode(long["feature"].combine_chunks()) if long.num_rows else None
            if codes is not None:
                codes = codes.combine_chunks() if isinstance(codes, pa.ChunkedArray) else codes
                index, row = codes.indices.to_numpy(zero_copy_only=False), long["row"].to_numpy()
                for i, name in enumerate(codes.dictionary.to_pylist()):
                    mine = row[index == i]
                    sums = self.row_features.setdefault(name, np.zeros(C * self.weightings))
                    for s in range(self.weightings):
                        sums[s * C:(s + 1) * C] += np.bincount(labels[mine], weights=w[mine, s], minlength=C)
        if "null" in self.config.families:
            sums = self.row_features.setdefault(NULL_FEATURE, np.zeros(C * self.weightings))
            sums += per_label.reshape(-1)
        self.rows += n
        return self

    def label_totals(self, weighting: int = 0) -> dict:
        """Σ w per label under ``weighting``."""
        C = len(self.labels)
        return dict(zip(self.labels, self.totals[weighting * C:(weighting + 1) * C].tolist()))

    def matrix(self, weighting: int = 0) -> tuple[pa.Array, np.ndarray]:
        """(feature names, F×C weighted counts) of ``weighting``."""
        C = len(self.labels)
        cols = slice(weighting * C, (weighting + 1) * C)
        names, blocks = [], []
        for (col, order), table in self.tables.items():
            keys, sums = table.compact()
            first, second = (keys, np.full(len(keys), -1)) if order == 1 else (keys >> 32, keys & 0xFFFFFFFF)
            names.append(self.fields[col].vocab.grams(first, second, self.fields[col].suffix))
            blocks.append(sums[:, cols])
        if self.row_features:
            names.append(pa.array(list(self.row_features), pa.string()))
            blocks.append(np.stack([v[cols] for v in self.row_features.values()]))
        if not names:
            return pa.array([], pa.string()), np.zeros((0, C))
        names = pa.concat_arrays([n.cast(pa.string()) for n in names])
        return names, np.concatenate(blocks)

    def stats(self, weighting: int, p0: np.ndarray, min_count: int = 10, alpha: float = 0.01) -> zstats.ZStats:
        """z-statistics of ``weighting`` on its weighted n and counts, with the given p0 (one per label)."""
        names, matrix = self.matrix(weighting)
        return zstats.from_matrix(names, self.labels, matrix, np.asarray(p0, np.float64), min_count, alpha)


WEIGHTED_NOTE = ("counts are sums of weights: a row of weight w counts as w rows, as a model trained on rows drawn "
                 "∝ w sees it")


def judge_weightings(counts: WeightedCounts, *, stage: str, before: int = 0, after: int = 1, prior: str = "auto",
                     min_count: int = 10, alpha: float = 0.01, notes: tuple = (), **options) -> Verdict:
    """The verdict (``core.verdict.judge``) on weighting ``after`` against weighting ``before`` of one pass:
    both audited with p0 by the ``prior`` rule on ``before``'s label totals, the same ``min_count`` and
    ``alpha``; ``options`` go to ``judge`` (``under_threshold``, the remedies)."""
    totals = counts.label_totals(before)
    chosen = zstats.choose_prior(prior, totals)
    p0 = zstats.prior_vector(counts.labels, totals, chosen.name)
    verdict = judge(counts.stats(before, p0, min_count, alpha), counts.stats(after, p0, min_count, alpha),
                    stage=stage, prior=str(chosen), **options)
    verdict.notes += list(notes) + [f"not counted here: the {f} feature family (it needs a model fit)"
                                    for f in counts.left_out]
    return verdict
