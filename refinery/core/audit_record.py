"""``AuditRecord``: the audit of one corpus (z-statistics of Gardner et al. 2021, METHODS §1), kept with it.

A stage that judges its output holds that output's audit already: the verdict's "after" side (``core.verdict``) is
exactly what ``refinery audit`` gives the corpus with the same settings (the prior rule decided on the lineage's
input and applied to this corpus's label shares, its own Bonferroni threshold Φ⁻¹(1 − α/m) over its own tested
cells). The stage keeps it with the corpus it writes (``CorpusWriter.attach``); the pipeline's report reads it
instead of counting the corpus again. One record, one format: the same table keeps a report's audits between runs.

The table: one row per feature in at least ``min_count`` rows (``feature``, ``n``, ``counts`` per label, in the
record's label order; sums of weights where ``weighted``, with ``n_eff``, the effective size z* is tested at, where the
weights are not all 0 or 1: ``core.stats``), everything else in the schema's metadata.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core.records import AuditFigures
from refinery.core.stats import Prior, ZStats

KEY = "audit"            # a corpus manifest's name for its attached record
METADATA = b"refinery_audit"


def settings_of(features, prior: str, min_count: int, alpha: float) -> dict:
    """What an audit's figures depend on: the feature config (its field names included), the prior setting, min_count
    and α; two records with equal settings of the same rows are equal."""
    return {"features": features.to_dict(), "prior": prior, "min_count": int(min_count), "alpha": float(alpha)}


@dataclass
class AuditRecord:
    """One corpus's audit: ``stats`` on the features in ≥ min_count rows, the prior rule it took, its rows per label
    (rows, not weights), the ``settings`` it was made with (``settings_of``) and whether its counts are weighted."""

    stats: ZStats
    prior: Prior
    label_rows: dict
    settings: dict
    weighted: bool = False

    @classmethod
    def of(cls, stats: ZStats, prior: Prior, label_rows: dict, settings: dict, weighted: bool = False
           ) -> "AuditRecord | None":
        """The record of an audit ``stats`` (any features; only those tested are kept), or None where it is not the
        audit of the corpus on its own: a label of ``stats`` with no row there (an audit of the corpus would not
        test it, and its threshold would count one label fewer)."""
        rows = {l: int(label_rows.get(l, 0)) for l in stats.labels}
        if set(label_rows) - set(stats.labels) or not all(rows.values()):
            return None
        tested = np.flatnonzero(stats.effective_n >= stats.min_count)
        kept = ZStats(pc.take(stats.features, pa.array(tested)), list(stats.labels), stats.counts[tested],
                      stats.n[tested], np.asarray(stats.p0, np.float64), float(stats.threshold), stats.min_count,
                      stats.alpha, None if stats.n_eff is None else stats.n_eff[tested])
        return cls(kept, prior, rows, dict(settings), weighted)

    @classmethod
    def of_output(cls, stats: ZStats, prior: Prior, label_rows: dict, features, weighted: bool = False
                  ) -> "AuditRecord | None":
        """The record a stage keeps with the corpus it wrote: ``stats`` (its verdict's after side, with its own
        min_count and α) under the prior rule the corpus's manifest records, as ``refinery audit`` with its default
        ``--prior auto`` takes it (carried), on the feature config ``features``."""
        return cls.of(stats, replace(prior, carried=True), label_rows,
                      settings_of(features, "auto", stats.min_count, stats.alpha), weighted)

    def attach_to(self, writer) -> None:
        """Keep the record with the corpus ``writer`` (an ``io.corpus_writer.CorpusWriter``) is about to commit."""
        writer.attach(KEY, self.to_table())

    def matches(self, settings: dict, weighted: bool = False) -> bool:
        """Is this the audit those settings make of the corpus (weighted or not)?"""
        return self.settings == settings and self.weighted == weighted

    def figures(self, k: int) -> AuditFigures:
        """What a report shows of the audit: rows, rows per label, threshold, prior, each label's max z*, its count
        of significant features, its top ``k`` features."""
        st = self.stats
        top = st.top_k(max(k, 1))
        return AuditFigures(dict(self.label_rows), st.threshold, str(self.prior), self.prior.record(),
                            rows=sum(self.label_rows.values()),
                            max_z={l: (top[l][0]["z"] if top[l] else None) for l in st.labels},
                            significant=st.significant_per_label(), top=top, weighted=self.weighted)

    def to_table(self) -> pa.Table:
        st = self.stats
        # weighted counts are sums of weights; others are counts of rows (held as floats by some counters)
        kind, cast = (pa.float64(), np.float64) if self.weighted else (pa.int64(), np.int64)
        n, counts = (np.rint(x).astype(cast) if cast is np.int64 else np.asarray(x, cast) for x in (st.n, st.counts))
        table = pa.table({"feature": st.features, "n": pa.array(n, kind),
                          "counts": pa.FixedSizeListArray.from_arrays(pa.array(counts.reshape(-1), kind),
                                                                      max(len(st.labels), 1)),
                          **({} if st.n_eff is None else {"n_eff": pa.array(st.n_eff, pa.float64())})})
        meta = {"labels": st.labels, "p0": np.asarray(st.p0).tolist(), "threshold": st.threshold,
                "min_count": st.min_count, "alpha": st.alpha, "prior": self.prior.record(),
                "prior_carried": self.prior.carried, "label_rows": self.label_rows, "settings": self.settings,
                "weighted": self.weighted}
        return table.replace_schema_metadata({METADATA: json.dumps(meta, default=str)})

    @classmethod
    def from_table(cls, table: pa.Table) -> "AuditRecord | None":
        """The record ``to_table`` wrote, or None for a table that is not one (another format, a damaged file)."""
        try:
            meta = json.loads((table.schema.metadata or {})[METADATA])
            labels = list(meta["labels"])
            counts = table["counts"].combine_chunks().flatten().to_numpy().reshape(table.num_rows, len(labels))
            st = ZStats(table["feature"].combine_chunks(), labels, counts, table["n"].to_numpy(),
                        np.asarray(meta["p0"], np.float64), float(meta["threshold"]), int(meta["min_count"]),
                        float(meta["alpha"]), table["n_eff"].to_numpy() if "n_eff" in table.column_names else None)
            prior = Prior.recorded(meta["prior"])
            if prior is None or len(st.p0) != len(labels):
                return None
            prior = Prior(prior.name, prior.reason, bool(meta.get("prior_carried")))
            return cls(st, prior, {str(l): int(v) for l, v in meta["label_rows"].items()}, dict(meta["settings"]),
                       bool(meta["weighted"]))
        except (KeyError, TypeError, ValueError, pa.ArrowException):
            return None
