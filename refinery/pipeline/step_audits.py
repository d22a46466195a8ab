"""The pipeline's report, measured: what each step did to the rows and to the shortcuts
(``report.pipeline_page`` shows it).

Each step's record (its accounting, headline, time and memory), its verdicts and comparison as its report.json
holds them (``core.records.StageReport``), and an audit of each corpus a step passes on (``audit_steps``), with
the prior the input's audit chose so that the steps compare; the audit's settings are those of the pipeline's
first ``audit`` stage, or its defaults. A corpus whose rows carry a ``weight`` column (after ``weights``) is
audited weighted (``core.weighted_counts``: count(x, l) = Σ w, z* on the weighted n and counts), so its z* show
what the weights do to the shortcuts.

Writes ``OUT/pipeline/``: ``pipeline.yaml`` (the resolved file), ``run.json`` (each step's accounting),
``receipt.json`` (every figure of the report, exact: ``PipelineFigures.to_json``) and ``report.html``; with
``report.screenshots``, ``screenshots/`` (PNGs of every report of the run, where Chromium is installed).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import posixpath
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from refinery.io.committed import committed_url
from refinery.io.corpus import Corpus, EmptyInput, is_corpus
from refinery.io.read_options import ReadOptions
from refinery.io.location import get_fs, is_local, join
from refinery.io.scratch import temporary_folder
from refinery.core import audit_record
from refinery.core import stats as zstats
from refinery.core.audit_record import AuditRecord, settings_of
from refinery.core.records import StageReport
from refinery.core.stats import Prior, ZStats
from refinery.core.weighted_counts import WeightedCounts, counts_prior
from refinery.pipeline.config import ReportConfig, to_dict
from refinery.pipeline.output import StageOutput, recorded
from refinery.pipeline.stage import Output, stage_class
from refinery.pipeline.stage_input import StageInput
from refinery.report import browser
from refinery.report.page import corpus_name
from refinery.report.pipeline_page import PipelineFigures, StepEntry, render


AUDITS = "audits"   # OUT/pipeline/audits/KEY.parquet: each step's audit for the report, reused while it is unchanged


def _kind_of_change(stage) -> str:
    """What a stage does to the rows it passes on."""
    if stage is None:
        return "input"
    return {Output.INPUT: "unchanged", Output.KEPT: "filtered", Output.POOL: "augmented",
            Output.CORPUS: "rewritten"}[stage.output]


def _audit_config(spec):
    """The pipeline's first audit stage's settings (the receipt's statistics then match its report)."""
    for stage in spec.stages:
        if stage.name == "audit":
            return dataclasses.replace(stage.config, update=None)
    return stage_class("audit").Config()


def _settings(config, field_names) -> dict:
    """What the report's audits depend on (``audit_record.settings_of``): a record made with these is reused."""
    return settings_of(config.features.named(*field_names), config.prior, config.min_count, config.alpha)


def _measure(corpus: str, opts: ReadOptions, config, field_names, carried: Prior | None) -> AuditRecord:
    """An audit of one step's corpus, on the features in at least min_count rows (all the report reads: z* of rarer
    features is not computed). Its prior rule: the one the corpus records, else ``carried`` (the pipeline input's,
    so that a step that counts nothing keeps it)."""
    source = StageInput({"": [corpus]}, None, opts, "local", *field_names,
                        recorded([corpus], opts.storage_options)[1] or carried)
    result = stage_class("audit")(config).measure(source)
    try:
        labels = {l: int(result.counter.label_totals.get(l, 0)) for l in result.stats.labels}
        return AuditRecord.of(result.stats, result.prior, labels, _settings(config, field_names))
    finally:
        result.counter.close()


def _measure_weighted(corpus: str, opts: ReadOptions, config, field_names, columns: list,
                      carried: Prior | None) -> AuditRecord:
    """The audit of a corpus whose rows carry a ``weight``: as ``_measure``'s, on weighted counts (rows per label
    stay counts of rows)."""
    source = Corpus.open(corpus, opts.storage_options)
    counts = WeightedCounts(None, config.features.named(*field_names), 1)
    read = [c for c in ("text_a", "text_b", "label", "weight") if c in columns]
    for batch in source.iter_tables(read, opts.batch_rows):
        counts.add(batch, batch["weight"].to_numpy(zero_copy_only=False))
    rows_per_label = {l: int(source.manifest.labels.get(l, 0)) for l in sorted(counts.labels)}
    if not counts.rows:
        raise EmptyInput(f"{corpus}: no rows to audit")
    p0, prior = counts_prior(counts, config.prior, 0, Prior.recorded(source.manifest.audit_prior) or carried)
    st = counts.stats(0, p0, config.min_count, config.alpha)   # p0 of the weighted shares, as the weights verdict
    return AuditRecord.of(st, prior, rows_per_label, _settings(config, field_names), weighted=True)


def _recorded_audit(corpus: str, storage_options: dict, settings: dict, weighted: bool) -> AuditRecord | None:
    """The audit the stage that wrote ``corpus`` kept with it (its verdict's "after" side), where it was made with
    ``settings``; else None."""
    table = Corpus.open(corpus, storage_options).attached(audit_record.KEY)
    record = None if table is None else AuditRecord.from_table(table)
    return record if record is not None and record.matches(settings, weighted) else None


def _audit_key(step, out: str, config, field_names, weighted: bool = False) -> str:
    """What a step's audit for the report depends on: the step's fingerprint (its code, config and inputs), the
    corpus it passes on (within ``out``), the audit's settings, the input's field names and whether it is
    weighted."""
    passes_on = step.passes_on[len(out):] if step.passes_on.startswith(out) else step.passes_on
    key = [step.fingerprint, passes_on, to_dict(config), field_names] + (["weighted"] if weighted else [])
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _kept_audit(out: str, key: str, storage_options: dict) -> AuditRecord | None:
    """The audit an earlier run kept for ``key``, or None."""
    fs, root = get_fs(join(out, "pipeline", AUDITS, f"{key}.parquet"), storage_options)
    try:
        data = fs.cat_file(root)   # one request, whether it is there or not
    except (FileNotFoundError, IsADirectoryError):
        return None
    return AuditRecord.from_table(pq.read_table(pa.BufferReader(data)))


def _audit_steps_audit(run, spec, config, field_names, storage_options: dict) -> AuditRecord | None:
    """The pipeline input's audit its first step made, where that step is an audit with the settings the report
    audits by (``config``) and adds no saved state, read from its report (report.json, stats.parquet) instead of
    counting the input a second time; None otherwise."""
    first = spec.stages[0] if spec.stages else None
    if first is None or first.name != "audit" or first.config.update is not None or len(run.stages) < 2 \
            or dataclasses.replace(first.config, update=None) != config or run.stages[1].status == "failed":
        return None
    summary = _step_report(run.out, run.stages[1], storage_options).audit
    prior = Prior.recorded(summary.prior_record) if summary is not None else None
    fs, path = get_fs(_committed(run.out, run.stages[1], posixpath.join(
        posixpath.dirname(run.stages[1].result.report_file), "stats.parquet"), storage_options), storage_options)
    if prior is None or not fs.exists(path):
        return None
    with fs.open(path, "rb") as fh:
        table = pq.read_table(fh)   # ``ZStats.to_table``: each feature's rows, one per label in the audit's order
    labels = sorted(summary.labels)
    C = len(labels)
    if table.num_rows % C or table["label"].slice(0, C).to_pylist() not in ([], labels):
        return None
    p0 = zstats.prior_vector(labels, summary.labels, prior.name)
    st = ZStats(table["feature"].take(pa.array(np.arange(0, table.num_rows, C))).combine_chunks(), labels,
                table["count"].to_numpy().reshape(-1, C), table["n"].to_numpy()[::C], p0, summary.threshold,
                config.min_count, config.alpha)
    prior = dataclasses.replace(prior, carried=zstats.RECORDED in summary.prior)
    return AuditRecord.of(st, prior, summary.labels, _settings(config, field_names))


def _z_of(st, feature: str, label: str) -> float | None:
    """z*(feature, label) in ``st``, or None where the feature is in fewer than min_count rows (for weighted rows:
    its effective size (Σw)²/Σw² under min_count)."""
    i = pc.index(st.features, feature).as_py()
    if i < 0 or label not in st.labels or st.effective_n[i] < st.min_count:
        return None
    return round(float(st.z[i, st.labels.index(label)]), 4)


def pipeline_figures(run, spec, opts: ReadOptions, config: ReportConfig, names: tuple,
                     echo) -> tuple[PipelineFigures, object, dict]:
    """Everything the report shows, exact: per step its record, what it passed on, its report's verdicts and
    comparison and (``audit_steps``) the audit of the corpus it passes on, with the z* of the input's
    ``top_features`` per label; the statistics of the last corpus audited (``names``: the input preset's field
    names and single-text flag); and each audit the report counted, kept for the next run ({key: table}). A step
    whose audit an earlier run kept under the same key (``_audit_key``: an unchanged step), whose corpus keeps its
    own (``_recorded_audit``) or whose input the audit step measured (``_audit_steps_audit``) is not audited
    again."""
    corpus_opts = ReadOptions(batch_rows=opts.batch_rows, storage_options=opts.storage_options)
    audit_config = _audit_config(spec)
    settings, config_k = _settings(audit_config, names), audit_config.k
    steps, previous, tracked, first, last, audits, carried = [], None, None, None, None, {}, None
    for step, stage_spec in zip(run.stages, [None, *spec.stages]):
        stage = stage_class(stage_spec.name)(stage_spec.config) if stage_spec else None   # output may be a property
        report = _step_report(run.out, step, opts.storage_options)
        entry = StepEntry(step.folder, step.name, step.status, step.seconds, step.peak_rss, step.task_peak_rss,
                          step.result.rows_in, step.result.parts, step.result.balanced, step.result.headline,
                          _report_link(run.out, step, opts.storage_options), _kind_of_change(stage), step.passes_on,
                          step.phases, verdicts=report.verdicts, comparison=report.comparison,
                          memory_budget=step.memory_budget)
        if step.passes_on and is_corpus(step.passes_on, opts.storage_options):
            entry.rows = Corpus.open(step.passes_on, opts.storage_options).manifest.rows
        if config.audit_steps and step.passes_on and step.passes_on != previous:
            columns = StageInput({"": [step.passes_on]}, None, corpus_opts).columns()
            weighted = "weight" in columns
            key = _audit_key(step, run.out, audit_config, names, weighted)
            cached = _kept_audit(run.out, key, opts.storage_options)
            made_by = step if stage is not None else run.stages[1] if len(run.stages) > 1 else None   # whose audit
            found = cached or (
                _audit_steps_audit(run, spec, audit_config, names, opts.storage_options) if stage is None else
                _recorded_audit(step.passes_on, opts.storage_options, settings, weighted))
            echo(f"   report: {_audit_said(step, run.out, found is not None, None if cached else made_by, weighted)}")
            try:
                record = found or (
                    _measure_weighted(step.passes_on, corpus_opts, audit_config, names, columns, carried)
                    if weighted else _measure(step.passes_on, corpus_opts, audit_config, names, carried))
            except EmptyInput as e:   # e.g. a step left one label: the report says so instead of failing the run
                entry.audit_skipped = "it passes on no rows" if entry.rows == 0 else str(e)
            else:
                if cached is not None or found is None:   # counted for the report: kept for the next run
                    audits[key] = record.to_table()
                last = record.stats
                audited = record.figures(config_k)
                if tracked is None:   # the input's top features and prior rule, followed through every step
                    first, carried = last, Prior.recorded(record.prior.record())
                    tracked = [(e["feature"], label) for label, entries in audited.top.items()
                               for e in entries[:config.top_features]]
                entry.audit = dataclasses.replace(audited, top={l: v[:5] for l, v in audited.top.items()},
                                                  tracked={f"{f} → {l}": _z_of(last, f, l) for f, l in tracked})
        previous = step.passes_on
        steps.append(entry)
    unaudited = steps[-1] if steps and steps[-1].audit_skipped else None   # the corpus made: not audited
    final = {} if unaudited else next((s.audit.top for s in reversed(steps) if s.audit is not None), {})
    final_top = [{"label": label, "feature": e["feature"], "z* of the input": _z_of(first, e["feature"], label),
                  "z* after": e["z"], "n after": e["n"]}
                 for label, entries in final.items() for e in entries[:config.top_features]]
    figures = PipelineFigures(run.out, run.engine, steps, [f"{f} → {l}" for f, l in tracked or ()], final_top,
                              dataclasses.asdict(config),
                              unaudited and {"step": unaudited.step, "why": unaudited.audit_skipped})
    return figures, None if unaudited else last, audits


def _audit_said(step, out: str, found: bool, made_by, weighted: bool) -> str:
    """Which audit the report takes for the corpus ``step`` passes on, and where from: ``the input's audit is read
    from 01-audit``, ``the audit of 02-zfilter/kept is read from 02-zfilter (the one its verdict made)``, ``… from
    the last run's`` (an unchanged step, ``found`` without ``made_by``), or ``auditing 03-weights/corpus, weighted``
    where none is found."""
    root = out.rstrip("/") + "/"
    what = "the input" if step.name == "input" else step.passes_on.removeprefix(root)
    audit = "the input's audit" if step.name == "input" else f"the audit of {what}"
    if not found:
        return f"auditing {what}" + (", weighted (each row counts as its weight)" if weighted else "")
    if made_by is None:
        return f"{audit} is read from the last run's (unchanged: {AUDITS}/ of {posixpath.join(out, 'pipeline')})"
    return f"{audit} is read from {made_by.folder}" + (" (the one its verdict made)" if made_by is step else "")


def _step_report(out: str, step, storage_options: dict) -> StageReport:
    """What the step's report.json holds (empty where it wrote none)."""
    if not step.result.report_file:
        return StageReport()
    fs, path = get_fs(_committed(out, step, posixpath.join(posixpath.dirname(step.result.report_file), "report.json"),
                                 storage_options), storage_options)
    try:
        return StageReport.from_json(json.loads(fs.cat_file(path)))   # one request, whether it is there or not
    except (FileNotFoundError, IsADirectoryError):
        return StageReport()


def _report_link(out: str, step, storage_options: dict) -> str | None:
    """The stage's own report, relative to ``OUT/pipeline/report.html``, where it exists."""
    if not step.result.report_file:
        return None
    url = _committed(out, step, step.result.report_file, storage_options)
    fs, path = get_fs(url, storage_options)
    return f"../{url[len(out.rstrip('/')) + 1:]}" if fs.exists(path) else None


def _committed(out: str, step, name: str, storage_options: dict) -> str:
    """The URL of the file ``name`` of a step's folder in the run committed there (``committed_url`` of the folder:
    the pointer is the step folder's, not one of the folders inside it)."""
    return join(committed_url(join(out.rstrip("/"), step.folder), storage_options), name)


def write_pipeline_report(run, spec, opts: ReadOptions, names: tuple, echo) -> None:
    """``OUT/pipeline/``: the resolved pipeline file, the run's accounting, the receipt and its report."""
    spec = dataclasses.replace(spec, out=run.out, engine=run.engine)   # as run (--out, --engine)
    config = spec.report
    data, final_stats, audits = pipeline_figures(run, spec, opts, config, names, echo)
    inputs = [p for paths in spec.input.split_paths().values() for p in paths]
    corpus = corpus_name(inputs, opts.storage_options)
    with StageOutput(run.out, opts.storage_options).files("pipeline") as d:
        d.write_text("pipeline.yaml", spec.to_yaml())
        d.write_text("run.json", json.dumps(run.to_dict(), indent=1))
        d.write_text("receipt.json", json.dumps(data.to_json(), indent=1, default=str))
        d.write_text("report.html", render(data, final_stats, spec.to_yaml(), _audit_config(spec).alpha, corpus,
                                           inputs))
        for key, stats in audits.items():
            d.write_parquet(f"{AUDITS}/{key}.parquet", stats)
        if config.screenshots:
            _screenshots(run.out, d, opts.storage_options, echo)
        d.commit()


def _screenshots(out: str, d, storage_options: dict, echo) -> None:
    """PNGs of every report of the run (and of the pipeline report being written) into ``screenshots/``."""
    if browser.find_chromium() is None:
        given = os.environ.get("REFINERY_CHROMIUM")
        echo(f"   screenshots: none taken: REFINERY_CHROMIUM={given} is not a browser" if given else
             "   screenshots: none taken: chromium is not installed (apt-get install chromium, or set "
             "REFINERY_CHROMIUM to a Chromium or Chrome)")
        return
    fs, root = get_fs(out, storage_options)
    if not is_local(fs):
        echo("   screenshots: only for a local output folder; none taken")
        return
    with temporary_folder("audits-") as tmp:
        pngs = browser.screenshot_reports(Path(root), Path(tmp))
        for png in pngs:
            d.write_bytes(f"screenshots/{png.name}", png.read_bytes())
    echo(f"   screenshots: {len(pngs)} reports in {join(out, 'pipeline', 'screenshots')}")
