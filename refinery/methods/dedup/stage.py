"""The ``dedup`` stage: exact, normalized and near-duplicate clusters of rows (``clusters``, over ``minhash``) as a
filter under the stage contract.

``prepare`` reads the input batch by batch, keeping each row's keys, label, split and shingles, not its texts
(``clusters.signed_rows``), finds every row's cluster and fate (``clusters.find_duplicates``), reads the texts of the
report's example pairs and the duplicates' partners' ids in passes of their own, and keeps only the duplicates'
numbers, partners' ids, kinds and similarities (what the workers of ``--engine ray`` receive); ``decide`` looks each
batch's rows up by their number in the input. ``FilterStage`` writes kept/ (with the input's rejects), rejected/
(each row with its ``reason``, ``duplicate_of``: the kept partner's id, and ``similarity``; a duplicate kept because
its cluster's labels conflict carries them in kept/ too), the verdict and the report.
"""
from __future__ import annotations

import dataclasses
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.messages import Message, NamedSplits, Refusal, Setting
from refinery.methods.dedup.config import DedupConfig
from refinery.pipeline.config import to_dict
from refinery.pipeline.executor import rows_among
from refinery.core.report_record import optional
from refinery.pipeline.filter import FilterReport, FilterStage, split
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage import set_column
from refinery.pipeline.stage_input import StageInput

TASK = "dedup"   # its checkpoints: the verified pairs of each group of LSH bands


@dataclasses.dataclass(frozen=True, kw_only=True)
class DedupReport(FilterReport):
    """dedup's report: every filter's entries, then its clusters' figures (``report.DedupSummary``: duplicate pairs,
    clusters, rows removed, pairs whose labels disagree, by split and label) and the LSH settings in words."""

    dedup: dict = dataclasses.field(default_factory=dict)
    lsh: str = ""


class DedupStage(FilterStage):
    """Remove exact, normalized and near-duplicate rows, one row kept per cluster.

    Near-duplicates by MinHash-LSH over word shingles, or by embedding cosine.

    Writes kept/ (with the input's rejects), rejected/ (each row with its kept partner's id in duplicate_of, its
    similarity and its reason) and report/ (clusters, duplicates per split pair, label conflicts, example pairs).
    """

    report_type = DedupReport

    name, Config = "dedup", DedupConfig
    needs = ("id", "text_a", "label")
    adds = ("duplicate_of", "similarity")
    prepare_as_task = True   # it reads the whole input: on Ray a task of its own, not the driver

    def reads_every_split(self) -> bool:
        """With ``prefer_split`` the splits are what it dedups across: every one is read, not ``train`` alone."""
        return self.config.prefer_split is not None

    def prepare(self, source: StageInput, out: StageOutput) -> None:
        """Every row's fate, and the report's figures; kept of the rows: the duplicates' partners only."""
        from refinery.io.memory import return_freed_memory
        from refinery.methods.dedup.clusters import find_duplicates, signed_rows
        from refinery.methods.dedup.report import example_rows, summarize

        rows = signed_rows((b.rows for b in source.iter_batches() if b.rows.num_rows), self.config.shingle_size)
        _refuse_unknown_split(self.config.prefer_split, rows.split_names)
        measure = self._cosine(source) if self.config.similarity == "cosine" else self._jaccard(source, out, rows)
        found = find_duplicates(rows, self.config, measure)
        shown = example_rows(found)
        self.summary = summarize(rows, found, self.config, source.rows_at(
            found.rows[shown].tolist() + found.partner[shown].tolist()), measure)
        marked = found.duplicate   # duplicates: dropped, or kept in a conflict
        self.marked_rows = found.rows[marked]
        self.marked_dropped = found.dropped[marked]
        self.kinds = found.kind[marked]
        self.similarity = pa.array(found.similarity[marked], pa.float32())
        partners = found.partner[marked]
        del rows, measure, found   # the rows' keys and shingles, before the pass for the partners' ids
        return_freed_memory()
        self.partner_ids = source.column_at(partners, "id")

    def _jaccard(self, source: StageInput, out: StageOutput, rows):
        """The Jaccard measure, its LSH bands held as many at once as the memory budget allows, each group's
        verified pairs kept in checkpoints (a rerun after a kill finds them again)."""
        from refinery.io.memory import memory_budget
        from refinery.methods.dedup.clusters import JaccardMeasure, bands_at_once, rows_nbytes

        at_once = bands_at_once(rows_nbytes(rows), len(rows), memory_budget())
        signature = {k: v for k, v in to_dict(self.config).items()
                     if k in ("threshold", "shingle_size", "permutations", "seed")}
        self.checkpoints = out.checkpoints(TASK, {"config": signature, "at_once": at_once})
        done = len(self.checkpoints.done())
        if done:
            self.resumed = f"resumed: {done} groups of LSH bands verified by the interrupted run before"
        return JaccardMeasure(rows.shingles, self.config, self.checkpoints, at_once)

    def _cosine(self, source: StageInput):
        """The cosine measure of ``similarity: cosine``: the input's texts embedded in a pass of their own."""
        from refinery.methods.dedup.clusters import FIELDS
        from refinery.methods.dedup.embedded import CosineMeasure
        from refinery.models.embeddings import EncoderSpec

        return CosineMeasure(lambda: (b.rows for b in source.iter_batches() if b.rows.num_rows),
                             [f for f in FIELDS if f in source.columns()], self.config.cosine_threshold,
                             EncoderSpec(self.config.model), source.engine, self.config.seed)

    def decide(self, batch: pa.Table) -> tuple[np.ndarray, list]:
        marked, place = rows_among(self.marked_rows, batch)
        dropped = marked & self.marked_dropped[place] if len(self.marked_rows) else marked
        return ~dropped, _Reasons(self, place)

    def annotate(self, batch: pa.Table, keep: np.ndarray) -> tuple[pa.Table, pa.Table]:
        """Each duplicate, dropped or kept (in a label-conflict cluster kept whole), with its partner's id and its
        similarity; null for the other rows."""
        marked, place = rows_among(self.marked_rows, batch)
        mask = pa.array(~marked)
        at = pa.array(place)
        rows = set_column(batch, "duplicate_of", pc.if_else(mask, pa.scalar(None, pa.string()),
                                                            self.partner_ids.take(at) if len(self.marked_rows)
                                                            else pa.nulls(len(place), pa.string())))
        rows = set_column(rows, "similarity", pc.if_else(mask, pa.scalar(None, pa.float32()),
                                                         self.similarity.take(at) if len(self.marked_rows)
                                                         else pa.nulls(len(place), pa.float32())))
        return split(rows, keep)

    def reason_kind(self, reason: str) -> str:
        return reason.split(" of ")[0]

    def report_details(self) -> tuple[dict, list]:
        from refinery.methods.dedup.report import details

        return details(self.summary, self.config)

    def remedy(self) -> Message:
        threshold, now = (("cosine_threshold", self.config.cosine_threshold) if self.config.similarity == "cosine"
                          else ("threshold", self.config.threshold))
        return Message("the duplicates dedup removed were of rows that carry a shortcut less often than the rows "
                       "kept: keep label-conflict clusters whole (", Setting("conflicts", "keep"),
                       f", now {self.config.conflicts}) or raise ", Setting(threshold), f" (now {now:g}) so fewer "
                       "rows are removed.")


def _refuse_unknown_split(preferred: str | None, splits: list) -> None:
    """A ``prefer_split`` that is none of the input's splits would keep each cluster's first row instead, silently
    (a typo of test keeping the training copies of test rows): refused, naming the splits."""
    import difflib

    if preferred is None or preferred in splits:
        return
    if not splits:
        raise Refusal(Setting("prefer_split", preferred), ": the input names no splits; give them as ",
                      NamedSplits(), code="missing-split")
    close = difflib.get_close_matches(preferred, [str(s) for s in splits], 1, 0.6)
    raise Refusal(Setting("prefer_split", preferred), ": the input has no split of that name (its splits: "
                  f"{', '.join(map(str, splits))})" + (f"; did you mean {close[0]}?" if close else ""),
                  code="missing-split")


class _Reasons:
    """Each dropped row's reason (written for the dropped rows only): its kind, its kept partner, its similarity."""

    def __init__(self, stage: DedupStage, place: np.ndarray):
        self.stage, self.place = stage, place

    def __getitem__(self, i: int) -> str:
        from refinery.methods.dedup.clusters import KINDS

        s, p = self.stage, self.place[i]
        measure = "cosine" if s.config.similarity == "cosine" else "Jaccard"
        return f"{KINDS[s.kinds[p]]} of {s.partner_ids[p].as_py()} ({measure} {s.similarity[p].as_py():.2f})"
