"""The ``decontaminate`` stage: the training rows that overlap an evaluation set (``overlap``) removed, as a filter
under the stage contract.

``prepare`` reads every evaluation set (as compare reads its, through each set's preset or the input's mapping) once
and the input in chunks of ``CHUNK_ROWS`` rows (``chunks``: the memory of a chunk's texts, not the input's), finds
the contaminated rows and the report's figures, and keeps only their numbers, evaluation
sets and evaluation rows' ids (what the workers of ``--engine ray`` receive); ``decide`` looks each batch's rows up by
their number in the input. ``FilterStage`` writes kept/ (with the input's rejects), rejected/ (each row with its
``reason``, ``eval_set`` and ``eval_id``: the evaluation row it overlaps), the verdict and the report.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa

from refinery.messages import Message, Refusal, Setting
from refinery.methods.decontaminate.config import DecontaminateConfig
from refinery.pipeline.executor import rows_among
from refinery.core.report_record import optional
from refinery.pipeline.filter import FilterReport, FilterStage, split
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage import set_column
from refinery.pipeline.stage_input import SideInput, StageInput

CHUNK_ROWS = 1_000_000   # training rows matched against an evaluation set at once


def chunks(source: StageInput, rows: int = CHUNK_ROWS):
    """The input's good rows as tables of text_a (and text_b where paired) of about ``rows`` rows, in the order
    ``prepare`` numbers them."""
    parts, held = [], 0
    for batch in (b.rows for b in source.iter_batches() if b.rows.num_rows):
        parts.append(batch.select([c for c in ("text_a", "text_b") if c in batch.column_names]))
        held += batch.num_rows
        if held >= rows:
            yield pa.concat_tables(parts, promote_options="permissive")
            parts, held = [], 0
    if parts:
        yield pa.concat_tables(parts, promote_options="permissive")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DecontaminateReport(FilterReport):
    """decontaminate's report: every filter's entries, then per evaluation set the training rows that overlap it
    and how (``contamination``) and the overlap rule in words."""

    contamination: list = ()
    rule: str = ""


class DecontaminateStage(FilterStage):
    """Remove the training rows that share an n-gram of N words (or are near-duplicates) of an evaluation set's rows.

    Writes kept/ (with the input's rejects), rejected/ (each row with the evaluation set and row it overlaps, and its
    reason) and report/ (contamination per evaluation set, and the rows behind it).
    """

    report_type = DecontaminateReport

    name, Config = "decontaminate", DecontaminateConfig
    needs = ("id", "text_a", "label")
    prepare_as_task = True   # it reads the whole input: on Ray a task of its own, not the driver

    def also_reads(self) -> list[str]:
        """The evaluation sets: part of its fingerprint (``--mode skip`` runs again when one changed)."""
        return [p for e in self.config.eval_sets() for p in e.paths]

    def prepare(self, source: StageInput, out: StageOutput) -> None:
        """Each evaluation set read and matched against the training rows; kept: the contaminated rows' matches."""
        from refinery.methods.decontaminate.overlap import Match, contamination
        from refinery.methods.decontaminate.report import EXAMPLES, summarize

        sets = []
        for e in self.config.eval_sets():
            mapping = e.mapping(source.mapping)   # every row with a text counts: an overlap has no label
            hint = "" if e.preset else Message(" (an evaluation set's preset goes after its path: ",
                                               Setting("against", f"{e.name}=PATH:PRESET"), ")")
            try:
                table, rejects = source.read_side(SideInput(tuple(e.paths), mapping and dataclasses.replace(
                    mapping, label_set=None), Message(Setting("against", e.name))))
            except ValueError as error:   # named by the --against it came from
                raise Refusal(*error.args, hint, code=getattr(error, "code", "bad-input")) from None
            if not table.num_rows:
                raise Refusal(e.no_good_rows(rejects), code="all-rejected")
            fields = [table[c].combine_chunks() for c in ("text_a", "text_b") if c in table.column_names
                      and table[c].null_count < table.num_rows]
            sets.append((e, table, rejects.num_rows, fields, []))
        train_rows = 0
        for chunk in chunks(source):
            train = [chunk[c].combine_chunks() for c in ("text_a", "text_b") if c in chunk.column_names
                     and chunk[c].null_count < chunk.num_rows]
            for _, _, _, fields, matches in sets:
                m = contamination(train, fields, self.config)
                matches.append(Match(m.rows + train_rows, m.eval_rows, m.how, m.similarity, m.behind))
            train_rows += chunk.num_rows
        self.sets, firsts = [], []
        for e, table, rejected, _, matches in sets:
            if not train_rows:
                continue
            match = Match(*(np.concatenate([getattr(m, f) for m in matches]) for f in
                            ("rows", "eval_rows", "how", "similarity", "behind")))
            self.sets.append(summarize(e.name, e.paths, table, rejected, match,
                                       source.rows_at(match.rows[:EXAMPLES].tolist()), train_rows))
            firsts.append((match, table["id"].combine_chunks().cast(pa.string())))
        self._name_first_matches(firsts, [e.name for e, *_ in sets])
        if train_rows and len(self.dropped_rows) == train_rows:   # the next audit could judge nothing: refused
            raise Refusal(f"decontaminate would keep no row: every one of the {train_rows:,} training rows "
                          f"overlaps {', '.join(sorted(sets[k][0].name for k in np.unique(self.in_set)))}: the "
                          "training corpus is part of the evaluation set (or the set itself); nothing was written",
                          code="too-few-rows")

    def _name_first_matches(self, firsts: list, names: list) -> None:
        """Each contaminated row once, in input order, named with the first evaluation set (in the order given)
        that it matches and that set's row: from ``firsts``, (its ``Match``, its rows' ids) per set in order. Per
        row only numbers (its set's place, its evaluation row's among the sets' ids, how, the similarity): a corpus
        may have millions of rows contaminated."""
        rows = np.concatenate([np.zeros(0, np.int64)] + [m.rows for m, _ in firsts])
        in_set = np.concatenate([np.zeros(0, np.int16)] + [np.full(len(m.rows), k, np.int16)
                                                           for k, (m, _) in enumerate(firsts)])
        offsets = np.cumsum([0] + [len(ids) for _, ids in firsts])
        eval_at = np.concatenate([np.zeros(0, np.int64)] + [m.eval_rows + offsets[k]
                                                             for k, (m, _) in enumerate(firsts)])
        order = np.lexsort((in_set, rows))
        first = order[np.r_[True, rows[order][1:] != rows[order][:-1]]] if len(order) else order
        self.dropped_rows, self.in_set, self.eval_at = rows[first], in_set[first], eval_at[first].astype(np.int32)
        self.set_names = pa.array(names, pa.string())
        self.eval_ids = pa.concat_arrays([ids for _, ids in firsts]) if firsts else pa.array([], pa.string())
        self.how = np.concatenate([np.zeros(0, np.int8)] + [m.how for m, _ in firsts])[first]
        self.similarity = np.concatenate([np.zeros(0)] + [m.similarity for m, _ in firsts])[first]

    def decide(self, batch: pa.Table) -> tuple[np.ndarray, list]:
        dropped, place = rows_among(self.dropped_rows, batch)
        return ~dropped, _Reasons(self, place)

    def annotate(self, batch: pa.Table, keep: np.ndarray) -> tuple[pa.Table, pa.Table]:
        kept, rejected = split(batch, keep)
        _, place = rows_among(self.dropped_rows, batch)
        at = place[~keep]
        rejected = set_column(rejected, "eval_set", self.set_names.take(pa.array(self.in_set[at])))
        return kept, set_column(rejected, "eval_id", self.eval_ids.take(pa.array(self.eval_at[at])))

    def reason_kind(self, reason: str) -> str:
        return reason.split(" row ")[0]

    def report_details(self) -> tuple[dict, list]:
        from refinery.methods.decontaminate.report import details

        return details(self.sets, self.config)

    def remedy(self) -> Message:
        return Message("the training rows that overlap the evaluation sets carried the shortcut less often than the "
                       "rows kept: the overlap is the evaluation sets' own; raise ", Setting("ngram"),
                       f" (now {self.config.ngram}) to remove only longer overlaps.")


class _Reasons:
    """Each dropped row's reason (written for the dropped rows only): the evaluation set and row it overlaps, how."""

    def __init__(self, stage: DecontaminateStage, place: np.ndarray):
        from refinery.methods.decontaminate.overlap import HOW, NEAR

        self.stage, self.place, self.words, self.near = stage, place, HOW, NEAR

    def __getitem__(self, i: int) -> str:
        s, p = self.stage, self.place[i]
        how = self.words[s.how[p]]
        if s.how[p] == self.near:
            how += f", Jaccard {s.similarity[p]:.2f}"
        return (f"contaminates {s.set_names[int(s.in_set[p])].as_py()} row {s.eval_ids[int(s.eval_at[p])].as_py()} "
                f"({how})")
