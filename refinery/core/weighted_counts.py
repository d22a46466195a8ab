"""Weighted feature–label counts (``WeightedCounts``): the audit of a corpus whose rows carry weights.

A row of weight w adds w, not 1, to count(x, l) of each feature x it contains (once per row, as the audit
counts presence) and to its label's total, so that

    p̂_w(l|x) = Σ_{rows of x with label l} w / Σ_{rows of x} w,     n_w(x) = Σ_{rows of x} w,

and z* is computed on these weighted counts (``stats.from_matrix`` takes the float matrix): what a model trained on
rows drawn ∝ w (Zhang et al. 2019's leakage-neutral training) sees. Each weighting's Σ w² is counted beside its
Σ w, so that z* and min_count take Kish's effective size n_eff(x) = (Σ_{rows of x} w)² / Σ_{rows of x} w² (Kish 1965;
the variance of a weighted mean under H0 is p0 (1 − p0) / n_eff, ``core.stats``): weighting cannot make a
feature's rows more informative than they are. Several weightings are counted
in one pass (``add(table, w1, w2, …)``; ``None``: every row weighs 1, the plain audit), so an input and its
re-weighted output are compared on exactly the same features.

Features are the audit's: n-grams of each text field through the audit's compiled tokenizer (the same tokens,
stopword rule and field names), the ``null`` feature, and the other row-level families through
``features.extract``. The hypothesis-only probe (``hypo-only``) needs a model fit and is not counted here.
A weighting whose weights are 0 or 1 (``None``, a row filter's keep, a left-out part) can be counted as a mask
(``masks``: the first weightings are): an int32 count beside the audit's, the others as float64 sums.

Cost: the tokenizer's, plus one probe of a compiled hash table per (n-gram, row) (``key_counts.KeyCounts``,
``kernels.count_present``), the text fields tokenized and counted on two threads while the caller goes on (``add``
returns with the last slice still counting; ``one_thread``: in the caller's thread, a counter run beside other work
that takes the other core): about the audit's own counting. Memory per table slot, the slots at
most 70% used: 12 bytes, 4 per label and mask, 16 per label and float weighting (its Σ w and Σ w²: 72 for 3
labels, a mask and a weighting); once judged (``stats``), a hashed table keeps only its keys. A counter ``restricted`` to
the features in enough rows (``WeightedCounts.restricted``) counts only those, sharing the vocabularies: a second
look at a few features under other weightings holds no table of every feature, and where the first counter was
``replayable`` (its slices' token ids kept on disk) it costs no tokenizer pass either (``replay``).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from refinery.core import stats as zstats
from refinery.core.audit_record import AuditRecord
from refinery.core.feature_counts import _FieldCounts, _pool, split_key
from refinery.core.features import NULL_FEATURE, FeatureConfig, dictionary_ids, extract, text_fields
from refinery.core.kernels import EMPTY
from refinery.core.key_counts import KeyCounts
from refinery.core.verdict import Verdict, judge
from refinery.io.spill import SpilledSlices

SLICE_ROWS = 1 << 16         # rows tokenized and counted at a time (the work buffers follow it, not the table added)
UNCOUNTED = ("hypo-only",)  # families a weighted audit leaves out


class WeightedCounts:
    """Weighted presence counts of the audit's features × label for ``weightings`` weightings at once.

    ``labels``: the labels, in order (more are added as rows bring them). ``masks``: how many of the first
    weightings take only weights 0 or 1 (``None``: all 1), counted as integers. ``add(table, *weights)``: one weight
    array per weighting (``None``: all 1) for the batch's rows. ``stats(i, p0, min_count, alpha)``: the ``ZStats``
    of weighting i (labels sorted; z* at n_eff, ``effective``). ``label_totals(i)``: Σ w per label.
    ``restricted(w, min_rows=…)``: a counter of only the features in at least ``min_rows`` rows (or ``rows=``: those
    rows of ``matrix``) under ``w`` other weightings; ``replayable``: the slices' token ids kept on disk, for such a
    counter's ``replay``.
    """

    def __init__(self, labels: list | None, config: FeatureConfig, weightings: int = 1, masks: int = 0,
                 replayable: bool = False, one_thread: bool = False):
        if not 0 <= masks <= weightings:
            raise RuntimeError(f"masks must be between 0 and the {weightings} weightings, got {masks}")
        self.label_index: dict[str, int] = {}
        self.labels: list[str] = []
        dictionary_ids(pa.array(list(labels or ()), pa.string()), self.label_index, self.labels)
        self.config = config
        self.weightings, self.masks = weightings, masks
        self.columns = 2 * weightings - masks   # the weightings, then Σ w² of each that is not a mask
        self.fields: dict[str, _FieldCounts] | None = None
        self.tables: dict[tuple[str, int], KeyCounts] = {}   # (column, order): masks counted, the others summed
        self.row_families = tuple(f for f in config.families
                                  if f not in ("unigram", "bigram", "null", *UNCOUNTED))
        self.row_features: dict[str, np.ndarray] = {}        # row-level features: sums per label × column
        self.totals = np.zeros(0)
        self.rows = 0
        self.only: set | None = None   # a restricted counter: the row-level features it counts
        self._counts = None            # per table (keys ascending, counts, sums), in ``matrix``'s order
        self._in_flight: list = []     # the last slice's n-gram counting, still running on the pool's threads
        self.one_thread = one_thread   # counted in the caller's thread, not the pool's (beside other work: ``Beside``)
        # ``replayable``: each slice's label codes and its fields' token ids kept on disk, for ``replay``
        self.tokens: SpilledSlices | None = None
        if replayable:
            self.tokens = SpilledSlices(["labels", *(f"{col}:{part}" for col in ("text_a", "text_b")
                                                     for part in ("ids", "lengths"))], prefix="tokens-")

    @property
    def left_out(self) -> tuple:
        """The configured families this weighted audit does not count."""
        return tuple(f for f in self.config.families if f in UNCOUNTED)

    def add(self, table: pa.Table, *weights) -> "WeightedCounts":
        n = table.num_rows
        if not n:
            return self
        w = self._weight_columns(n, weights)
        if self.fields is None:
            self.fields = {col: _FieldCounts(name, self.config) for col, name in text_fields(table, self.config)
                           if any(f in self.config.families for f in ("unigram", "bigram"))}
        for start in range(0, n, SLICE_ROWS):
            part = table.slice(start, SLICE_ROWS)
            self.flush()   # one slice in flight: its fields tokenized and counted on threads (the kernels free the GIL)
            labels = dictionary_ids(part["label"], self.label_index, self.labels)
            if self.tokens is not None:
                self.tokens.append("labels", labels)
            self._add(labels, w[start:start + SLICE_ROWS], functools.partial(self._tokenized, rows=part), part)
        return self

    def replay(self, tokens: SpilledSlices, *weights, done=lambda rows: None) -> "WeightedCounts":
        """Count the rows a ``replayable`` counter counted from the token ids it kept on disk (its ``tokens``, every
        row added), under ``weights`` (one array over all those rows, in the order they were added; None: all 1):
        the rows' second look without their texts read or tokenized again (``done(rows)`` after each slice). Only
        n-grams and ``null`` (row-level families need the rows: ``add`` them)."""
        if self.row_families:
            raise RuntimeError(f"row-level families ({', '.join(self.row_families)}) need the rows: add them again")
        if self.fields is None:
            raise RuntimeError("replay counts into a counter restricted from the one that kept the tokens")
        sizes = tokens.lengths("labels")
        if any(x is not None and len(x) != sum(sizes) for x in weights):
            raise RuntimeError(f"give weights for each of the {sum(sizes):,} rows the tokens hold")
        first = 0   # each slice's weight columns made as it is counted: not rows × columns of float64 at once
        for k, rows in enumerate(sizes):
            labels = tokens.read("labels", k)
            self.flush()
            w = self._weight_columns(rows, tuple(None if x is None else x[first:first + rows] for x in weights))
            self._add(labels, w, functools.partial(_replayed, tokens, slice_index=k, rows=rows), per_table=True)
            first += rows
            done(rows)
        return self

    def _tokenized(self, col: str, field: _FieldCounts, *, rows: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """``field``'s tokens of column ``col`` of ``rows``, kept on disk too where this counter is ``replayable``."""
        ids, parents = field.tokenize(rows[col])
        if self.tokens is not None:   # a row's tokens together, rows ascending: its count of tokens says which
            self.tokens.append(f"{col}:ids", ids.astype(np.int32))
            self.tokens.append(f"{col}:lengths", np.bincount(parents, minlength=rows.num_rows).astype(np.int32))
        return ids, parents

    def _weight_columns(self, n: int, weights: tuple) -> np.ndarray:
        """rows × (weightings, then Σ w² of each that is not a mask) of ``add``'s or ``replay``'s ``weights``."""
        if len(weights) != self.weightings:
            raise RuntimeError(f"give {self.weightings} weight arrays (None: all 1), got {len(weights)}")
        self._counts = None
        w = np.column_stack([np.ones(n) if x is None else np.asarray(x, np.float64) for x in weights])
        masks = w[:, :self.masks]
        if not np.all((masks == 0) | (masks == 1)):
            raise RuntimeError(f"the first {self.masks} weighting(s) are masks: weights 0 or 1 only")
        return np.column_stack([w, np.square(w[:, self.masks:])])   # Σ w² beside Σ w: n_eff (the module's equation)

    def _add(self, labels: np.ndarray, w: np.ndarray, tokens_of, table: pa.Table | None = None,
             per_table: bool = False) -> None:
        """One slice: its rows' label codes, weight columns, its fields' tokens (``tokens_of(col, field)``) and, for
        the row-level families, its rows (``table``). A field's tables are counted in one task on its tokens, or
        (``per_table``, where ``tokens_of`` reads them, not tokenizes) each in a task of its own, the bigrams' first:
        two fields of unequal lengths keep both threads busy."""
        n, S, M = len(labels), self.columns, self.masks
        C = len(self.labels)
        per_label = np.empty(C * S)   # label-major, as every sum here
        for s in range(S):
            per_label[s::S] = np.bincount(labels, weights=w[:, s], minlength=C)
        self.totals = _padded(self.totals, C * S) + per_label
        for col, field in self.fields.items():   # created in a fixed order: the features' order does not vary
            for order in field.orders:
                if (col, order) not in self.tables and self.only is None:
                    self.tables[col, order] = KeyCounts(dense=order == 1, labels=C * M, values=C * (S - M))
        first_row, masks, weights = self.rows, np.ascontiguousarray(w[:, :M], np.int32), np.ascontiguousarray(w[:, M:])

        def count(col: str, field: _FieldCounts, orders: list) -> None:
            ids, parents = tokens_of(col, field)
            for order in orders:
                self.tables[col, order].add(ids, parents, labels, first_row, C, pairs=order == 2, masks=masks,
                                            weights=weights, grow=self.only is None)

        tasks = [(col, field, [order for order in field.orders if (col, order) in self.tables])
                 for col, field in self.fields.items()]   # a restricted counter may have none of a field's features
        if per_table:
            tasks = sorted(((col, field, [order]) for col, field, orders in tasks for order in orders),
                           key=lambda task: -task[2][0])
        tasks = [task for task in tasks if task[2]]
        if self.one_thread:
            for task in tasks:
                count(*task)
        else:
            self._in_flight = [_pool().submit(count, *task) for task in tasks]
        if table is not None and self.row_families and (self.only is None or self.only - {NULL_FEATURE}):
            long = extract(table, FeatureConfig(self.row_families, self.config.tokenizer, self.config.field_names,
                                                self.config.single_field_name))
            if long.num_rows:
                codes = long["feature"].combine_chunks()
                index, row = codes.indices.to_numpy(zero_copy_only=False), long["row"].to_numpy()
                for i, name in enumerate(codes.dictionary.to_pylist()):
                    if self.only is not None and name not in self.only:
                        continue
                    mine = row[index == i]
                    feature = np.empty(C * S)
                    for s in range(S):
                        feature[s::S] = np.bincount(labels[mine], weights=w[mine, s], minlength=C)
                    self.row_features[name] = _padded(self.row_features.get(name, np.zeros(0)), C * S) + feature
        if "null" in self.config.families and (self.only is None or NULL_FEATURE in self.only):
            self.row_features[NULL_FEATURE] = _padded(self.row_features.get(NULL_FEATURE, np.zeros(0)),
                                                      C * S) + per_label
        self.rows += n

    def flush(self) -> "WeightedCounts":
        """Wait for the last slice's counting (``add`` returns while its n-grams are still counted, so that the
        caller's reading and writing of the next batch overlap it)."""
        in_flight, self._in_flight = self._in_flight, []
        for done in in_flight:
            done.result()
        return self

    def label_totals(self, weighting: int = 0, squares: bool = False) -> dict:
        """Σ w per label under ``weighting`` (labels sorted; ``squares``: Σ w²)."""
        column = self._internal(weighting, squares)
        sums = _padded(self.totals, len(self.labels) * self.columns)[column::self.columns]
        return {l: float(sums[self.label_index[l]]) for l in sorted(self.labels)}

    def _counted(self) -> list:
        """Per n-gram table (keys ascending, int32 counts of the masks, float sums of the others), in ``matrix``'s
        order, then the row-level features as ``(None, None, sums of every weighting)``. Kept until the next
        ``add``: the hashed tables hold only their keys meanwhile (``KeyCounts.compact``)."""
        if self._counts is None:
            self.flush()
            self._counts = [table.compact() for table in self.tables.values()]
            if self.row_features:
                C, S = len(self.labels), self.columns
                self._counts.append((None, None, np.stack([_padded(v, C * S) for v in self.row_features.values()])))
        return self._counts

    def _internal(self, weighting: int, squares: bool = False) -> int:
        """The column counting ``weighting``'s Σ w (``squares``: its Σ w², a mask's own: w² = w for w ∈ {0, 1})."""
        return self.weightings + weighting - self.masks if squares and weighting >= self.masks else weighting

    def _column(self, part: tuple, label: int, column: int) -> np.ndarray:
        """One part's sums of ``label`` (an id) in ``column`` (``_internal``; zeros where the label came after it)."""
        keys, counts, sums = part
        weighting = column
        if keys is None:   # the row-level features: every column in sums, label-major
            column = label * self.columns + weighting
        elif weighting < self.masks:
            sums, column = counts, label * self.masks + weighting
        else:
            column = label * (self.columns - self.masks) + weighting - self.masks
        return sums[:, column] if column < sums.shape[1] else np.zeros(len(sums))

    def _parts(self, rows: np.ndarray | None):
        """(part, its rows among ``rows`` of ``matrix``, ascending; all where None) of each part."""
        start = 0
        for part in self._counted():
            size = len(part[2])
            yield part, (slice(None) if rows is None else
                         rows[(rows >= start) & (rows < start + size)] - start)
            start += size

    def names(self, rows: np.ndarray | None = None) -> pa.Array:
        """The feature names of ``matrix``'s rows (all, or ascending ``rows``), built only for those asked for."""
        names = []
        for ((col, order), ((keys, _, _), mine)) in zip(self.tables, self._parts(rows)):
            names.append(self.fields[col].vocab.grams(*split_key(keys[mine], order), self.fields[col].suffix))
        if self.row_features:
            mine = list(self._parts(rows))[-1][1]
            names.append(pa.array(list(self.row_features), pa.string()).take(
                pa.array(np.arange(len(self.row_features))[mine])))
        return pa.concat_arrays([n.cast(pa.string()) for n in names]) if names else pa.array([], pa.string())

    def matrix(self, weighting: int = 0, rows: np.ndarray | None = None, names: pa.Array | None = None,
               squares: bool = False) -> tuple[pa.Array, np.ndarray]:
        """(feature names, F×C weighted counts) of ``weighting``, the columns in sorted label order; with
        ``rows`` (ascending) only those features; ``names``: ``self.names(rows)`` built before (they cost more than
        the counts); ``squares``: the sums of squared weights Σ w² instead."""
        return self.names(rows) if names is None else names, self._sums(self._internal(weighting, squares), rows)

    def _sums(self, column: int, rows: np.ndarray | None) -> np.ndarray:
        """F×C sums of ``column`` (``_internal``) of the features at ``rows`` (all where None), labels sorted."""
        labels = [self.label_index[l] for l in sorted(self.labels)]
        blocks = [np.column_stack([self._column(part, l, column)[mine] for l in labels])
                  for part, mine in self._parts(rows)]
        return np.concatenate(blocks).astype(np.float64) if blocks else np.zeros((0, len(labels)))

    def stats(self, weighting: int, p0: np.ndarray, min_count: int = 10, alpha: float = 0.01,
              rows: np.ndarray | None = None, names: pa.Array | None = None) -> zstats.ZStats:
        """z-statistics of ``weighting`` on its weighted n and counts, z* and min_count at n_eff (``effective``), with
        ``p0`` (one per label, sorted); with ``rows`` (of ``matrix``, ascending) only those features (``names``:
        theirs, built before)."""
        names, matrix = self.matrix(weighting, rows, names)
        n = zstats.row_totals(matrix)
        return zstats.from_matrix(names, sorted(self.labels), matrix, np.asarray(p0, np.float64), min_count, alpha,
                                  n=n, n_eff=self.effective(weighting, n, rows))

    def effective(self, weighting: int, n: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray | None:
        """n_eff = (Σ w)² / Σ w² of the features at ``rows`` (all where None) under ``weighting``, whose Σ w are ``n``
        (``stats.effective_size``); None where it is n (a mask: weights 0 or 1)."""
        if weighting < self.masks:
            return None
        return effective_of(n, zstats.row_totals(self._sums(self._internal(weighting, True), rows)))

    def tested(self, weightings, min_count: int = 10) -> np.ndarray:
        """Rows of ``matrix`` tested (n_eff ≥ ``min_count``, ``effective``) under one of ``weightings``: the
        features an audit of any of them tests. A verdict between them needs no other: those two audits' thresholds
        count only these, and a feature untested on both sides is never compared."""
        tested, start = [], 0
        for part, _ in self._parts(None):
            def size(i: int) -> np.ndarray:
                n = sum((self._column(part, l, i) for l in range(len(self.labels))), np.zeros(len(part[2])))
                if i < self.masks:
                    return n
                return zstats.effective_size(n, sum((self._column(part, l, self._internal(i, True))
                                                     for l in range(len(self.labels))), np.zeros(len(part[2]))))
            tested.append(start + np.flatnonzero(np.logical_or.reduce([size(i) >= min_count for i in weightings])))
            start += len(part[2])
        return np.concatenate(tested) if tested else np.zeros(0, np.int64)

    def restricted(self, weightings: int, masks: int = 0, *, min_rows: int | None = None,
                   rows: np.ndarray | None = None) -> "WeightedCounts":
        """An empty counter of only some of this one's features, under ``weightings`` weightings (the first ``masks``
        of them masks), with this one's labels and vocabularies (the same rows added again give the same token ids):
        those in at least ``min_rows`` rows (this counter's first weighting, a mask; found in each table's slots as
        they lie: none sorted), or those at ``rows`` (ascending) of ``matrix``. ``add`` it the rows once more (or
        ``replay`` them) and it probes only those features' keys: a second look at a few features with no table of
        every feature."""
        if (min_rows is None) == (rows is None):
            raise RuntimeError("restricted takes min_rows or rows")
        if min_rows is not None and not self.masks:
            raise RuntimeError("restricted needs a counter whose first weighting is a mask (rows counted)")
        self.flush()
        C, S, M = len(self.labels), self.columns, self.masks
        if rows is None:
            kept = {}
            for at, counted in self.tables.items():
                keys, counts = counted.items()
                kept[at] = keys[counts[:, 0::M].sum(axis=1) >= min_rows]   # label-major: mask 0's count of each label
            only = {name for name, sums in self.row_features.items() if _padded(sums, C * S)[0::S].sum() >= min_rows}
        else:
            parts = list(self._parts(rows))
            kept = {at: keys[mine] for at, ((keys, _, _), mine) in zip(self.tables, parts)}
            only = set(np.array(list(self.row_features), dtype=object)[parts[-1][1]]) if self.row_features else set()
        out = WeightedCounts(self.labels, self.config, weightings, masks)
        out.fields, out.row_families, out.only = self.fields, self.row_families, only
        values = out.columns - masks
        for (col, order), keys in kept.items():
            if not len(keys):
                continue
            table = KeyCounts(dense=order == 1, labels=C * masks, values=C * values)
            table.add(keys, np.arange(len(keys)), np.zeros(len(keys), np.int64), 0, C,
                      masks=np.zeros((len(keys), masks), np.int32),
                      weights=np.zeros((len(keys), values)))   # the keys placed, nothing counted
            table.table[:, 2] = EMPTY                          # and no row seen yet
            out.tables[col, order] = table
        return out


def _replayed(tokens: SpilledSlices, col: str, field: _FieldCounts, *, slice_index: int, rows: int
              ) -> tuple[np.ndarray, np.ndarray]:
    """The (token ids, row of each token) of column ``col`` of a ``replayable`` counter's slice ``slice_index`` (of
    ``rows`` rows), as ``field`` tokenized them then."""
    ids = tokens.read(f"{col}:ids", slice_index).astype(np.int64)
    return ids, np.repeat(np.arange(rows, dtype=np.int64), tokens.read(f"{col}:lengths", slice_index))


def effective_of(n: np.ndarray, squares: np.ndarray) -> np.ndarray | None:
    """n_eff of features whose Σ w are ``n`` and Σ w² ``squares`` (``stats.effective_size``), or None where it is n
    for every one (Σ w² = Σ w: rows of weight 0 or 1, counted as the plain audit counts them)."""
    return None if np.array_equal(n, squares) else zstats.effective_size(n, squares)


def _padded(sums: np.ndarray, columns: int) -> np.ndarray:
    """``sums`` with zero columns added up to ``columns`` (labels first seen after it was counted)."""
    extra = columns - sums.shape[-1]
    return sums if not extra else np.concatenate([sums, np.zeros((*sums.shape[:-1], extra))], axis=-1)


WEIGHTED_NOTE = ("counts are sums of weights: a row of weight w counts as w rows, as a model trained on rows drawn "
                 "∝ w sees it; z* and min_count take each feature's effective rows (Σw)²/Σw², never more than its "
                 "rows")


def counts_prior(counts: WeightedCounts, prior: str = "auto", weighting: int = 0,
                 carried: zstats.Prior | None = None) -> tuple[np.ndarray, zstats.Prior]:
    """(p0, the rule chosen): the ``prior`` rule (``carried`` with the corpus, for auto) applied to ``weighting``'s
    label totals (labels sorted)."""
    totals = counts.label_totals(weighting)
    chosen = zstats.choose_prior(prior, totals, carried)
    return zstats.prior_vector(list(totals), totals, chosen.name), chosen


@dataclass
class WeightedAudits:
    """The audits of some weightings of one pass (``audit_weightings``): ``stats[i]`` of the i-th weighting, all on
    the features at ``rows`` of ``WeightedCounts.matrix`` (those tested under one of them), one p0 by ``prior``;
    ``features``: the feature config counted, ``left_out``: the families it could not count (they need a fit)."""

    prior: object
    rows: np.ndarray
    stats: list
    features: FeatureConfig | None = None
    left_out: tuple = ()

    def record_of(self, weighting: int, label_rows: dict, weighted: bool = False) -> AuditRecord | None:
        """The audit of weighting ``weighting`` as the corpus it describes keeps it (``AuditRecord.of_output``), or
        None where a feature family could not be counted (it would not be that corpus's audit)."""
        if self.left_out:
            return None
        return AuditRecord.of_output(self.stats[weighting], self.prior, label_rows, self.features, weighted)

    def significant(self, threshold: float) -> np.ndarray:
        """Rows of ``matrix`` with some label's z* over ``threshold`` in one of the audits (tested: n ≥ min_count)."""
        over = []
        for stats in self.stats:
            tested, _, z = stats.eligible()
            over.append(tested[(z > threshold).any(axis=1)])
        return self.rows[np.unique(np.concatenate(over))] if over else self.rows[:0]


def audit_weightings(counts: WeightedCounts, weightings=(0, 1), prior: str = "auto", min_count: int = 10,
                     alpha: float = 0.01, carried: zstats.Prior | None = None, among: np.ndarray | None = None
                     ) -> WeightedAudits:
    """The audit of each of ``weightings`` as ``refinery audit`` makes it of that corpus: the ``prior`` rule decided
    once, on the first one's label totals (or ``carried`` with the input), and applied to each one's own label
    totals, the same ``min_count`` and ``alpha``, each its own threshold; on the features tested under any of them
    (their names built once), only those among the rows ``among`` of ``matrix`` where given."""
    _, chosen = counts_prior(counts, prior, weightings[0], carried)
    rows = counts.tested(weightings, min_count)
    if among is not None:
        rows = rows[np.isin(rows, among)]
    names = counts.names(rows)
    return WeightedAudits(chosen, rows, [counts.stats(w, counts_prior(counts, chosen.name, w)[0], min_count, alpha,
                                                      rows, names) for w in weightings],
                          counts.config, tuple(counts.left_out))


def judge_audits(audits: WeightedAudits, *, stage: str, before: int = 0, after: int = 1, notes: tuple = (),
                 **options) -> Verdict:
    """The verdict (``core.verdict.judge``) on ``audits.stats[after]`` against ``audits.stats[before]``; ``options``
    go to ``judge`` (``under_threshold``, the remedies, a ``threshold``)."""
    verdict = judge(audits.stats[before], audits.stats[after], stage=stage, prior=str(audits.prior), **options)
    verdict.notes += list(notes) + [f"not counted here: the {f} feature family (it needs a model fit)"
                                    for f in audits.left_out]
    return verdict


def judge_weightings(counts: WeightedCounts, *, stage: str, before: int = 0, after: int = 1, prior: str = "auto",
                     min_count: int = 10, alpha: float = 0.01, notes: tuple = (),
                     audits: WeightedAudits | None = None, carried: zstats.Prior | None = None,
                     among: np.ndarray | None = None, **options) -> Verdict:
    """The verdict on weighting ``after`` against weighting ``before`` of one pass: both audited by
    ``audit_weightings`` (``audits``: done before, for these weightings in that order; ``among``: on those rows of
    ``matrix`` only) and judged by ``judge_audits``."""
    if audits is None:
        audits = audit_weightings(counts, (before, after), prior, min_count, alpha, carried, among)
        before, after = 0, 1
    return judge_audits(audits, stage=stage, before=before, after=after, notes=notes, **options)
