"""AUDAC's shortcut guard (docs/upsample.md): the audit of the up-sampled output kept current copy by copy, so that
no copy strengthens a shortcut, and the verdicts on the output against the input (``refinery.core.verdict``)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core import stats as zstats
from refinery.core.features import NULL_FEATURE, FeatureConfig, extract
from refinery.core.verdict import JITTER, Verdict, judge
from refinery.methods.upsample.config import AUDIT_MIN_COUNT

ALPHA = 0.01          # family-wise level of the tokens' and the guard's Bonferroni thresholds (the audit's default)
RISE = JITTER         # how far copies may raise a feature already over the threshold: what the verdict calls jitter

CANDIDATE_ROWS = 65_536   # candidate rows whose features are extracted at a time (``_candidate_features``)


@dataclass
class InputAudit:
    """The audit's exact counts of the input (one pass, ``count_input``): every feature, its F×C counts in the order
    of ``labels``, n, the rows per label, every row's label index; p0 by the ``prior`` rule, and ``before``, the
    audit (features in ≥ AUDIT_MIN_COUNT rows) whose threshold selects the tokens and judges the copies."""

    labels: list
    names: pa.Array
    matrix: np.ndarray
    n: np.ndarray
    totals: np.ndarray
    label_of: np.ndarray
    prior: zstats.Prior

    def __post_init__(self):
        self.p0 = zstats.prior_vector(self.labels, dict(zip(self.labels, self.totals.tolist())), self.prior.name)
        self.eligible = self.n >= AUDIT_MIN_COUNT
        self.before = zstats.from_matrix(self.names.filter(pa.array(self.eligible)), self.labels,
                                         self.matrix[self.eligible], self.p0, AUDIT_MIN_COUNT, ALPHA,
                                         n=self.n[self.eligible])


def count_input(table, labels: list, features: FeatureConfig, prior: zstats.Prior,
                candidates: np.ndarray | None = None) -> tuple[InputAudit, pa.Table]:
    """(the input's audit, the ``candidates``' rows in their order): ``table`` (text_a[, text_b], label), a
    ``pa.Table`` or its record batches in row order, read once."""
    batches = table.to_batches() if isinstance(table, pa.Table) else table
    candidates = np.zeros(0, np.int64) if candidates is None else candidates
    names, matrix, n, totals, rows, label_of = _read_input(batches, candidates, labels, features, prior.name)
    return InputAudit(labels, names, matrix, n, totals, label_of, prior), rows


def _read_input(batches, candidates: np.ndarray, labels: list, features: FeatureConfig, prior: str):
    """One pass over the input's ``batches`` (its rows in order): (every feature, its F×C counts in the order of
    ``labels``, n, the rows per label, the ``candidates``' rows in their order, every row's label index).

    The counts are the audit's exact counts (``count_table``), added a batch at a time, its counter dropped on
    return so that its count tables are not held on to; of the texts only the candidates' are kept. Memory
    follows the corpus's distinct features and the candidates, not the size of its texts."""
    from refinery.core.audit_config import AuditConfig
    from refinery.core.audit_counters import count_table, new_counter

    config = AuditConfig(features=features, prior=prior, min_count=AUDIT_MIN_COUNT)
    counter = new_counter(config)
    order = np.argsort(candidates, kind="stable")
    wanted = candidates[order]
    kept, label_ids, first, schema = [], [], 0, pa.schema([])
    try:
        for batch in batches:
            table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
            count_table(table, config, counter)
            schema = table.schema
            lo, hi = np.searchsorted(wanted, [first, first + table.num_rows])
            if hi > lo:
                kept.append(table.take(pa.array(wanted[lo:hi] - first, pa.int64())))
            label_ids.append(pc.index_in(table["label"], value_set=pa.array(labels)).combine_chunks())
            first += table.num_rows
        names, matrix, n = counter.matrix(labels, 0)
        totals = np.array([counter.label_totals.get(l, 0) for l in labels], dtype=np.int64)
    finally:
        counter.close()
    rows = pa.concat_tables(kept) if kept else schema.empty_table()
    if rows.num_rows < len(candidates):
        raise IndexError(f"ShortcutGuard: candidate rows beyond the input's {first:,} rows")
    if len(order) and (order != np.arange(len(order))).any():
        rows = rows.take(pa.array(np.argsort(order)))   # back in the order of ``candidates``
    label_of = pa.concat_arrays(label_ids).to_numpy(zero_copy_only=False) if label_ids else np.zeros(0, np.int32)
    return names, matrix, n, totals, rows, label_of


def _candidate_features(rows: pa.Table, features: FeatureConfig, names: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(row of ``rows``, index in ``names``) of every feature (``extract``'s) of each of ``rows``, sorted by row; a
    feature not in ``names`` is left out (every one was counted: kept safe all the same).

    ``extract`` builds a string per (row, feature): it runs on ``CANDIDATE_ROWS`` rows at a time, so memory holds
    one chunk's strings and the distinct features of the chunks (looked up in ``names`` once), not a string for
    each of the millions of (row, feature) pairs of a large corpus's candidates."""
    slots, local, dictionaries = [], [], []
    for start in range(0, rows.num_rows, CANDIDATE_ROWS):
        long = extract(rows.slice(start, CANDIDATE_ROWS), features)
        column = long["feature"].combine_chunks() if isinstance(long["feature"], pa.ChunkedArray) else long["feature"]
        at = long["row"].to_numpy()
        order = np.argsort(at, kind="stable")
        slots.append((at[order] + start).astype(np.int32))   # ids as int32: a 10M-row corpus's candidates have
        local.append(column.indices.to_numpy()[order])        # tens of millions of (row, feature) pairs
        dictionaries.append(column.dictionary)
    if not dictionaries:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    # the chunks' dictionaries as one: each entry's index among the distinct features, then that feature's in names,
    # found by hashing the candidates' features (a fraction of the corpus's) and looking every name up among them
    starts = np.cumsum([0] + [len(d) for d in dictionaries[:-1]])
    distinct = pc.dictionary_encode(pa.concat_arrays(dictionaries))
    dictionaries.clear()
    at_distinct = pc.index_in(names, value_set=distinct.dictionary)
    found = np.flatnonzero(at_distinct.is_valid().to_numpy(zero_copy_only=False))
    in_names = np.full(len(distinct.dictionary), -1, np.int32)
    in_names[at_distinct.filter(at_distinct.is_valid()).to_numpy()] = found
    del at_distinct, found
    entry = in_names[distinct.indices.to_numpy()]
    fids = np.concatenate([entry[at + ids] for at, ids in zip(starts, local)])
    del entry, local
    slots = np.concatenate(slots)
    known = fids >= 0
    return (slots, fids) if known.all() else (slots[known], fids[known])


def _renumbered(ids: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct values of ``ids``, sorted; each id's index among them): ``np.unique(ids, return_inverse=True)``
    for ids in [0, size), by a mark per value instead of a sort of every id."""
    seen = np.zeros(size, dtype=bool)
    seen[ids] = True
    distinct = np.flatnonzero(seen)
    index = np.cumsum(seen, dtype=np.int32) - 1
    return distinct, index[ids]


class ShortcutGuard:
    """The audit of the output kept current as copies are added, so that no copy strengthens a shortcut.

    The audit's features (``FeatureConfig``: unigrams and bigrams per field, ``null``) are counted once over the
    input; the features of the rows that may be copied (``candidates``) are kept per row. A copy of row r
    (label l) is admitted when, with it, every feature x of r keeps z*(x, l′) under its ceiling for every label
    l′ (features in ≥ AUDIT_MIN_COUNT rows, the input's p0): the significance threshold t for a feature under t
    (a copy never makes a shortcut), z*_in + RISE for one over it (never strengthens one), and at most the
    label's max z* in the input. Only the candidates' features can change, so only they are held.
    """

    def __init__(self, audit: InputAudit, candidates: np.ndarray, rows: pa.Table, features: FeatureConfig):
        """``audit``: the input's (``count_input``); ``candidates``: the row indices that may be copied, ``rows``
        their rows (text_a[, text_b], label) in that order."""
        labels, names, matrix = audit.labels, audit.names, audit.matrix
        self.labels, self.prior = labels, audit.prior
        self.totals, self.label_of, self.p0, self.before = audit.totals, audit.label_of, audit.p0, audit.before
        eligible = audit.eligible
        rows, fids = _candidate_features(rows, features, names)
        self.touched, self.fids = _renumbered(fids, len(names))   # the features copies can change
        del fids
        # the int32 rows searched as they are (an int64 key would have NumPy search an int64 copy of every pair)
        self.offsets = np.searchsorted(rows, np.arange(len(candidates) + 1, dtype=rows.dtype))
        self._by_row = np.argsort(candidates, kind="stable")   # a candidate's slot by its row (``_slot``): no dict
        self._rows = candidates[self._by_row]                   # of millions of candidates
        seen = eligible.copy()
        seen[self.touched] = True
        kept = np.flatnonzero(seen)   # every feature the verdict can see (a mask: no sort of millions of ids)
        del seen
        self.names, self.base = names.take(pa.array(kept)), matrix[kept].astype(np.int64, copy=False)
        self.in_kept = np.searchsorted(kept, self.touched)
        self.counts = self.base[self.in_kept].copy()
        self.ceiling = self._ceilings(names.take(pa.array(self.touched)), self.counts)
        self.copies = np.zeros(len(labels), dtype=np.int64)
        self.enforce = True   # False (``--no-guard``): every copy admitted, still counted for the verdicts

    @classmethod
    def over(cls, table, candidates: np.ndarray, labels: list, features: FeatureConfig,
             prior: zstats.Prior) -> "ShortcutGuard":
        """The guard over ``table`` (``count_input``'s), counted and its candidates read in one pass."""
        audit, rows = count_input(table, labels, features, prior, candidates)
        return cls(audit, candidates, rows, features)

    def _slot(self, row: int) -> int:
        """The index in ``candidates`` of the candidate row ``row``."""
        at = int(np.searchsorted(self._rows, row))
        if at == len(self._rows) or self._rows[at] != row:
            raise RuntimeError(f"row {row} is no candidate of the guard")
        return int(self._by_row[at])

    def _ceilings(self, names: pa.Array, counts: np.ndarray) -> np.ndarray:
        n = counts.sum(axis=1)
        z = zstats.z_score(counts / np.maximum(n, 1)[:, None], n[:, None], self.p0[None, :])
        t = self.before.threshold
        _, _, z_in = self.before.eligible()
        ranked = pc.not_equal(self.before.features.take(pa.array(np.flatnonzero(self.before.n >= AUDIT_MIN_COUNT))),
                              NULL_FEATURE).to_numpy(zero_copy_only=False)
        limit = z_in[ranked].max(axis=0) if ranked.any() else np.full(len(self.labels), t)
        over = (n >= AUDIT_MIN_COUNT)[:, None] & (z > t)
        ceiling = np.where(over, np.minimum(z + RISE, np.maximum(limit, z)), np.minimum(t, limit))
        ceiling = np.where((n >= AUDIT_MIN_COUNT)[:, None], np.maximum(ceiling, z), ceiling)  # never below now
        ceiling[pc.equal(names, NULL_FEATURE).to_numpy(zero_copy_only=False)] = np.inf  # the label prior
        return ceiling

    def admit(self, row_ids: list, strict: bool = False) -> tuple[list, dict]:
        """(the rows whose copies were admitted, {refused row: the feature its copy would have raised}).
        ``strict``: a copy may not raise a significant feature at all (the copies that keep the label shares)."""
        admitted, refused = [], {}
        for r in row_ids:
            i, label = self._slot(r), self.label_of[r]
            f = self.fids[self.offsets[i]:self.offsets[i + 1]]
            c = self.counts[f].astype(np.float64)
            ceiling = self.ceiling[f]
            if strict:
                n_now = c.sum(axis=1)
                z_now = zstats.z_score(c[:, label] / np.maximum(n_now, 1), n_now, self.p0[label])
                significant = (n_now >= AUDIT_MIN_COUNT) & (z_now > self.before.threshold)
                ceiling = ceiling.copy()
                ceiling[significant, label] = np.minimum(ceiling[significant, label], z_now[significant])
            c[:, label] += 1
            n = c.sum(axis=1)
            z = zstats.z_score(c / n[:, None], n[:, None], self.p0[None, :])
            over = (z > ceiling) & (n >= AUDIT_MIN_COUNT)[:, None]
            if over.any() and self.enforce:
                worst = int(np.argmax(np.where(over, z - ceiling, -np.inf).max(axis=1)))
                refused[r] = self.names[int(self.in_kept[f[worst]])].as_py()
                continue
            self.counts[f, label] += 1
            self.copies[label] += 1
            admitted.append(r)
        return admitted, refused

    def remove(self, row_ids: list) -> None:
        """Take back the copies of ``row_ids`` (one each)."""
        for r in row_ids:
            label = self.label_of[r]
            i = self._slot(r)
            self.counts[self.fids[self.offsets[i]:self.offsets[i + 1]], label] -= 1
            self.copies[label] -= 1

    def after(self, p0: np.ndarray | None = None) -> zstats.ZStats:
        """The audit of the output: under ``p0``, else the prior rule applied to the output's label shares."""
        matrix = self.base.copy()
        matrix[self.in_kept] = self.counts
        if p0 is None:
            totals = dict(zip(self.labels, (self.totals + self.copies).tolist()))
            p0 = zstats.prior_vector(self.labels, totals, self.prior.name)
        return zstats.from_matrix(self.names, self.labels, matrix, p0, AUDIT_MIN_COUNT, ALPHA)

    def verdicts(self, remedy: str = "") -> tuple[Verdict, Verdict]:
        """The verdict on the output's audit under its own prior rule, and under the input's p0."""
        prior = str(self.prior)
        return (judge(self.before, self.after(), stage="upsample", under_threshold=False, prior=prior,
                      remedy_worsened=remedy),
                judge(self.before, self.after(self.p0), stage="upsample", under_threshold=False, prior=prior,
                      remedy_worsened=remedy))
