"""The ``datamap`` stage: training dynamics per row (``dynamics``) and, as a filter, the region of the data map
it keeps (Swayamdipta et al. 2020).

``prepare`` reads the input once (hashed word n-grams, a frozen encoder's cached sentence embeddings, or the rows
for fine-tuning: ``learners``), trains the task model epoch by epoch, checkpointing each epoch's record and model
under the output (a killed run resumes after its last epoch), and selects the rows to keep; ``decide`` looks each
batch's rows up by their number in the input. Every row, kept or not, carries its dynamics (``datamap_confidence``,
``datamap_variability``, ``datamap_correctness``, ``datamap_forgetfulness``). The report: the data map, the epochs,
and each label's share in every region.
"""
from __future__ import annotations

import dataclasses
import numpy as np
import pyarrow as pa

from refinery.messages import Command, Message, Setting
from refinery.methods.datamap.config import DataMapConfig
from refinery.pipeline.config import to_dict
from refinery.pipeline.executor import row_numbers
from refinery.core.report_record import optional
from refinery.pipeline.filter import FilterReport, FilterStage, split
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage import set_column
from refinery.pipeline.stage_input import StageInput

TASK = "datamap"   # its checkpoints: epoch-NNNN (each row's p(gold), right) and model-NNNN (the model after it)
COLUMNS = ("datamap_confidence", "datamap_variability", "datamap_correctness", "datamap_forgetfulness")
KEY = {"ambiguous": "variability", "hard": "confidence", "easy": "confidence"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataMapReport(FilterReport):
    """The data map's report (Swayamdipta et al. 2020): every filter's entries, then each epoch's training accuracy,
    each label's rows per region (easy, ambiguous, hard), the epochs read back from a killed run, the quartiles of
    confidence and variability, the task model in words, and the encoder's counts where it embeds."""

    epochs: list = ()
    regions_by_label: list = ()
    resumed_epochs: int = 0
    confidence: dict = dataclasses.field(default_factory=dict)
    variability: dict = dataclasses.field(default_factory=dict)
    task_model: str = ""
    embeddings: dict | None = optional()


class DataMapStage(FilterStage):
    """Data maps (Swayamdipta et al. 2020): keep the most ambiguous, hard-to-learn or easy-to-learn rows.

    Writes kept/ (with the input's rejects) and rejected/, every row with its training dynamics, and report/ with
    the data map.
    """

    report_type = DataMapReport

    name, Config = "datamap", DataMapConfig
    prepare_as_task = True   # its loop is one process: on Ray a task of its own, not the driver
    needs = ("id", "text_a", "label")
    adds = COLUMNS
    embedded = None   # with the embeddings backend: how many distinct texts were embedded and read from the cache

    def prepare(self, source: StageInput, out: StageOutput) -> None:
        from refinery.methods.datamap import learners
        from refinery.methods.datamap.dynamics import dynamics_of, select, train_epochs
        from refinery.progress import progress

        c = self.config
        learner = self._learner(source)
        training = {k: v for k, v in to_dict(c).items() if k not in ("keep", "share")}   # a new selection: no retrain
        training["block_rows"] = learners.BLOCK_ROWS   # the n-gram model's epochs take the rows block by block
        self.checkpoints = out.checkpoints(TASK, {"training": training})
        done = self._done()
        with progress(total=c.epochs, desc=f"datamap: {c.epochs} epochs", unit=" epoch") as bar:
            records = train_epochs(learner, self.y, c.epochs, done, self._keep_epoch, bar)
        del learner   # its rows' features: not held while the dynamics are summed
        self.dynamics = dynamics_of(records, len(self.y), len(done))
        self.kept = select(self.dynamics, c)
        if self.dynamics.resumed:
            self.resumed = f"resumed after epoch {self.dynamics.resumed} of the interrupted run before"

    def _learner(self, source: StageInput):
        """The task model of ``backend`` over every row of the input, read once in order (``learners``); sets the rows'
        label codes and the labels."""
        from refinery.methods.datamap import learners

        c = self.config
        tables = (b.rows for b in source.iter_batches() if b.rows.num_rows)
        if c.backend == "ngram":
            from refinery.models.ngram import HashedCorpus

            corpus = HashedCorpus(tables, c.seed, c.inputs, learners.BLOCK_ROWS, bits=c.hash_bits, by_frequency=False,
                                  unit_tf_idf=True, desc="datamap: n-grams")
            self.y, self.labels = corpus.y_as_read(), list(corpus.classes)
            return learners.SoftmaxHead(corpus.rows, self.y, len(self.labels), c.step(), c.seed, corpus.order)
        if c.backend == "embeddings":
            from refinery.models.embeddings import EncoderSpec, embedded_rows

            rows = embedded_rows(tables, c.inputs, EncoderSpec(c.model, c.max_length), source.engine,
                                 "datamap: embed")
            self.y, self.labels, self.embedded = rows.y, rows.labels, rows.texts
            return learners.SoftmaxHead(learners.centred_unit(rows.features), self.y, len(self.labels), c.step(),
                                        c.seed)
        from refinery.models.ngram import label_codes

        table = pa.concat_tables([t.select([n for n in ("text_a", "text_b", "label") if n in t.column_names])
                                  for t in tables])
        self.y, self.labels = label_codes([table["label"].cast(pa.string())])
        return learners.FineTuned(table, self.labels, c)

    def _done(self) -> list:
        """The finished epochs of a killed run, 1, 2, … without a gap, the last with its model's state."""
        from refinery.methods.datamap.dynamics import Epoch

        done, names = [], set(self.checkpoints.done())
        while f"epoch-{len(done) + 1:04d}" in names:
            table = self.checkpoints.get(f"epoch-{len(done) + 1:04d}")
            done.append(Epoch(len(done) + 1, table["p_gold"].to_numpy(), table["right"].to_numpy(False), None))
        while done and f"model-{len(done):04d}" not in names:   # an epoch whose model was not kept: redo it
            done.pop()
        if done:
            done[-1].state = self.checkpoints.get(f"model-{len(done):04d}")["model"][0].as_py()
        return done

    def _keep_epoch(self, epoch) -> None:
        self.checkpoints.put(f"epoch-{epoch.epoch:04d}", pa.table({"p_gold": epoch.p_gold, "right": epoch.right}))
        self.checkpoints.put(f"model-{epoch.epoch:04d}", pa.table({"model": pa.array([epoch.state], pa.binary())}))
        if epoch.epoch > 1:   # only the last model is needed to go on
            self.checkpoints.remove(f"model-{epoch.epoch - 1:04d}")

    def decide(self, batch: pa.Table) -> tuple[np.ndarray, list]:
        at = row_numbers(batch)
        return self.kept[at], _Reasons(self, at)

    def annotate(self, batch: pa.Table, keep: np.ndarray) -> tuple[pa.Table, pa.Table]:
        at, d = row_numbers(batch), self.dynamics
        for name, values, kind in zip(COLUMNS, (d.confidence, d.variability, d.correctness, d.forgetfulness),
                                      (pa.float32(), pa.float32(), pa.float32(), pa.int32())):
            batch = set_column(batch, name, pa.array(values[at], kind))
        return split(batch, keep)

    def reason_kind(self, reason: str) -> str:
        return reason.split(" (")[0]

    def report_details(self) -> tuple[dict, list]:
        """The data map, the epochs (training accuracy, mean p(gold)) and each label's share in every region."""
        from refinery.methods.datamap.dynamics import regions_by_label
        from refinery.report import figures
        from refinery.report import format as fmt
        from refinery.report.page import figure, note, table

        c, d = self.config, self.dynamics
        regions = regions_by_label(d, self.y, self.labels, c.share)
        boundary = None
        if c.keep != "random" and self.kept.any():
            values = d.variability if c.keep == "ambiguous" else d.confidence
            edge = float(values[self.kept].min() if c.keep in ("ambiguous", "easy") else values[self.kept].max())
            boundary = ("x" if c.keep == "ambiguous" else "y", edge, f"kept: {c.keep} {c.share:.0%} "
                        f"({KEY[c.keep]} {'≥' if c.keep != 'hard' else '≤'} {edge:.3f})")
        svg = figures.datamap(d.confidence, d.variability, d.correctness, "Data map (Swayamdipta et al. 2020)",
                              boundary, seed=c.seed)
        summary = {"epochs": d.epochs, "regions_by_label": regions, "resumed_epochs": d.resumed,
                   "confidence": _quartiles(d.confidence), "variability": _quartiles(d.variability),
                   "task_model": self._task_model(),
                   **({"embeddings": self.embedded.counts()} if self.embedded is not None else {})}
        return summary, [
            ("Data map", figure(svg, "Each row's mean probability of its gold label across the epochs (confidence) "
                                     "against its standard deviation (variability), coloured by the share of "
                                     "epochs the model got it right; the model learns on these rows.")),
            ("Epochs", table([{"epoch": e["epoch"], "training accuracy": e["accuracy"],
                               "mean p(gold)": e["mean_p_gold"]} for e in d.epochs],
                             formats={"training accuracy": fmt.percent}) + note(f"Task model: {self._task_model()}.")),
            (f"Regions per label (each region: the {c.share:.0%} of rows highest in it)",
             table(regions, formats={r: fmt.percent for r in ("ambiguous", "hard", "easy")}))]

    def _task_model(self) -> str:
        c = self.config
        if c.backend == "ngram":
            return (f"a softmax head on TF-IDF hashed word 1-2-grams of the {c.inputs} (2^{c.hash_bits} columns per "
                    f"field), SGD from zero, η {c.step():g}")
        if c.backend == "transformer":
            return f"{c.model} fine-tuned with a classification head on the {c.inputs}, AdamW, lr {c.step():g}"
        return (f"a softmax head on {c.model} sentence embeddings of the {c.inputs} (frozen), SGD from zero, "
                f"η {c.step():g}; {self.embedded.provenance()}")

    def remedy(self) -> Message:
        return Message(f"the {self.config.keep} rows carry these features more often: keep another region (",
                       Setting("keep"), f", now {self.config.keep}) or a larger ", Setting("share"),
                       f" (now {self.config.share:g}), or z-filter the kept rows (", Command("zfilter", on="kept"), ").")


class _Reasons:
    """Each dropped row's reason: outside the region kept, with its figure there."""

    def __init__(self, stage: DataMapStage, at: np.ndarray):
        self.stage, self.at = stage, at

    def __getitem__(self, i: int) -> str:
        c, d = self.stage.config, self.stage.dynamics
        row = self.at[i]
        if c.keep == "random":
            return f"not in the random {c.share:.0%}"
        values = d.variability if c.keep == "ambiguous" else d.confidence
        return f"not among the {c.share:.0%} {c.keep} rows ({KEY[c.keep]} {values[row]:.3f})"


def _quartiles(values: np.ndarray) -> dict:
    if not len(values):
        return {}
    q = np.quantile(values, [0, 0.25, 0.5, 0.75, 1])
    return dict(zip(("min", "q1", "median", "q3", "max"), map(float, q)))
