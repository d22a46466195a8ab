"""The ``aflite`` stage: AFLite (Le Bras et al. 2020, ``algorithm``) as a filter under the stage contract.

``prepare`` reads the input once into Φ (each field's word 1-2-grams hashed, sublinear tf, ``models.ngram``; or a
frozen encoder's sentence embeddings, cached by content, ``models.embeddings``) and runs the loop, checkpointing each
finished iteration's removals under the output (a killed run continues after the last one); ``decide`` looks each
batch's rows up by their number in the input. ``FilterStage`` writes kept/ (each row with its last
``predictability``), rejected/ (with the ``predictability`` and ``aflite_iteration`` that removed it), the verdict
(the kept rows' audit against the input's) and the report: the iterations, and predictability per label.
"""
from __future__ import annotations

import dataclasses
import numpy as np
import pyarrow as pa

from refinery.messages import Command, Message, Setting
from refinery.methods.aflite.config import AFLiteConfig
from refinery.pipeline.config import to_dict
from refinery.pipeline.executor import row_numbers
from refinery.core.report_record import optional
from refinery.pipeline.filter import FilterReport, FilterStage, split
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage import set_column
from refinery.pipeline.stage_input import StageInput

TASK = "aflite"   # its checkpoints: one table per finished iteration


@dataclasses.dataclass(frozen=True, kw_only=True)
class AFLiteReport(FilterReport):
    """AFLite's report (Le Bras et al. 2020, Algorithm 1): every filter's entries, then each iteration's figures
    (``algorithm.Round``: rows left, mean predictability, rows reaching τ, removed, removed per label), why the loop
    stopped, the iterations read back from a killed run's checkpoints, the representation Φ in words, and the
    encoder's counts where Φ is embeddings."""

    iterations: list = ()
    stopped: str = ""
    resumed_iterations: int = 0
    representation: str = ""
    embeddings: dict | None = optional()


class AFLiteStage(FilterStage):
    """AFLite (Le Bras et al. 2020): remove the rows cheap linear models predict too easily.

    Writes kept/ (with the input's rejects), rejected/ (each row with its predictability and the iteration that
    removed it) and report/.
    """

    report_type = AFLiteReport

    name, Config = "aflite", AFLiteConfig
    prepare_as_task = True   # its loop is one process: on Ray a task of its own, not the driver
    needs = ("id", "text_a", "label")
    adds = ("predictability",)
    embedded = None   # with embeddings: how many distinct texts were embedded and read from the cache

    def prepare(self, source: StageInput, out: StageOutput) -> None:
        """Φ of every row, in the order the batches come, and the loop (``algorithm.adversarial_filter``)."""
        from refinery.methods.aflite.algorithm import Removal, adversarial_filter
        from refinery.progress import progress

        X, y, labels, self.embedded = _represent(source, self.config)
        self.checkpoints = out.checkpoints(TASK, {"config": to_dict(self.config)})
        names = self.checkpoints.done()
        done = _contiguous([_removal_of(self.checkpoints.get(name)) for name in names if name.startswith("iter-")])
        scores = self.checkpoints.get(f"scores-{done[-1].iteration:04d}") if done else None
        if scores is None:   # every row's predictability after the last: without it, the iterations are redone
            done = []

        def keep(removal: Removal, predictability: np.ndarray) -> None:
            """The iteration, with its figures, then every row's predictability after it (the previous one's
            removed): a rerun replays them all and reports the whole run."""
            self.checkpoints.put(f"iter-{removal.iteration:04d}", _removal_table(removal))
            self.checkpoints.put(f"scores-{removal.iteration:04d}", pa.table({"predictability": predictability}))
            if removal.iteration > 1:
                self.checkpoints.remove(f"scores-{removal.iteration - 1:04d}")

        with progress(desc="aflite: iterations", unit=" iteration") as bar:
            self.filtering = adversarial_filter(X, y, labels, self.config, done, keep, bar,
                                                scores["predictability"].to_numpy() if done else None)
        if self.filtering.resumed:
            self.resumed = f"resumed after iteration {self.filtering.resumed} of the interrupted run before"
        self.labels = labels

    def decide(self, batch: pa.Table) -> tuple[np.ndarray, list]:
        at = row_numbers(batch)
        removed = self.filtering.removed_at[at]
        p = self.filtering.predictability[at]
        tau = self.config.tau
        return removed == 0, _Reasons(removed, p, tau)

    def annotate(self, batch: pa.Table, keep: np.ndarray) -> tuple[pa.Table, pa.Table]:
        at = row_numbers(batch)
        p = self.filtering.predictability[at]
        rows = set_column(batch, "predictability", pa.array(np.where(np.isnan(p), None, p), pa.float32()))
        kept, dropped = split(rows, keep)
        iteration = self.filtering.removed_at[at][~keep]
        return kept, set_column(dropped, "aflite_iteration", pa.array(iteration, pa.int32()))

    def reason_kind(self, reason: str) -> str:
        return reason.split(" (")[0]

    def report_details(self) -> tuple[dict, list]:
        """The iterations (rows left, scored, reaching τ, removed per label) and the removed rows' predictability
        per label, as a histogram (rows from zero)."""
        from dataclasses import asdict

        from refinery.report import figures
        from refinery.report.page import figure, note, table

        f = self.filtering
        rounds = [asdict(r) for r in f.rounds]
        removed = f.removed_at > 0
        edges = np.linspace(self.config.tau, 1.0, 11) if self.config.tau < 1 else np.array([0.999, 1.0])
        counts = np.histogram(f.predictability[removed], bins=edges)[0]
        svg = figures.histogram(edges, counts, "Predictability of the removed rows", "predictability p(i)")
        reaching = f"p ≥ τ ({self.config.tau:g})"
        rows = [{"iteration": r["iteration"], "rows left": r["rows"], "mean p": r["mean_predictability"],
                 reaching: r["reaching_tau"], "removed": r["removed"],
                 **{l: r["removed_by_label"][l] for l in self.labels}} for r in rounds]
        return ({"iterations": rounds, "stopped": f.stopped, "resumed_iterations": f.resumed,
                 "representation": self._representation(),
                 **({"embeddings": self.embedded.counts()} if self.embedded is not None else {})},
                [("Iterations (Le Bras et al. 2020, Algorithm 1)", table(rows) + note(
                    "Per iteration: the rows left, their mean predictability, those whose predictability reached τ, "
                    f"the rows removed and, per label, how many of them. Stopped: {f.stopped}. Φ: "
                    f"{self._representation()}.")),
                 ("Predictability", figure(svg, "Each removed row's predictability: the share of the held-out "
                                                "classifiers of its iteration that predicted its label."))])

    def _representation(self) -> str:
        c = self.config
        if self.embedded is None:
            return (f"hashed word 1-2-grams of the {c.inputs}, 2^{c.hash_bits} columns per field; multinomial naive "
                    "Bayes")
        what = "the hypothesis" if c.inputs == "hypothesis" else "the pair, [u, v, |u−v|, u·v]"
        return (f"{c.model} embeddings (mean-pooled, unit length, max length {c.max_length}) of {what}; logistic "
                f"regression; {self.embedded.provenance()}")

    def remedy(self) -> Message:
        return Message("the rows AFLite keeps are those its linear models find hard, and they can carry a word "
                       "shortcut more often: raise ", Setting("tau"), f" (now {self.config.tau:g}) or ",
                       Setting("target_share"), f" (now {self.config.target_share:g}), or z-filter the kept rows (",
                       Command("zfilter", on="kept"), ").")


class _Reasons:
    """Each dropped row's reason, written only for the rows the filter drops."""

    def __init__(self, removed: np.ndarray, predictability: np.ndarray, tau: float):
        self.removed, self.predictability, self.tau = removed, predictability, tau

    def __getitem__(self, i: int) -> str:
        return (f"predictability ≥ tau {self.tau:g} (p = {self.predictability[i]:.3f}, iteration "
                f"{self.removed[i]})")


def _removal_table(removal) -> pa.Table:
    """An iteration's checkpoint: its removed rows and their predictability; its figures and why the loop ended
    after it (if it did) in the table's metadata."""
    import json
    from dataclasses import asdict

    return pa.table({"iteration": pa.array(np.full(len(removal.rows), removal.iteration), pa.int32()),
                     "row": pa.array(removal.rows, pa.int64()), "predictability": pa.array(removal.predictability)},
                    metadata={"iteration": str(removal.iteration), "round": json.dumps(asdict(removal.round)),
                              "stopped": removal.stopped})


def _removal_of(table: pa.Table):
    """The ``Removal`` an iteration's checkpoint holds (``_removal_table``)."""
    import json

    from refinery.methods.aflite.algorithm import Removal, Round

    meta = table.schema.metadata or {}
    if b"round" not in meta:   # a checkpoint without its figures: not replayed (the iterations are redone)
        return Removal(0, np.zeros(0, np.int64), np.zeros(0, np.float32))
    return Removal(int(meta[b"iteration"]), table["row"].to_numpy(), table["predictability"].to_numpy(),
                   Round(**json.loads(meta[b"round"])), meta[b"stopped"].decode())


def _contiguous(done: list) -> list:
    """The checkpointed iterations 1, 2, … without a gap (a later one after a gap is not trusted)."""
    ordered, expected = [], 1
    for removal in sorted(done, key=lambda r: r.iteration):
        if removal.iteration != expected:
            break
        ordered.append(removal)
        expected += 1
    return ordered


def _represent(source: StageInput, config: AFLiteConfig):
    """(Φ of every row: n-grams laid out on disk (``io.stacked_rows.RowBlocks``) or dense embeddings, its label codes,
    the labels sorted, the texts' provenance (``Embedded``; None for n-grams)) of ``source``, read batch by batch in
    order."""
    tables = (b.rows for b in source.iter_batches() if b.rows.num_rows)
    if config.representation == "embeddings":
        from refinery.models.embeddings import EncoderSpec, embedded_rows

        rows = embedded_rows(tables, config.inputs, EncoderSpec(config.model, config.max_length), source.engine,
                             "aflite: embed")
        return rows.features, rows.y, rows.labels, rows.texts
    from refinery.methods.aflite.naive_bayes import BLOCK_ROWS
    from refinery.models.ngram import HashedCorpus

    corpus = HashedCorpus(tables, None, config.inputs, BLOCK_ROWS, bits=config.hash_bits, by_frequency=False,
                          desc="aflite: n-grams")
    return corpus.rows, corpus.y_as_read(), corpus.classes, None
