"""AUDAC's shortcut guard (docs/upsample.md): the audit of the up-sampled output kept current copy by copy, so that
no copy strengthens a shortcut, and the verdicts on the output against the input (``refinery.core.verdict``)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core import stats as zstats
from refinery.core.features import NULL_FEATURE, FeatureConfig, extract
from refinery.core.verdict import JITTER, Verdict, judge

ALPHA = 0.01          # family-wise level of the tokens' and the guard's Bonferroni thresholds (the audit's default)
AUDIT_MIN_COUNT = 10  # the guard's and the verdict's min_count (the audit's default)
RISE = JITTER         # how far copies may raise a feature already over the threshold: what the verdict calls jitter

class ShortcutGuard:
    """The audit of the output kept current as copies are added, so that no copy strengthens a shortcut.

    The audit's features (``FeatureConfig``: unigrams and bigrams per field, ``null``) are counted once over the
    input; the features of the rows that may be copied (``candidates``) are kept per row. A copy of row r
    (label l) is admitted when, with it, every feature x of r keeps z*(x, l′) under its ceiling for every label
    l′ (features in ≥ AUDIT_MIN_COUNT rows, the input's p0): the significance threshold t for a feature under t
    (a copy never makes a shortcut), z*_in + RISE for one over it (never strengthens one), and at most the
    label's max z* in the input. Only the candidates' features can change, so only they are held.
    """

    def __init__(self, table: pa.Table, candidates: np.ndarray, labels: list, features: FeatureConfig, prior: str):
        from refinery.methods.audit.config import AuditConfig
        from refinery.methods.audit.counters import count_table

        self.labels, self.prior_rule = labels, prior
        counter = count_table(table, AuditConfig(features=features, prior=prior, min_count=AUDIT_MIN_COUNT))
        names, matrix, n = counter.matrix(labels, 0)
        self.totals = np.array([counter.label_totals.get(l, 0) for l in labels], dtype=np.int64)
        self.prior = zstats.choose_prior(prior, dict(zip(labels, self.totals.tolist())))
        self.p0 = zstats.prior_vector(labels, dict(zip(labels, self.totals.tolist())), prior)
        eligible = n >= AUDIT_MIN_COUNT
        self.before = zstats.from_matrix(names.filter(pa.array(eligible)), labels, matrix[eligible], self.p0,
                                         AUDIT_MIN_COUNT, ALPHA, n=n[eligible])
        long = extract(table.take(pa.array(candidates, pa.int64())), features)
        column = long["feature"].combine_chunks() if isinstance(long["feature"], pa.ChunkedArray) else long["feature"]
        feature_ids = pc.fill_null(pc.index_in(column.dictionary, value_set=names), -1).to_numpy()
        fids = feature_ids[column.indices.to_numpy()].astype(np.int64)
        rows = long["row"].to_numpy()
        known = fids >= 0   # every feature of a candidate was counted; kept safe all the same
        rows, fids = rows[known], fids[known]
        order = np.argsort(rows, kind="stable")
        rows, fids = rows[order], fids[order]
        self.touched, local = np.unique(fids, return_inverse=True)   # the features copies can change
        self.fids = local.astype(np.int64)
        self.offsets = np.searchsorted(rows, np.arange(len(candidates) + 1))
        self.slot = {int(r): i for i, r in enumerate(candidates)}
        kept = np.union1d(np.flatnonzero(eligible), self.touched)   # every feature the verdict can see
        self.names, self.base = names.take(pa.array(kept)), matrix[kept].astype(np.int64)
        self.in_kept = np.searchsorted(kept, self.touched)
        self.counts = self.base[self.in_kept].copy()
        self.ceiling = self._ceilings(names.take(pa.array(self.touched)), self.counts)
        self.copies = np.zeros(len(labels), dtype=np.int64)
        self.label_of = pc.index_in(table["label"], value_set=pa.array(labels)).to_numpy(zero_copy_only=False)

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
            i, label = self.slot[r], self.label_of[r]
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
            if over.any():
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
            i = self.slot[r]
            self.counts[self.fids[self.offsets[i]:self.offsets[i + 1]], label] -= 1
            self.copies[label] -= 1

    def after(self, p0: np.ndarray | None = None) -> zstats.ZStats:
        """The audit of the output: under ``p0``, else the prior rule applied to the output's label shares."""
        matrix = self.base.copy()
        matrix[self.in_kept] = self.counts
        if p0 is None:
            totals = dict(zip(self.labels, (self.totals + self.copies).tolist()))
            p0 = zstats.prior_vector(self.labels, totals, self.prior_rule)
        return zstats.from_matrix(self.names, self.labels, matrix, p0, AUDIT_MIN_COUNT, ALPHA)

    def verdicts(self, remedy: str = "") -> tuple[Verdict, Verdict]:
        """The verdict on the output's audit under its own prior rule, and under the input's p0."""
        prior = str(self.prior)
        return (judge(self.before, self.after(), stage="upsample", under_threshold=False, prior=prior,
                      remedy_worsened=remedy),
                judge(self.before, self.after(self.p0), stage="upsample", under_threshold=False, prior=prior,
                      remedy_worsened=remedy))
