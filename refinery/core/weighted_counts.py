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

from refinery.core import stats as zstats
from refinery.core.feature_counts import _FieldCounts
from refinery.core.features import NULL_FEATURE, FeatureConfig, dictionary_ids, extract, text_fields
from refinery.core.verdict import Verdict, judge

COMPACT_KEYS = 4_000_000   # per-batch partial sums held per n-gram table before they are merged
UNCOUNTED = ("hypo-only",)  # families a weighted audit leaves out


class _WeightedTable:
    """Σ w per (int64 key, label, weighting) of one n-gram table, from per-batch partial sums merged lazily.

    Sums are label-major (column ``label id × weightings + weighting``), so a label first seen later only adds
    columns at the end: earlier parts are padded with zeros."""

    def __init__(self, weightings: int):
        self.weightings = weightings
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
        S = self.weightings
        sums = np.empty((len(distinct), n_labels * S))
        for s in range(S):
            sums[:, s::S] = np.bincount(cells, weights=weights[row, s],
                                        minlength=len(distinct) * n_labels).reshape(-1, n_labels)
        self.parts.append((distinct, sums))
        self.held += len(distinct)
        if self.held > COMPACT_KEYS and len(self.parts) > 1:
            self.compact(n_labels * S)

    def compact(self, columns: int) -> tuple[np.ndarray, np.ndarray]:
        """(distinct keys, their sums over ``columns`` columns), the parts merged into one."""
        parts = [(k, _padded(v, columns)) for k, v in self.parts]
        if len(parts) > 1:
            distinct, index = np.unique(np.concatenate([k for k, _ in parts]), return_inverse=True)
            sums = np.zeros((len(distinct), columns))
            np.add.at(sums, index, np.concatenate([v for _, v in parts]))
            parts = [(distinct, sums)]
        self.parts, self.held = parts, sum(len(k) for k, _ in parts)
        return parts[0] if parts else (np.empty(0, np.int64), np.zeros((0, columns)))


def _padded(sums: np.ndarray, columns: int) -> np.ndarray:
    """``sums`` with zero columns added up to ``columns`` (labels first seen after it was counted)."""
    extra = columns - sums.shape[-1]
    return sums if not extra else np.concatenate([sums, np.zeros((*sums.shape[:-1], extra))], axis=-1)


class WeightedCounts:
    """Weighted presence counts of the audit's features × label for ``weightings`` weightings at once.

    ``labels``: the labels, in order (more are added as rows bring them). ``add(table, *weights)``: one weight
    array per weighting (``None``: all 1) for the batch's rows. ``stats(i, p0, min_count, alpha)``: the
    ``ZStats`` of weighting i (labels sorted). ``label_totals(i)``: Σ w per label.
    """

    def __init__(self, labels: list | None, config: FeatureConfig, weightings: int = 1):
        self.label_index: dict[str, int] = {}
        self.labels: list[str] = []
        dictionary_ids(pa.array(list(labels or ()), pa.string()), self.label_index, self.labels)
        self.config = config
        self.weightings = weightings
        self.fields: dict[str, _FieldCounts] | None = None
        self.tables: dict[tuple[str, int], _WeightedTable] = {}
        self.row_families = tuple(f for f in config.families
                                  if f not in ("unigram", "bigram", "null", *UNCOUNTED))
        self.row_features: dict[str, np.ndarray] = {}        # row-level features: sums per label × weighting
        self.totals = np.zeros(0)
        self.rows = 0

    @property
    def left_out(self) -> tuple:
        """The configured families this weighted audit does not count."""
        return tuple(f for f in self.config.families if f in UNCOUNTED)

    def add(self, table: pa.Table, *weights) -> "WeightedCounts":
        if len(weights) != self.weightings:
            raise ValueError(f"give {self.weightings} weight arrays (None: all 1), got {len(weights)}")
        n, S = table.num_rows, self.weightings
        if not n:
            return self
        w = np.column_stack([np.ones(n) if x is None else np.asarray(x, np.float64) for x in weights])
        labels = dictionary_ids(table["label"], self.label_index, self.labels)
        C = len(self.labels)
        per_label = np.empty(C * S)   # label-major, as every sum here
        for s in range(S):
            per_label[s::S] = np.bincount(labels, weights=w[:, s], minlength=C)
        self.totals = _padded(self.totals, C * S) + per_label
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
                self.tables.setdefault((col, order), _WeightedTable(S)).add(keys, rows, labels, w, C)
        if self.row_families:
            long = extract(table, FeatureConfig(self.row_families, self.config.tokenizer, self.config.field_names,
                                                self.config.single_field_name))
            if long.num_rows:
                codes = long["feature"].combine_chunks()
                index, row = codes.indices.to_numpy(zero_copy_only=False), long["row"].to_numpy()
                for i, name in enumerate(codes.dictionary.to_pylist()):
                    mine = row[index == i]
                    sums = np.empty(C * S)
                    for s in range(S):
                        sums[s::S] = np.bincount(labels[mine], weights=w[mine, s], minlength=C)
                    self.row_features[name] = _padded(self.row_features.get(name, np.zeros(0)), C * S) + sums
        if "null" in self.config.families:
            self.row_features[NULL_FEATURE] = _padded(self.row_features.get(NULL_FEATURE, np.zeros(0)),
                                                      C * S) + per_label
        self.rows += n
        return self

    def label_totals(self, weighting: int = 0) -> dict:
        """Σ w per label under ``weighting`` (labels sorted)."""
        sums = _padded(self.totals, len(self.labels) * self.weightings)[weighting::self.weightings]
        return {l: float(sums[self.label_index[l]]) for l in sorted(self.labels)}

    def matrix(self, weighting: int = 0) -> tuple[pa.Array, np.ndarray]:
        """(feature names, F×C weighted counts) of ``weighting``, the columns in sorted label order."""
        S, C = self.weightings, len(self.labels)
        cols = np.array([self.label_index[l] * S + weighting for l in sorted(self.labels)], np.int64)
        names, blocks = [], []
        for (col, order), table in self.tables.items():
            keys, sums = table.compact(C * S)
            first, second = (keys, np.full(len(keys), -1)) if order == 1 else (keys >> 32, keys & 0xFFFFFFFF)
            names.append(self.fields[col].vocab.grams(first, second, self.fields[col].suffix))
            blocks.append(sums[:, cols])
        if self.row_features:
            names.append(pa.array(list(self.row_features), pa.string()))
            blocks.append(np.stack([_padded(v, C * S)[cols] for v in self.row_features.values()]))
        if not names:
            return pa.array([], pa.string()), np.zeros((0, C))
        return pa.concat_arrays([n.cast(pa.string()) for n in names]), np.concatenate(blocks)

    def stats(self, weighting: int, p0: np.ndarray, min_count: int = 10, alpha: float = 0.01) -> zstats.ZStats:
        """z-statistics of ``weighting`` on its weighted n and counts, with ``p0`` (one per label, sorted)."""
        names, matrix = self.matrix(weighting)
        return zstats.from_matrix(names, sorted(self.labels), matrix, np.asarray(p0, np.float64), min_count, alpha)


WEIGHTED_NOTE = ("counts are sums of weights: a row of weight w counts as w rows, as a model trained on rows drawn "
                 "∝ w sees it")


def judge_weightings(counts: WeightedCounts, *, stage: str, before: int = 0, after: int = 1, prior: str = "auto",
                     min_count: int = 10, alpha: float = 0.01, notes: tuple = (), **options) -> Verdict:
    """The verdict (``core.verdict.judge``) on weighting ``after`` against weighting ``before`` of one pass:
    both audited with p0 by the ``prior`` rule on ``before``'s label totals, the same ``min_count`` and
    ``alpha``; ``options`` go to ``judge`` (``under_threshold``, the remedies)."""
    totals = counts.label_totals(before)
    chosen = zstats.choose_prior(prior, totals)
    p0 = zstats.prior_vector(list(totals), totals, chosen.name)
    verdict = judge(counts.stats(before, p0, min_count, alpha), counts.stats(after, p0, min_count, alpha),
                    stage=stage, prior=str(chosen), **options)
    verdict.notes += list(notes) + [f"not counted here: the {f} feature family (it needs a model fit)"
                                    for f in counts.left_out]
    return verdict
