"""The ``confidence`` stage, a confidence filter (Wu et al. 2022 §2.2.2; IBADR step 4): keep a row only if
p_M(label | text) > τ_label.

τ is given (the paper's 0.95; one τ for every label), or ``auto`` (the default): per label l, the quantile of
p_M(l | x) over l's rows that keeps ``keep_share`` of them (``scoring.share_tau``), so every label keeps its most
plausible rows whatever the model's calibration. A τ that would keep no row, or one label's only, is refused
before a row is written (``scoring.refuse_unusable``).

p_M comes from a column, a saved classifier, or a classifier cross-fitted on the input itself
(``model: ngram`` or ``transformer``): each row is scored by a model fit on the other K−1 folds,
so no row is judged by a model that saw it. The n-gram model is a logistic regression on hashed
TF-IDF n-grams, fit by averaged SGD in a few passes over the rows (``solver: sgd``, the K fold models
side by side, on Ray tasks under the Ray engine) or by L-BFGS to convergence (``solver: lbfgs``).

With ``label_issues``, confident learning decides instead of τ (``issues``): a row is dropped iff its given label
is likely wrong by the cross-fitted p_M of every label, with the label it likely has.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa

from refinery.messages import Command, Message, Setting
from refinery.methods.confidence.config import AUTO, ConfidenceConfig
from refinery.methods.confidence.issues import (
    LABEL_ISSUE,
    IssueReasons,
    find_label_issues,
    issue_kind,
    pick_examples,
)
from refinery.methods.confidence.scoring import Reasons, refuse_unusable, source_confidence, tau_text, thresholds
from refinery.pipeline.config import to_dict
from refinery.pipeline.executor import FilterWritten, row_numbers
from refinery.core.report_record import optional
from refinery.pipeline.filter import FilterReport, FilterStage, split
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage import set_column
from refinery.pipeline.stage_input import StageInput


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConfidenceReport(FilterReport):
    """The confidence filter's report: every filter's entries, then τ and the rows and kept rows of each label
    (``tau_by_label``), or, with label issues, the rows flagged per label and pair with examples (``label_issues``)."""

    tau_by_label: dict | None = optional()
    label_issues: dict | None = optional()


class ConfidenceStage(FilterStage):
    """Keep the rows whose task-model confidence in their label exceeds tau (or whose label is no label issue).

    Writes kept/ (with the input's rejects) and rejected/, each row with its confidence (a label issue with its
    ``suggested_label``), and report/.
    """

    report_type = ConfidenceReport

    name, Config = "confidence", ConfidenceConfig
    needs = ("id", "text_a", "label")
    adds = ("confidence",)
    prepare_as_task = True   # it reads the whole input: on Ray a task of its own, not the driver

    def prepare(self, source: StageInput, out: StageOutput) -> None:
        """p_M(label | text) of every row, in the order the batches come (cross-fitting sees the whole input), and
        τ per label (``thresholds``); a τ that keeps no row or one label's only is refused here, before a row is
        written.

        A cross-fitting that fits a model per fold keeps each finished fold's scores under ``out``, so a
        killed run continues from them. On Ray it runs as a task of its own (``prepare_as_task``), the fold
        models on the cluster: the driver receives the scores only.
        """
        self.checkpoints, self.resumed = None, ""
        if self.config.fits_per_fold:
            self.checkpoints = out.checkpoints(self.name, {"config": to_dict(self.config)})
            done = len(self.checkpoints.done())
            if done:
                self.resumed = f"resumed: {done} of {self.config.folds} folds' scores from the interrupted run before"
        scores = source_confidence(source, self.config, self.checkpoints)
        self._confidence, self._label = scores.confidence, scores.label
        self.issues = self.thresholds = None
        if self.config.label_issues:   # keeps a row of every label (cleanlab's min_examples_per_class)
            self.issues = find_label_issues(scores)
            pick_examples(self.issues, scores.confidence, (b.rows for b in source.iter_batches() if b.rows.num_rows))
            return
        self.thresholds = thresholds(scores, self.config.tau, self.config.keep_share)
        refuse_unusable(scores, self.thresholds, self.config)

    def annotate(self, batch: pa.Table, keep: np.ndarray) -> tuple[pa.Table, pa.Table]:
        """The rows with their ``confidence``; a label issue's with its ``suggested_label`` too."""
        rows = row_numbers(batch)
        kept, dropped = split(set_column(batch, "confidence", pa.array(self._confidence[rows])), keep)
        if self.issues is None:
            return kept, dropped
        suggested = np.array(self.issues.labels, dtype=object)[self.issues.suggested[rows[~keep]]]
        return kept, set_column(dropped, "suggested_label", pa.array(suggested.tolist(), batch["label"].type))

    def decide(self, batch: pa.Table) -> tuple[np.ndarray, list]:
        """Keep iff p_M(label | text) > τ_label, each row against its own label's τ; with label issues, iff the
        row's label is none."""
        rows = row_numbers(batch)
        if self.issues is not None:
            return ~self.issues.flagged[rows], IssueReasons(self.issues, self._label, self._confidence, rows)
        conf, tau = self._confidence[rows], self.thresholds.tau[self._label[rows]]
        return conf > tau, Reasons(conf, tau)

    def settings_in_effect(self) -> dict:
        return self.config.in_effect()

    def report_details(self) -> tuple[dict, list]:
        """τ per label in effect and the rows each label kept (``label_issue_details`` with label issues)."""
        from refinery.report.page import note, table

        if self.issues is not None:
            return self.label_issue_details()
        chosen = self.thresholds
        rows = [{"label": l, "tau": t["tau"], "rows": t["rows"], "kept": t["kept"]}
                for l, t in chosen.by_label().items()]
        how = (f"auto: each label's τ is the quantile of its rows' p_M(label | text) that keeps "
               f"{chosen.keep_share:.0%} of them" if chosen.keep_share is not None else "given: one τ for every label")
        return {"tau_by_label": chosen.by_label()}, [("τ per label", table(rows) + note(
            f"A row is kept iff p_M(label | text) > τ of its label; τ {how}."))]

    def label_issue_details(self) -> tuple[dict, list]:
        """The rows flagged per label (with their share), per (given → suggested) pair, and examples."""
        from refinery.report import format as fmt
        from refinery.report.page import note, table

        found = self.issues
        by_label = found.by_label()
        rows = [{"label": l, **c, "share flagged": c["flagged"] / max(c["rows"], 1)} for l, c in by_label.items()]
        pairs = found.by_pair()
        how = note("Confident learning (Northcutt et al. 2021) over the cross-fitted p_M(l | x) of every label, by "
                   "cleanlab's find_label_issues (prune by noise rate): a row is dropped iff its given label is likely "
                   "wrong; its suggested label is the likeliest other one.")
        return ({"label_issues": {"flagged": int(found.pairs.sum()), "by_label": by_label, "pairs": pairs,
                                  "examples": found.examples}},
                [("Label issues per label", table(rows, formats={"share flagged": fmt.percent}) + how),
                 ("Label issues: given → suggested", table(pairs) if pairs else note("No row was flagged.")),
                 ("Label issues: examples", table(found.examples) + note(
                     "The flagged rows with the widest margin p_M(suggested) − p_M(given); every flagged row is in "
                     "rejected/ with its suggested_label.") if found.examples else note("No row was flagged."))])

    def result(self, written: FilterWritten, audits, out: StageOutput):
        """The filter's result, its headline and first line naming τ per label and the rows each kept (the rows
        flagged per pair, with label issues)."""
        done = super().result(written, audits, out)
        rows_line, sep, rest = done.headline.partition("; ")
        taus = (self.thresholds or self.issues).line()
        return dataclasses.replace(done, headline=f"{rows_line} ({taus}){sep}{rest}",
                                   lines=(f"{done.lines[0]} ({taus})", *done.lines[1:]))

    def few_kept_hint(self) -> Message | str:
        """Where p_M lies against a τ given: the rows' median and highest confidence (auto keeps the share asked)."""
        if not len(self._confidence) or self.config.auto:
            return ""
        return Message(f": p_M(label | text) has median {float(np.median(self._confidence)):.3f} and reaches "
                       f"{self._confidence.max():.3f}, against tau {tau_text(self.config.tau)}; ",
                       Setting("tau", AUTO), f" keeps {self.config.keep_share:.0%} of each label's rows")

    def reason_kind(self, reason: str) -> str:
        """The reason without the row's p_M: its label's τ (one group per τ), or a label issue's pair."""
        if reason.startswith(LABEL_ISSUE):
            return issue_kind(reason)
        return "p_M(label | text) <= " + reason.rpartition(" <= ")[2]

    def remedy(self) -> Message:
        if self.issues is not None:
            return Message("a model is most confident where a shortcut gives the label away, so the rows it calls "
                           "mislabeled are often the shortcut's counter-examples: leave out ",
                           Setting("label_issues", True), ", or z-filter the kept rows (", Command("zfilter", on="kept"), ").")
        lower = (Message("a larger ", Setting("keep_share"), f" (now {self.config.keep_share:g})") if self.config.auto
                 else Message("a lower ", Setting("tau"), f" (now {tau_text(self.config.tau)})"))
        return Message("a model is most confident where a shortcut gives the label away, so the rows it keeps carry "
                       "the shortcut more often: ", lower, ", or z-filter the kept rows (", Command("zfilter", on="kept"), ").")
