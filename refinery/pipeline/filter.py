"""``FilterStage``: a stage that keeps or drops each row, with the writers, rejects and accounting done once.

A filter implements ``decide(batch) -> (keep, reasons)`` (datatrove's filter and exclusion writer are the
model) and, when it must see the whole input first (a cross-fitted model), ``prepare(source, out)``. The base
streams the input's batches through it into ``kept/`` (the input's rejects carried in its rejects) and
``rejected/`` (each row with its ``reason``), and writes ``report/`` with the rows kept and dropped per label
and the commonest reasons. Rows in = kept + filtered out + input rejects.
"""
from __future__ import annotations

import json
from abc import abstractmethod
from collections import Counter

import numpy as np
import pyarrow as pa

from refinery.io.corpus import CorpusWriter
from refinery.io.storage import AtomicDir, join
from refinery.pipeline.config import to_dict
from refinery.pipeline.stage import Output, Stage, StageInput, StageResult, set_column
from refinery.report import format as fmt
from refinery.report.page import Report, config_table, corpus_name, fields, note, table

TOP_REASONS = 20
MIN_KEPT_SHARE = 0.1   # a filter keeping less warns: its settings likely do not suit the data


class FilterStage(Stage):
    output = Output.KEPT

    def prepare(self, source: StageInput, out: str) -> None:
        """Look at the whole input before the first ``decide`` (nothing by default); long work may keep
        checkpoints under ``out`` (``io.checkpoints``)."""

    @abstractmethod
    def decide(self, batch: pa.Table) -> tuple[np.ndarray, list]:
        """(keep: one bool per row, reasons: why each row would be dropped; read for dropped rows only)."""

    def reason_kind(self, reason: str) -> str:
        """The group a reason is counted under in the report (the reason itself by default; a filter whose
        reasons carry a per-row value groups them)."""
        return reason

    def annotate(self, batch: pa.Table) -> pa.Table:
        """The batch as written to kept/ and rejected/, after ``decide`` saw it (a filter may add its score, with
        ``set_column``: a column of the same name from an earlier stage is replaced)."""
        return batch

    def run(self, source: StageInput, out: str) -> StageResult:
        self.prepare(source, out)
        kept_by, dropped_by, reasons = Counter(), Counter(), Counter()
        input_rejects = 0
        settings = {self.name: to_dict(self.config)}
        options = {"config": settings, "storage_options": source.opts.storage_options, "inputs": source.paths}
        with CorpusWriter(join(out, "kept"), **options) as kept_w, \
                CorpusWriter(join(out, "rejected"), **options) as dropped_w:
            for batch in source.iter_batches():
                if batch.rejects.num_rows:
                    kept_w.write(rejects=batch.rejects)
                    input_rejects += batch.rejects.num_rows
                if not batch.rows.num_rows:
                    continue
                keep, why = self.decide(batch.rows)
                keep = np.asarray(keep, bool)
                rows = self.annotate(batch.rows)
                dropped = np.nonzero(~keep)[0]
                why = [str(why[i]) for i in dropped]
                kept_w.write(rows.filter(pa.array(keep)))
                dropped_w.write(set_column(rows.take(pa.array(dropped)), "reason", pa.array(why, pa.string())))
                labels = np.asarray(batch.rows["label"].to_pylist(), object)
                kept_by.update(labels[keep].tolist())
                dropped_by.update(labels[~keep].tolist())
                reasons.update(map(self.reason_kind, why))
            if not kept_by and not dropped_by:
                kept_w.commit_all_rejected(source.paths)   # the rejects stay in kept/, named by the error
            kept, dropped = kept_w.commit()["rows"], dropped_w.commit()["rows"]
        report = {"kept": kept, "filtered_out": dropped, "input_rejects": input_rejects,
                  "by_label": {l: {"kept": kept_by[l], "filtered out": dropped_by[l]}
                               for l in sorted(set(kept_by) | set(dropped_by))},
                  "reasons": dict(reasons.most_common(TOP_REASONS)), "config": to_dict(self.config)}
        self._write_report(report, out, source.opts.storage_options, source.paths)
        headline = f"kept {kept:,}, filtered out {dropped:,}"
        share = kept / max(kept + dropped, 1)
        warnings = (f"kept {share:.1%} of the rows ({kept:,} of {kept + dropped:,}); check the settings "
                    f"({', '.join(f'{k} {v}' for k, v in to_dict(self.config).items() if v is not None)})",) \
            if share < MIN_KEPT_SHARE else ()
        return StageResult(kept + dropped + input_rejects,
                           {"kept": kept, "filtered out": dropped, "input rejects": input_rejects},
                           report, headline, (headline,), warnings)

    def _write_report(self, report: dict, out: str, storage_options: dict, inputs: list) -> None:
        doc = (type(self).__doc__ or self.name).strip().split("\n")[0]
        by_label = [{"label": l, **c, "share kept": c["kept"] / max(c["kept"] + c["filtered out"], 1)}
                    for l, c in report["by_label"].items()]
        page = (Report(f"{self.name}: {doc.rstrip('.')}", corpus_name(inputs, storage_options), inputs)
                .section("Rows", fields({k.replace("_", " "): report[k]
                                         for k in ("kept", "filtered_out", "input_rejects")}))
                .section("Rows per label", table(by_label, formats={"share kept": fmt.percent}))
                .section("Why rows were filtered out", table(
                    [{"reason": r, "rows": n} for r, n in report["reasons"].items()]),
                    note(f"The {TOP_REASONS} commonest reasons; each filtered-out row carries its own in "
                         "rejected/.") if len(report["reasons"]) >= TOP_REASONS else "")
                .section("Configuration", config_table(report["config"])))
        with AtomicDir(join(out, "report"), storage_options) as d:
            d.write_text("report.json", json.dumps(report, indent=1, default=str))
            d.write_text("report.html", page.html())
            d.commit()
