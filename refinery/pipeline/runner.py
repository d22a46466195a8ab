"""Run a pipeline: the input, then each stage on the previous stage's output, under ``OUT/NN-stage/``.

``OUT/00-input`` is the input as one canonical corpus (named splits in a ``split`` column, bad
rows in its rejects). Stage N reads the part its predecessor passes on and publishes its own
parts under ``OUT/NN-name/``; ``_SUCCESS`` is written last and carries the stage's fingerprint:
sha256 of the stage's name, code version (refinery's version and the stage's ``version``) and config
and of its inputs' manifests (raw files: size and checksum). A rerun skips every stage whose
fingerprint is unchanged and reruns from the first that changed; the engine is not part of it (local
and Ray give the same outputs). A failed stage leaves the finished stages before it as they were,
and removes the folders it created; ``OUT`` is never an input's folder, nor inside one
(``check_out_apart``).

A stage's verb is ``run_stage``: the one-stage pipeline run on the raw input straight into ``OUT``,
with the same files and accounting as ``OUT/01-NAME`` of the pipeline.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import posixpath
import re
import time
from dataclasses import dataclass, field
from typing import Callable

from refinery import __version__
from refinery.io import store_answers
from refinery.core.report_record import ReportRecord
from refinery.io.checkpoints import remove_checkpoints
from refinery.io.committed import committed_url
from refinery.io.corpus import Corpus, EmptyInput, input_fingerprints, is_corpus, reject_reasons
from refinery.io.read_options import ReadOptions
from refinery.io.location import folder_entries, get_fs, is_local, join
from refinery.io.finished import STAGE, finished
from refinery.io.records import CorpusManifest
from refinery.io.memory import budget_of_run, memory_budget
from refinery.io.modes import keeps_finished
from refinery.io.ownership import (check_folders_apart, check_out_apart, claim_folder, made_folder, published_run,
                                   remove_failed_output, unpublish_run)
from refinery.io.redaction import redact_text
from refinery.core.records import StepRecord
from refinery.core.validation import FOLDER
from refinery.pipeline.config import INPUT_DIR, InputSpec, PipelineSpec, StageSpec, step_folder, to_dict
from refinery.pipeline.engine import check_engine
from refinery.pipeline.ray_task import run_as_task
from refinery.pipeline.output import StageOutput, recorded
from refinery.pipeline.step_audits import write_pipeline_report
from refinery.pipeline.stage import (Output, Stage, StageResult, mapped_references, missing_columns,
                                     reference_values, stage_class)
from refinery.pipeline.stage_input import StageInput
from refinery.messages import Message, Refusal, RejectsAt, Setting
from refinery.progress import peak_rss, recording, reset_peak_rss
from refinery.report.format import held

_STEP_FOLDER = re.compile(r"\d{2,}-[\w.-]+")   # a pipeline's step folder (``step_folder``): 01-zfilter


@dataclass
class StageRun:
    folder: str
    name: str
    status: str                   # ran | skipped
    seconds: float
    result: StageResult
    fingerprint: str = ""
    peak_rss: int | None = None   # bytes: this process's peak resident memory while the stage ran
    task_peak_rss: int | None = None   # bytes: the Ray task's, for a stage run as one task (``Stage.one_task``)
    passes_on: str = ""           # the corpus the next step reads
    phases: list = field(default_factory=list)   # its progress bars: {what, count, unit, seconds}
    memory_budget: int | None = None   # bytes: the run's budget (``io.memory``) its peaks are held to


@dataclass
class PipelineRun:
    out: str
    engine: str
    stages: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"out": self.out, "engine": self.engine, "stages": [
            {"folder": s.folder, "stage": s.name, "status": s.status, "seconds": round(s.seconds, 1),
             "peak_rss": s.peak_rss, "task_peak_rss": s.task_peak_rss, "memory_budget": s.memory_budget,
             "rows_in": s.result.rows_in,
             "parts": s.result.parts, "balanced": s.result.balanced, "headline": s.result.headline,
             "fingerprint": s.fingerprint, "phases": s.phases}
            for s in self.stages]}


def fingerprint(*parts) -> str:
    """sha256 of ``parts`` and refinery's version: an upgraded refinery computes every step again."""
    return hashlib.sha256(json.dumps([__version__, *parts], sort_keys=True, default=str).encode()).hexdigest()


def ingest(spec: InputSpec, source: StageInput, out: StageOutput) -> CorpusManifest:
    """The pipeline's input (``spec`` read as ``source``) as one canonical corpus; named splits become a ``split``
    column. Its manifest."""
    out.inputs, out.field_names, out.single_text = list(source.paths), source.field_names, source.single_text
    out.prior = source.prior   # a corpus's recorded rule carries on; the first stage that counts decides one
    with out.corpus(settings={"input": to_dict(spec)}) as writer:
        return writer.copy(source.iter_batches(), source.paths)   # no good row: the rejects stay, named


def _ingested(manifest: CorpusManifest, source: StageInput) -> StageResult:
    """The input step's result: its rows and rejects."""
    rows, rejected = manifest.rows, manifest.rejected
    return StageResult(rows + rejected, {"rows": rows, "rejected": rejected}, ReportRecord(),
                       f"{rows:,} rows" + (f" in splits {', '.join(source.splits)}" if source.named else ""))


def stage_input(spec: InputSpec, opts: ReadOptions, engine: str = "local") -> StageInput:
    """The raw input of ``spec`` as a stage reads it: named as its preset names text_a and text_b, or, for refinery
    corpora read without one, as their manifests record their own input's names."""
    mapping = spec.mapping()
    source = StageInput(spec.split_paths(), mapping, opts, engine)
    names, source.prior = recorded(list(map(source.resolved, source.paths)), opts.storage_options)
    source.field_names, source.single_text = _names(mapping) if mapping is not None else names
    return source


def _names(mapping) -> tuple:
    """The field names and single-text flag a preset gives stages (``Mapping.names``; none for an explicit map)."""
    return (None, False) if mapping is None else mapping.names


@store_answers.within_a_run()
def run_pipeline(spec: PipelineSpec, out: str | None = None, engine: str | None = None,
                 echo: Callable[[str], None] = print) -> PipelineRun:
    """Run ``spec`` under ``out`` (default: the file's ``out``), skipping unchanged stages."""
    out = (out or spec.out or "").rstrip("/")
    if not out:
        raise Refusal("no output folder: give ", Setting("out"), " or out: in the pipeline file",
                      code="missing-setting")
    engine = check_engine(engine or spec.engine)
    with budget_of_run(spec.memory_budget):
        return _run_pipeline(spec, out, engine, echo)


def _run_pipeline(spec: PipelineSpec, out: str, engine: str, echo) -> PipelineRun:
    opts = spec.input.read_options()
    source = stage_input(spec.input, opts)   # each input looked up once (a stage's folder read as its corpus)
    check_out_apart(out, source.paths, storage_options=opts.storage_options, one_stage=False)
    check_columns(spec, source)
    made = made_folder(out, opts.storage_options)
    created = claim_folder(out, opts.storage_options) == "new"
    try:
        run = _run_steps(spec, source, out, engine, echo)
    except BaseException:
        if created:   # the folders this run made and no step finished in
            remove_failed_output(out, made, opts.storage_options, keep_finished=True)
        raise
    _remove_earlier_steps(out, {s.folder for s in run.stages}, opts.storage_options, echo)
    return run


def _remove_earlier_steps(out: str, steps: set, storage_options: dict, echo) -> None:
    """The step folders an earlier pipeline left in ``out`` that this one has not (``NN-stage`` folders refinery
    published, named by none of ``steps``): removed once this pipeline finished, saying so, so that no finished
    step of another pipeline is taken for one of this one's."""
    fs, path = get_fs(out, storage_options)
    earlier = [name for name in folder_entries(fs, path)
               if _STEP_FOLDER.fullmatch(name) and name not in steps
               and published_run(join(out, name), storage_options)]
    for name in earlier:
        unpublish_run(join(out, name), storage_options)
        kept = " (files of yours in it stay)" if folder_entries(fs, join(path, name)) else ""
        echo(f"removed {join(out, name)}{kept}: a step of an earlier pipeline in {out}, none of this one's")


def check_columns(spec: PipelineSpec, source: StageInput) -> None:
    """Refuse a pipeline before any work when a step needs a column that neither the input has nor a step of its
    lineage adds (``Stage.needs`` against the input's columns and the ``Stage.adds`` of the steps it reads through,
    ``reads`` followed), naming the input's columns as its data names them (``missing_columns``)."""
    columns = set(source.columns())
    available = {"input": columns, INPUT_DIR: columns}
    last = columns
    for i, stage_spec in enumerate(spec.stages, 1):
        cls = stage_class(stage_spec.name)
        reading = available[stage_spec.reads] if stage_spec.reads else last
        missing = [c for c in cls.needs if c not in reading]
        if missing:
            raise missing_columns(f"step {i:02d}-{stage_spec.name}", missing, source, sorted(columns),
                                  tuple(sorted(reading - columns)))
        last = available[stage_spec.name] = available[step_folder(i, stage_spec.name)] = reading | set(cls.adds)


def _run_steps(spec: PipelineSpec, source: StageInput, out: str, engine: str, echo) -> PipelineRun:
    """The input, then each stage; the pipeline report after the last, or after a step that failed once a step
    before it finished (the report marks the failed step with its error; the error is raised again)."""
    run, opts = PipelineRun(out, engine), source.opts
    folder, name, started = join(out, INPUT_DIR), "input", time.perf_counter()
    try:
        upstream = fingerprint("input", to_dict(spec.input), input_fingerprints(map(source.resolved, source.paths),
                                                                                opts.storage_options))
        run.stages.append(_step(folder, INPUT_STEP, upstream, opts, echo,
                                lambda out: (_ingested(ingest(spec.input, source, out), source), None), corpus=""))
        run.stages[-1].passes_on = folder
        corpus_opts = ReadOptions(batch_rows=opts.batch_rows, storage_options=opts.storage_options)
        current = folder
        steps = {"input": folder, INPUT_DIR: folder}  # what config references may name
        for i, stage_spec in enumerate(spec.stages, 1):
            folder, name, started = join(out, step_folder(i, stage_spec.name)), stage_spec.name, time.perf_counter()
            before = run.stages[-1]
            if stage_spec.reads:   # an earlier step's output instead of the last one's
                current = steps[stage_spec.reads]
                before = next(s for s in run.stages if s.passes_on == current)
            _refuse_nothing_passed_on(before, current, folder, name, opts.storage_options)
            step_input = StageInput({"": [current]}, None, corpus_opts, engine, *_names(spec.input.mapping()),
                                    recorded([current], opts.storage_options)[1])
            step, stage = _stage_step(stage_spec, step_input, folder, steps, opts, echo)
            run.stages.append(step)
            current = steps[stage_spec.name] = steps[posixpath.basename(folder)] = stage.output.next_input(folder,
                                                                                                          current)
            step.passes_on = current
    except (Exception, KeyboardInterrupt) as error:
        if run.stages:   # the finished steps stay: the report shows them and where the run stopped (not an
            #              earlier run's steps after it, which the next run makes again)
            interrupted = isinstance(error, KeyboardInterrupt)
            status, what = ("interrupted", "interrupted (Ctrl-C)") if interrupted else (
                "failed", "failed: " + redact_text(" ".join(str(error).split()) or type(error).__name__))
            run.stages.append(StageRun(posixpath.basename(folder), name, status, time.perf_counter() - started,
                                       StageResult(0, {}, ReportRecord(), what, report_file="")))
            try:
                write_pipeline_report(run, spec, opts, _names(spec.input.mapping()), echo)
                echo(f"report: {out}/pipeline/report.html (the run {'was ' * interrupted}{status} at "
                     f"{posixpath.basename(folder)})")
            except Exception as report_error:  # noqa: BLE001 — the step's error is the one to raise
                echo(f"   report: not written ({' '.join(str(report_error).split())})")
        raise
    write_pipeline_report(run, spec, opts, _names(spec.input.mapping()), echo)
    return run


def _refuse_nothing_passed_on(before: StageRun, current: str, folder: str, name: str, storage_options: dict
                              ) -> None:
    """A step whose input holds no rows (the step before it kept none) does not run: ``EmptyInput`` names that
    step, what it read and where its report says why (the input step refuses an empty input itself)."""
    if before.name == "input" or Corpus.open(current, storage_options).manifest.rows:
        return
    where = committed_url(posixpath.join(posixpath.dirname(folder), before.folder, before.result.report_file),
                          storage_options)
    report = f" (its report: {where})" if before.result.report_file else ""
    raise EmptyInput(f"{posixpath.basename(folder)}: {before.folder} passed on no rows of the "
                     f"{before.result.rows_in:,} it read, so {name} has nothing to work on; "
                     f"loosen {before.name}'s settings{report}")


def _refuse_empty_corpora(source: StageInput) -> None:
    """A verb's finished corpora that hold no row between them (a run that kept none wrote them) are refused in one
    line: a stage would divide by their zero rows (raw inputs are checked as they are read)."""
    if source.paths and all((corpus := source.resolved(p).corpus) is not None and not corpus.manifest.rows
                            for p in source.paths):   # the manifests: no input listed
        raise EmptyInput(f"{', '.join(source.paths)}: no rows (a corpus that the run which wrote it left "
                         "empty); give a corpus that holds rows")


@store_answers.within_a_run()
def run_stage(spec: PipelineSpec, mode: str = "overwrite", echo: Callable[[str], None] = print,
              in_place: bool = False) -> StageRun:
    """Run the one stage of ``spec`` on its raw input, publishing into ``spec.out`` itself: a stage's verb.
    The stage folder's files and accounting are those of the same stage in a pipeline (``OUT/01-NAME``).

    ``mode``: ``overwrite`` runs; ``skip`` keeps a finished output of the same config and inputs (and
    refuses one of others); ``error`` refuses any finished output. ``in_place``: the input may be the corpus
    part of ``spec.out`` (``OUT/kept``, ``OUT/corpus``: the stage's own earlier output), which the run
    replaces once it has read it.
    """
    with budget_of_run(spec.memory_budget):
        return _run_stage(spec, mode, echo, in_place)


def _run_stage(spec: PipelineSpec, mode: str, echo, in_place: bool) -> StageRun:
    (stage_spec,) = spec.stages
    opts = spec.input.read_options()
    source = stage_input(spec.input, opts, check_engine(spec.engine))
    output = stage_class(stage_spec.name)(stage_spec.config).output
    if in_place and output is Output.INPUT:
        raise Refusal(Setting("in_place"), f": {stage_spec.name} writes no corpus of its own, so it replaces "
                      "nothing; give a new ", Setting("out"), code="invalid-setting")
    check_out_apart(spec.out, source.paths, output.next_input(spec.out, "") if in_place else None,
                    opts.storage_options)
    for f in dataclasses.fields(stage_spec.config):   # a folder a setting names (probe's saved model) is not OUT's
        if f.metadata.get("path") == FOLDER and getattr(stage_spec.config, f.name):
            check_folders_apart(Setting.of(type(stage_spec.config), f.name, getattr(stage_spec.config, f.name)),
                                spec.out)
    _refuse_empty_corpora(source)   # a pipeline's steps: _refuse_nothing_passed_on, naming the step that kept none
    # what a setting's ``input`` names alone: the one input (compare's default training corpus)
    steps = {"input": source.paths[0]} if len(source.paths) == 1 and not source.named else {}
    return _stage_step(stage_spec, source, spec.out.rstrip("/"), steps, opts, echo, mode, to_dict(spec.input))[0]


def _stage_step(stage_spec: StageSpec, source: StageInput, folder: str, steps: dict, opts: ReadOptions, echo,
                mode: str = "rerun", *upstream) -> tuple[StageRun, Stage]:
    cls = stage_class(stage_spec.name)
    config, referenced = _resolve_references(cls, stage_spec.config, steps)
    stage = cls(config)
    prints = input_fingerprints(source.resolved_splits(), opts.storage_options)   # a named split's: "SPLIT=PATH"
    fp = fingerprint(stage_spec.name, cls.version, cls.code_digest(), to_dict(stage_spec.config), *upstream,
                     sorted([*prints.values(), *input_fingerprints([*referenced, *stage.also_reads()],
                                                                   opts.storage_options).values()]))

    def work(out: StageOutput) -> tuple[StageResult, int | None]:
        stage.check_input(source)
        out.inputs, out.input_prints, out.fingerprint = list(source.paths), prints, fp
        out.settings = {stage_spec.name: to_dict(config)}
        out.field_names, out.single_text, out.prior = source.field_names, source.single_text, source.prior
        if source.engine == "ray" and stage.one_task:
            return run_as_task(stage.run, (source, out), stage.resources, stage.name,
                               on_this_node=is_local(get_fs(folder, opts.storage_options)[0]))
        return stage.run(source, out), None

    return _step(folder, stage_spec.name, fp, opts, echo, work, mode, corpus=stage.output.value), stage


def _resolve_references(cls, config, steps: dict) -> tuple[object, list[str]]:
    """``config`` with the step names in its ``cls.references`` fields replaced by those steps'
    outputs, and every corpus the fields name (for the fingerprint)."""
    changes, named = {}, []
    for name in cls.references:
        value = getattr(config, name)
        if value is None:
            continue
        changes[name] = mapped_references(value, lambda v: steps.get(v, v))
        named += [cls.referenced_path(v) for v in reference_values(changes[name])]
    return (dataclasses.replace(config, **changes) if changes else config), named


def _step(folder: str, name: str, fp: str, opts: ReadOptions, echo, work, mode: str = "rerun", *,
          corpus: str | None = None) -> StageRun:
    """Run ``work`` into ``folder`` under a ``RunOutput`` whose ``_SUCCESS`` carries ``fp``, unless ``mode``
    says otherwise for a finished folder: ``rerun`` (pipelines) skips it when ``fp`` is unchanged and runs
    again when not; ``skip`` skips it when unchanged and refuses it when not; ``error`` refuses it. ``work``
    takes the ``StageOutput`` it publishes through and returns the stage's result and the peak memory of the Ray task it
    ran the stage as (None if it did not). ``corpus``: the part holding the corpus the step wrote (``""``: the folder
    itself; None: none), whose rejects ``with_rejects_named`` reads."""
    label = posixpath.basename(folder)
    fs, path = get_fs(folder, opts.storage_options)
    if not is_local(fs):   # one listing of the step's folder answers the lookups of its records that follow
        folder_entries(fs, path)
    done = finished(folder, opts.storage_options, STAGE)
    record = StepRecord.from_json(done.body) if done is not None else None
    if keeps_finished(folder, mode, done, lambda _: None if record is not None and record.fingerprint == fp else
                      "holds a result made from other inputs or options"):
        result = StageResult(record.rows_in, record.accounting, ReportRecord(), record.headline,
                             report_file=record.report_file)
        echo(f"== {label}: unchanged, skipped ({result.conservation()})")
        remove_checkpoints(folder, opts.storage_options)   # an interrupted rerun's: the finished output is reused
        return StageRun(label, name, "skipped", record.seconds, result, fp, record.peak_rss, record.task_peak_rss,
                        phases=record.phases, memory_budget=record.memory_budget)
    echo(f"== {label}")
    t = time.perf_counter()
    reset_peak_rss()
    out = StageOutput(folder, opts.storage_options)
    with out.publishing() as marker:
        with recording() as phases:
            result, task_peak = work(out)
        seconds, peak, budget = time.perf_counter() - t, peak_rss(), memory_budget()
        marker.summary = StepRecord(name, fp, result.rows_in, result.parts, result.headline, result.report_file,
                                    round(seconds, 3), peak, task_peak, phases, budget).to_json()
    memory = f", {held(max(peak or 0, task_peak or 0), budget)}" if peak else ""
    echo(f"   {result.conservation()}  [{seconds:.1f}s{memory}]")
    result = with_rejects_named(result, folder, corpus, opts)
    for line in step_lines(result):
        echo(f"   {line}")
    return StageRun(label, name, "ran", seconds, result, fp, peak, task_peak, phases=phases, memory_budget=budget)


MANY_REJECTED = 0.05   # a stage whose input lost this share of its rows to rejects says why, on the console
INPUT_STEP = "input"  # the name a pipeline's input step runs under


def with_rejects_named(result: StageResult, folder: str, part: str | None, opts: ReadOptions) -> StageResult:
    """``result`` with a warning where at least ``MANY_REJECTED`` of the input rows were rejected: how many, the
    commonest reason (read from the output corpus's rejects: an input of another release read through the wrong
    preset loses all its rows of one label, silently but for a count) and where each rejected row is kept."""
    rejected = result.input_rejects
    url = None if part is None else join(folder, part) if part else folder
    if rejected < MANY_REJECTED * max(result.rows_in, 1) or not rejected or url is None \
            or not is_corpus(url, opts.storage_options):
        return result
    reasons = reject_reasons(Corpus.open(url, opts.storage_options).read_rejects(["reason"]))
    if not reasons:
        return result
    reason, n = reasons.most_common(1)[0]
    said = Message(f"{rejected:,} of {result.rows_in:,} input rows ({rejected / result.rows_in:.1%}) were rejected, "
                   f"{n:,} for {reason}; each rejected row is kept with its reason in "
                   f"{part or posixpath.basename(folder)}/'s rejects (", RejectsAt(url), " reads them)")
    return dataclasses.replace(result, warnings=(*result.warnings, said))


def step_lines(result: StageResult) -> list[str]:
    """What a finished stage says under its accounting line, the same in a pipeline's log as from its verb: the
    stage's lines (each verdict with its reasons and remedy, as ``Verdict.lines`` words them; its headline where it
    has none), then its warnings not already among them."""
    given = result.lines or ((result.headline,) if result.headline else ())
    lines = [part for line in given for part in str(line).split("\n")]   # a table a stage prints: a line per row
    said = {line.strip() for line in lines}
    return lines + [f"warning: {w}" for w in result.warnings if str(w).strip() not in said]
