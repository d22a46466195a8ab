"""The ``compare`` stage: the first training corpus is the baseline, the others its refined versions (z-filtered,
up-sampled, re-weighted, rewritten, augmented), each trained alike and scored on every evaluation set.

Its config is the one source of ``refinery compare``'s options, a pipeline's ``compare:`` keys and
``rf.compare``'s keywords. Every (corpus, seed) run is checkpointed under ``OUT/runs/``, so an interrupted
comparison resumes; ``OUT/report/`` holds ``report.json``, ``report.html`` and ``predictions.parquet``. The work
lives in the sibling modules (``training``, ``statistics``, ``slices``, ``page``), imported when the stage runs.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from refinery.core.validation import NOT_EMPTY, setting, validate
from refinery.messages import Message, Refusal, Setting, Shapes
from refinery.methods.compare.config import CompareConfig, parse_training, path_and_split
from refinery.methods.compare.report import CompareReport
from refinery.models.evaluation import EvalSet, parse_eval_set, parse_label_maps, refuse_repeated_names, with_presets
from refinery.pipeline.stage import Output, StageResult
from refinery.pipeline.stage_input import StageInput
from refinery.pipeline.table_stage import CorpusPart, TableInput, TableStage

if TYPE_CHECKING:
    import pyarrow as pa

    from refinery.pipeline.output import StageOutput


def _specs(values) -> tuple:
    """A repeated option's values, in order."""
    return tuple(values)


@dataclass
class CompareStageConfig:
    """The comparison: the training corpora (``train``, named; the first is the baseline, and the stage's input is
    trained last where it is not among them), the evaluation sets they are scored on, and the task model
    (``model``)."""

    train: dict = setting(default_factory=lambda: {"input": "input"},
                          help="A training corpus, NAME=PATH[@SPLIT] (repeat; the first is the baseline, the last the "
                               "input). Files, folders, globs, finished corpora; a corpus with named splits trains on "
                               "its 'train' rows (or its only split), or on @SPLIT's. In a pipeline {name: a path or a "
                               "preceding step's name}; the step's own input is trained last where it is none of them.",
                          option="--train", multiple=True, parse=parse_training, metavar="NAME=PATH[@SPLIT]")
    evals: tuple = setting((), help=Message("An evaluation set with its own preset (default: the training corpora's ",
                                            Setting("preset"), "/", Setting("map"), "); repeat for more (required)."),
                           option="--eval", multiple=True, parse=_specs, metavar="NAME=PATH[:PRESET]")
    train_split: str | None = setting(None, NOT_EMPTY.or_none(), "The split every training corpus trains on (none: "
                                                                 "its train split, or its only one).")
    label_maps: dict = setting(default_factory=dict, help="Map training labels onto evaluation set NAME's labels "
                                                          "(presets' maps built in: hans).",
                               option="--label-map", multiple=True, parse=parse_label_maps, metavar="NAME=FROM:TO,…")
    model: CompareConfig = field(default_factory=CompareConfig)

    def __post_init__(self):
        validate(self)
        if not isinstance(self.train, dict) or not self.train or not all(
                isinstance(k, str) and k and isinstance(v, str) and v for k, v in self.train.items()):
            raise Refusal(f"train must name each training corpus, {{name: path}} (the first is the baseline), "
                          f"got {self.train!r}", code="invalid-setting")
        if not self.evals:
            raise Refusal("at least one evaluation set is needed (", Setting.of(CompareStageConfig, "evals", Shapes("NAME=PATH[:PRESET]", "{'NAME': data}", "[NAME=PATH[:PRESET], …]")), ")",
                          code="missing-setting")
        sets = self.eval_sets()
        refuse_repeated_names(sets)
        unknown = sorted(set(self.label_maps) - {e.name for e in sets})
        if unknown:
            raise Refusal(f"label_maps names no evaluation set: {', '.join(unknown)}", code="unknown-setting")

    def eval_sets(self) -> list[EvalSet]:
        return [parse_eval_set(e, self.label_maps) for e in self.evals]


def step_name(path: str) -> str:
    """An output's step folder (``…/02-zfilter/kept`` → ``02-zfilter``), else its file or folder name."""
    parts = [p for p in path.rstrip("/").split("/") if p]
    if len(parts) > 1 and parts[-1] in ("kept", "pool", "corpus"):
        return parts[-2]
    return parts[-1] if parts else path


def training_corpora(train: dict, own: list) -> tuple[dict, str]:
    """({name: paths} of the ``train`` corpora in their order, then the step's own input where none of them is it;
    the name of the step's input): where several are the input (a ``PATH@SPLIT`` too), the last; an input of its
    own is named by its step (``step_name``), or by its whole path where a training corpus has that name."""
    entries = {name: [path] for name, path in train.items()}
    mine = next((name for name in reversed(list(entries)) if _is_input(entries[name][0], own)), None)
    if mine is None:
        mine = step_name(own[0]) if own else "input"
        mine = own[0] if mine in entries else mine
        entries[mine] = list(own)
    return entries, mine


def _is_input(entry: str, own: list) -> bool:
    """Whether the training corpus ``entry`` (``PATH[@SPLIT]``) is the step's input ``own``: its path, or the folder
    of its splits (an HF DatasetDict's, read split by split)."""
    path = path_and_split(entry)[0].rstrip("/")
    own = [p.rstrip("/") for p in own]
    return own == [path] or bool(own) and all(p.startswith(path + "/") for p in own)


class CompareStage(TableStage):
    """Does it help? The same model trained on each training corpus (the first is the baseline) and scored on
    in-domain and challenge sets: accuracy, the gain on the baseline with its 95% interval, and the rows of the
    baseline's shortcuts (a report; the rows pass on)."""

    report_type = CompareReport

    # a table stage that reads its training corpora and evaluation sets itself (side corpora); on Ray each
    # corpus × seed model is a task of its own

    name, Config = "compare", CompareStageConfig
    output = Output.INPUT
    references = ("train",)
    input_field = "train"   # ``refinery compare --train a=… --train b=…``: the last is the input
    one_task = False   # its models train as Ray tasks side by side (``training.trained_runs``)

    def also_reads(self) -> list[str]:
        return [p for e in self.config.eval_sets() for p in e.paths]

    @classmethod
    def referenced_path(cls, reference: str) -> str:
        return path_and_split(reference)[0]

    @classmethod
    def pipeline_step(cls, config: CompareStageConfig, spec_in) -> CompareStageConfig:
        """The step of the pipeline ``refinery compare``'s command line spells: its last training corpus is the
        pipeline's input (``input``), every one trained on the same split; the other training corpora and the
        evaluation sets are read as refinery corpora or through their own preset (a pipeline reads only its input
        through the command line's), so the preset is written onto each set that needs it."""
        from refinery.io.corpus import is_corpus

        paths = [path_and_split(path) for path in config.train.values()]
        splits = {split for _, split in paths}
        if len(splits) > 1:
            raise Refusal(f"a pipeline's compare trains every corpus on one split; these name "
                          f"{', '.join(sorted(map(str, splits)))}", code="conflicting-settings")
        so = spec_in.storage_options
        raw = next(((name, p) for name, (p, _) in list(zip(config.train, paths))[:-1] if not is_corpus(p, so)), None)
        if raw:
            name, path = raw
            read = Setting("preset", spec_in.preset) if spec_in.preset else \
                Message("(its ", Setting("preset"), " or ", Setting("map"), ")")
            raise Refusal(f"a pipeline reads only its input through its preset or map; make the training corpus "
                          f"{path} a corpus first, refinery convert {path} ", read, " ",
                          Setting("out", "DIR", placeholder=True), f", then give {name}=DIR", code="bad-input")
        train = dict(zip(config.train, [p for p, _ in paths[:-1]] + ["input"]))
        return dataclasses.replace(config, train=train, evals=with_presets(config.eval_sets(), spec_in),
                                   train_split=splits.pop() or config.train_split)

    def queries_rows(self) -> bool:
        return False

    def compute(self, rows: TableInput) -> list[CorpusPart]:
        """Every corpus × seed model trained (each finished run kept in the output's ``runs/``) and scored; no
        corpus written."""
        c = self.config
        self.train, self.mine = training_corpora(c.train, rows.source.paths)
        self.evals = c.eval_sets()
        self.summary, self.predictions = _compare(self.train, self.evals, rows.source, c.model,
                                                  rows.checkpoints("runs", kept=True, own_keys=True), c.train_split)
        return []

    def result(self, manifests: dict, out: "StageOutput") -> StageResult:
        from refinery.core.records import Comparison
        from refinery.methods.compare.page import console_lines, report_page
        from refinery.methods.compare.statistics import passed_on
        from refinery.report import format as fmt

        report = self.summary
        page = report_page(report, self.train, {e.name: list(e.paths) for e in self.evals}, out)
        out.publish_report(report, page, {"predictions.parquet": self.predictions})
        rows, rejected = passed_on(report, self.mine)   # its whole input: the splits it did not train on too
        comparison = Comparison.from_json(report.to_json())
        refined = [n for n in self.train if n != comparison.baseline]
        gains = "; ".join(f"{n} " + ", ".join(f"{row.eval} {fmt.points(row.gain)}" for row in comparison.rows
                                              if row.train == n and row.gain is not None) for n in refined)
        warned = f" ({len(comparison.warnings)} warning(s) below)" if comparison.warnings else ""
        headline = f"against {comparison.baseline}: {gains or 'no baseline'}{warned}"
        return StageResult(rows + rejected, {"passed on": rows, "input rejects": rejected}, report, headline,
                           lines=(headline, *console_lines(report)), warnings=comparison.warnings)


def _compare(train: dict, evals: list, source: StageInput, config: CompareConfig, runs, split: str | None
             ) -> tuple[CompareReport, pa.Table]:
    """Train ``config``'s model on each of ``train`` ({name: paths}; the first is the baseline) for each seed and
    score every ``EvalSet``: the report and every run's predictions. Each finished run is kept in ``runs`` (the
    output's ``runs/``) and reused while its fingerprint holds.

    Honest by construction: evaluation rows whose texts are in a training corpus fail the run unless
    ``config.allow_overlap`` (then the report marks those cells); the rows each corpus contaminates (a run of
    ``config.ngram`` words shared) are counted beside each accuracy and flagged in the predictions."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from refinery.core.features import FeatureConfig
    from refinery.io.corpus import input_fingerprints
    from refinery.methods.compare.slices import bias_slices
    from refinery.methods.compare.statistics import summarize
    from refinery.methods.compare.training import read_corpora, run_fingerprint, trained_runs

    data = read_corpora(train, evals, source, config, split)
    so = source.opts.storage_options
    train_prints = {n: (input_fingerprints([path_and_split(p)[0] for p in paths], so),
                        [path_and_split(p)[1] or split for p in paths]) for n, paths in train.items()}
    eval_prints = [(e.name, e.preset, sorted(e.full_label_map().items()), input_fingerprints(list(e.paths), so))
                   for e in evals] + [("reads", data.reads)]
    predicted: dict = {}  # (corpus, eval) -> seeds × rows labels
    gold: dict = {}       # eval -> its rows' gold labels
    preds: list[pa.Table] = []
    jobs = [{"name": n, "seed": s, "key": run_fingerprint(config, train_prints[n], s, eval_prints)}
            for n in data.names for s in range(config.seeds)]
    for job, table in zip(jobs, trained_runs(jobs, data, source.engine, runs)):
        name = job["name"]
        preds.append(table.append_column("contaminated", pa.array(np.concatenate(
            [data.contamination[e.name][name].rows for e in evals]))))
        for e in evals:
            part = table.filter(pc.equal(table["eval"], e.name))
            gold.setdefault(e.name, part["gold"].to_numpy(zero_copy_only=False))
            predicted.setdefault((name, e.name), []).append(part["prediction"].to_numpy(zero_copy_only=False))

    predicted = {k: np.vstack(v) for k, v in predicted.items()}
    mapping = source.mapping
    features = FeatureConfig().named(mapping.field_names if mapping else None, single_text=data.reads == "text_a")
    correct = {(n, ev): labels == gold[ev] for (n, ev), labels in predicted.items()}   # seeds × rows booleans
    slices = bias_slices(data, features, correct, predicted)
    return summarize(data, correct, predicted, slices), pa.concat_tables(preds)
