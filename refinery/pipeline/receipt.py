"""The pipeline's report, a debias receipt: what each stage did to the rows and to the shortcuts.

For the input and after each stage that changes the rows it gives the label distribution, where every row
went (kept, filtered out, added, re-weighted, rejected), max z* per label and the input's top features'
z* followed through every stage against the Bonferroni threshold (Gardner et al. 2021), each stage's time
and peak memory, and links to the stages' own reports. The z* come from an audit of each step's corpus
(``report.audit_steps``), with the prior the input's audit chose so that the steps compare; the audit's
settings are those of the pipeline's first ``audit`` stage, or its defaults. A corpus whose rows carry a
``weight`` column (after ``weights``) is audited weighted (``core.weighted_counts``: count(x, l) = Σ w, z* on the
weighted n and counts), so its z* show what the weights do to the shortcuts. Each step's verdict (``core.verdict``)
is read from its report.json and shown with the step.

Writes ``OUT/pipeline/``: ``pipeline.yaml`` (the resolved file), ``run.json`` (each step's accounting),
``receipt.json`` (every figure of the report, exact) and ``report.html``; with ``report.screenshots``,
``screenshots/`` (PNGs of every report of the run, where Chromium is installed).
"""
from __future__ import annotations

import dataclasses
import hashlib
import html
import json
import os
import posixpath
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from refinery.io.committed import committed_url
from refinery.io.corpus import Corpus, EmptyInput, is_corpus
from refinery.io.read_options import ReadOptions
from refinery.io.location import get_fs, is_local, join
from refinery.core import audit_record
from refinery.core import stats as zstats
from refinery.core.audit_record import AuditRecord, settings_of
from refinery.core.stats import Prior, ZStats
from refinery.core.weighted_counts import WEIGHTED_NOTE, WeightedCounts, counts_prior
from refinery.pipeline.config import ReportConfig, to_dict
from refinery.pipeline.output import AUDIT_PRIOR, StageOutput, recorded
from refinery.pipeline.stage import Output, StageInput, stage_class
from refinery.report import browser, figures
from refinery.report.comparison import comparison_rows, is_comparison
from refinery.report import format as fmt
from refinery.report.page import Report, code, corpus_name, figure, link, note, table


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
    rows_per_label = {l: int(source.manifest["labels"].get(l, 0)) for l in sorted(counts.labels)}
    if not counts.rows:
        raise EmptyInput(f"{corpus}: no rows to audit")
    p0, prior = counts_prior(counts, config.prior, 0, Prior.recorded(source.manifest.get(AUDIT_PRIOR)) or carried)
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
    if not fs.exists(root):
        return None
    with fs.open(root, "rb") as fh:
        return AuditRecord.from_table(pq.read_table(fh))


def _audit_steps_audit(run, spec, config, field_names, storage_options: dict) -> AuditRecord | None:
    """The pipeline input's audit its first step made, where that step is an audit with the settings the report
    audits by (``config``) and adds no saved state, read from its report (report.json, stats.parquet) instead of
    counting the input a second time; None otherwise."""
    first = spec.stages[0] if spec.stages else None
    if first is None or first.name != "audit" or first.config.update is not None or len(run.stages) < 2 \
            or dataclasses.replace(first.config, update=None) != config or run.stages[1].status == "failed":
        return None
    summary = _step_report(run.out, run.stages[1], storage_options)
    prior = Prior.recorded(summary.get("prior_record"))
    fs, path = get_fs(_committed(run.out, run.stages[1], posixpath.join(
        posixpath.dirname(run.stages[1].result.report_file), "stats.parquet"), storage_options), storage_options)
    if prior is None or not fs.exists(path):
        return None
    with fs.open(path, "rb") as fh:
        table = pq.read_table(fh)   # ``ZStats.to_table``: each feature's rows, one per label in the audit's order
    labels = sorted(summary["labels"])
    C = len(labels)
    if table.num_rows % C or table["label"].slice(0, C).to_pylist() not in ([], labels):
        return None
    p0 = zstats.prior_vector(labels, summary["labels"], prior.name)
    st = ZStats(table["feature"].take(pa.array(np.arange(0, table.num_rows, C))).combine_chunks(), labels,
                table["count"].to_numpy().reshape(-1, C), table["n"].to_numpy()[::C], p0, summary["threshold"],
                config.min_count, config.alpha)
    prior = dataclasses.replace(prior, carried=zstats.RECORDED in summary["prior"])
    return AuditRecord.of(st, prior, summary["labels"], _settings(config, field_names))


def _z_of(st, feature: str, label: str) -> float | None:
    """z*(feature, label) in ``st``, or None where the feature is in fewer than min_count rows."""
    i = pc.index(st.features, feature).as_py()
    if i < 0 or label not in st.labels or st.n[i] < st.min_count:
        return None
    return round(float(st.z[i, st.labels.index(label)]), 4)


def receipt(run, spec, opts: ReadOptions, config: ReportConfig, names: tuple, echo) -> tuple[dict, object, dict]:
    """Everything the report shows, exact (``receipt.json``): per step its accounting, what it passed on and
    (``audit_steps``) the audit of that corpus, with the z* of the input's ``top_features`` per label; the
    statistics of the last corpus audited (``names``: the input preset's field names and single-text flag); and
    each audit the report counted, kept for the next run ({key: table}). A step whose audit an earlier run kept
    under the same key (``_audit_key``: an unchanged step), whose corpus keeps its own (``_recorded_audit``) or
    whose input the audit step measured (``_audit_steps_audit``) is not audited again."""
    corpus_opts = ReadOptions(batch_rows=opts.batch_rows, storage_options=opts.storage_options)
    audit_config = _audit_config(spec)
    settings, config_k = _settings(audit_config, names), audit_config.k
    steps, previous, tracked, first, last, audits, carried = [], None, None, None, None, {}, None
    for step, stage_spec in zip(run.stages, [None, *spec.stages]):
        stage = stage_class(stage_spec.name)(stage_spec.config) if stage_spec else None   # output may be a property
        entry = {"step": step.folder, "stage": step.name, "status": step.status, "seconds": step.seconds,
                 "peak_rss": step.peak_rss, "task_peak_rss": step.task_peak_rss, "rows_in": step.result.rows_in,
                 "parts": step.result.parts, "balanced": step.result.balanced, "headline": step.result.headline,
                 "report": _report_link(run.out, step, opts.storage_options), "change": _kind_of_change(stage),
                 "passes_on": step.passes_on, "phases": step.phases}
        if step.passes_on and is_corpus(step.passes_on, opts.storage_options):
            entry["rows"] = Corpus.open(step.passes_on, opts.storage_options).manifest["rows"]
        report = _step_report(run.out, step, opts.storage_options)
        verdicts = _step_verdicts(report)
        if verdicts:
            entry["verdicts"] = verdicts
        if is_comparison(report):   # a compare step: does it help?
            entry["comparison"] = _comparison(report)
        if config.audit_steps and step.passes_on and step.passes_on != previous:
            columns = StageInput({"": [step.passes_on]}, None, corpus_opts).columns()
            weighted = "weight" in columns
            key = _audit_key(step, run.out, audit_config, names, weighted)
            cached = _kept_audit(run.out, key, opts.storage_options)
            found = cached or (
                _audit_steps_audit(run, spec, audit_config, names, opts.storage_options) if stage is None else
                _recorded_audit(step.passes_on, opts.storage_options, settings, weighted))
            echo(f"   report: {'reading the audit' if found else 'auditing the rows'} {step.folder} passes on"
                 + (" (weighted)" if weighted and not found else ""))
            try:
                record = found or (
                    _measure_weighted(step.passes_on, corpus_opts, audit_config, names, columns, carried)
                    if weighted else _measure(step.passes_on, corpus_opts, audit_config, names, carried))
            except EmptyInput as e:   # e.g. a step left one label: the report says so instead of failing the run
                entry["audit_skipped"] = "it passes on no rows" if entry.get("rows") == 0 else str(e)
            else:
                if cached is not None or found is None:   # counted for the report: kept for the next run
                    audits[key] = record.to_table()
                last = record.stats
                audited = entry["audit"] = record.figures(config_k)
                if tracked is None:   # the input's top features and prior rule, followed through every step
                    first, carried = last, Prior.recorded(record.prior.record())
                    tracked = [(e["feature"], label) for label, entries in audited["top"].items()
                               for e in entries[:config.top_features]]
                audited["tracked"] = {f"{f} → {l}": _z_of(last, f, l) for f, l in tracked}
                audited["top"] = {l: v[:5] for l, v in audited["top"].items()}
        previous = step.passes_on
        steps.append(entry)
    unaudited = steps[-1] if steps and "audit_skipped" in steps[-1] else None   # the corpus made: not audited
    final = {} if unaudited else next((s["audit"]["top"] for s in reversed(steps) if "audit" in s), {})
    final_top = [{"label": label, "feature": e["feature"], "z* of the input": _z_of(first, e["feature"], label),
                  "z* after": e["z"], "n after": e["n"]}
                 for label, entries in final.items() for e in entries[:config.top_features]]
    return {"out": run.out, "engine": run.engine, "steps": steps, "tracked": [f"{f} → {l}" for f, l in tracked or ()],
            "final_top": final_top, "report": dataclasses.asdict(config),
            "final_unaudited": unaudited and {"step": unaudited["step"], "why": unaudited["audit_skipped"]}}, \
        None if unaudited else last, audits


def _step_report(out: str, step, storage_options: dict) -> dict:
    """The step's report.json, or {} where it wrote none."""
    if not step.result.report_file:
        return {}
    fs, path = get_fs(_committed(out, step, posixpath.join(posixpath.dirname(step.result.report_file), "report.json"),
                                 storage_options), storage_options)
    if not fs.exists(path):
        return {}
    with fs.open(path, "r") as fh:
        return json.load(fh)


def _comparison(report: dict) -> dict:
    """A compare step's answer: each refined corpus's accuracy and gain over the baseline per evaluation set (points,
    95% interval, significance), and its warnings (a label's collapse) and notes (a set that cannot separate)."""
    baseline = report["baseline"]
    rows = [{"evaluation set": r["eval"], "corpus": r["train"], "accuracy": r["accuracy"], "gain": r["gain"],
             "95% interval of the gain": r["ci95"], "significant": "yes" if r["significant"] else "no"}
            for r in comparison_rows(report) if r["train"] != baseline and r["gain"] is not None]
    return {"baseline": baseline, "rows": rows, "warnings": list(report.get("warnings") or ()),
            "notes": list(report.get("notes") or ())}


def _step_verdicts(report: dict) -> dict:
    """The verdicts in a step's report.json ({part: {ok, line, warnings}}; part "" for a stage's one verdict), or
    {} where it has none (a stage without a verdict, a step that wrote no report)."""
    found = {"": report["verdict"]} if "verdict" in report else dict(report.get("verdicts") or {})
    if "verdict_input_p0" in report:
        found["under the input's p0"] = report["verdict_input_p0"]
    return {part: {"ok": v["ok"], "line": v["line"], "warnings": v["warnings"]} for part, v in found.items()}


def _report_link(out: str, step, storage_options: dict) -> str | None:
    """The stage's own report, relative to ``OUT/pipeline/report.html``, where it exists."""
    if not step.result.report_file:
        return None
    url = _committed(out, step, step.result.report_file, storage_options)
    fs, path = get_fs(url, storage_options)
    return f"../{url[len(out.rstrip('/')) + 1:]}" if fs.exists(path) else None


def _committed(out: str, step, name: str, storage_options: dict) -> str:
    """The URL of the file ``name`` of a step's folder in the run committed there (``committed_url``)."""
    return committed_url(join(out.rstrip("/"), step.folder, name), storage_options)


# ---------------------------------------------------------------- the page

def _flow_steps(steps: list[dict]) -> list[dict]:
    """``figures.row_flow``'s steps: where each step's rows went, rows added beyond what it read."""
    flow = []
    for s in steps:
        parts = dict(s["parts"])
        passes = next(iter(parts)) if parts else None
        added = (s.get("rows") or 0) - parts.get(passes, 0) if s["change"] in ("rewritten", "augmented") else 0
        if added > 0:
            parts["added"] = added
        flow.append({"name": s["step"], "rows_in": s["rows_in"], "parts": parts, "passes": passes})
    return flow


def _step_rows(steps: list[dict]) -> list[dict]:
    return [{"step": s["step"] + {"skipped": " (reused)", "failed": " (failed)"}.get(s["status"], ""),
             "what it did": (s["headline"] or s["change"])
             + (f" (not audited for this report: {s['audit_skipped']})" if "audit_skipped" in s else ""),
             "rows passed on": s.get("rows"),
             "time": s["seconds"], "peak memory": s["peak_rss"],
             **({"its Ray task's peak": s.get("task_peak_rss")} if any(t.get("task_peak_rss") for t in steps) else {})}
            for s in steps]


def _phase_rows(steps: list[dict]) -> list[dict]:
    """Where each step's time went: its progress bars' counts, times and rates."""
    return [{"step": s["step"], "phase": p["what"],
             "done": f"{fmt.count(p['count'])} {_plural(p['unit'].strip(), p['count'])}".strip(),
             "time": p["seconds"], "per second": p["count"] / p["seconds"] if p["seconds"] else None}
            for s in steps for p in s.get("phases", ()) if p["count"]]


def _plural(unit: str, n: float) -> str:
    """A progress bar's unit (tqdm's, singular: task, batch, query) for ``n`` of it."""
    if n == 1 or not unit or unit.endswith("s"):
        return unit
    if unit.endswith("y"):
        return unit[:-1] + "ies"
    return unit + ("es" if unit.endswith(("ch", "sh", "x")) else "s")


def _links(steps: list[dict]) -> str:
    items = "".join(f"<li>{link(s['report'], s['step'])}</li>" for s in steps if s.get("report"))
    return f"<ul>{items}</ul>" if items else note("No stage wrote a report of its own.")


def render(data: dict, final_stats, spec, corpus: str, inputs: list) -> str:
    steps = data["steps"]
    audited = [s for s in steps if "audit" in s]
    page = Report("Pipeline report: what each stage did to the rows and the shortcuts", corpus, inputs)
    failed = next((s for s in steps if s["status"] == "failed"), None)
    if failed:
        page.section("The run failed", f'<p class="bad">{html.escape(failed["step"])} {html.escape(failed["headline"])}'
                     '</p>', note("The steps before it finished and are shown below; a rerun reuses them and starts "
                                  "again at the failed step."))
    if len(audited) >= 2:
        first, last = audited[0]["audit"], audited[-1]["audit"]
        page.section("Before and after", _worse(first, last), table([
            {"label": l, "rows before": first["labels"].get(l), "rows after": last["labels"].get(l),
             "max z* before": first["max_z"].get(l), "max z* after": last["max_z"].get(l),
             "significant before": first["significant"].get(l),
             "significant after": last["significant"].get(l)} for l in first["labels"]],
            formats={"max z* before": fmt.z, "max z* after": fmt.z}),
            note(f"Significant: the features whose z* is above the Bonferroni threshold (α = {_audit_alpha(spec):g}), "
                 f"{fmt.z(first['threshold'])} for the input and {fmt.z(last['threshold'])} after "
                 f"{audited[-1]['step']} (it depends on how many features are counted). Prior p0: "
                 f"{first['prior']}, the same at every step." + _weighted_note(audited)))
    if any(s.get("verdicts") for s in steps):
        page.section("Each stage's verdict", _verdicts(steps),
                     note("Each refining stage audits its output with its input's features and prior and compares "
                          "(its own report shows the tables): ok when it kept its promise."))
    for s in (s for s in steps if s.get("comparison")):
        c = s["comparison"]
        warned = "".join(f'<p class="bad">{html.escape(w)}</p>' for w in c["warnings"])
        page.section(f"Does it help? ({s['step']})", warned + table(
            [{**r, "gain": fmt.points(r["gain"]),
              "95% interval of the gain": fmt.interval(r["95% interval of the gain"])} for r in c["rows"]],
            formats={"accuracy": fmt.percent}),
            note(f"The same model trained on each corpus and on the baseline, {c['baseline']}; the gain is in points "
                 "of accuracy with its paired-bootstrap 95% interval. " + " ".join(c["notes"])))
    if data["tracked"] and audited:
        series = {name: [s["audit"]["tracked"][name] for s in audited] for name in data["tracked"]}
        page.section("The input's top features, stage by stage", figure(
            figures.small_multiples(series, [s["step"] for s in audited], [s["audit"]["threshold"] for s in audited],
                                    title=f"z* of {corpus}'s top features after each stage"),
            "The red dashed line is the Bonferroni threshold: below it a feature no longer predicts its label "
            "more than chance allows. A hollow marker: the feature is in fewer rows than the audit's min_count."
            + _weighted_note(audited)))
    page.section("Where the rows went", figure(figures.row_flow(_flow_steps(steps))),
                 note("Every input line is in one part: rows in = the parts' sum at every step. Rejected input "
                      "rows are in 00-input/rejects with their reasons; a filter's rows in its rejected/ folder."))
    if audited:
        page.section("Labels at each step", figure(figures.shares(
            {s["step"]: s["audit"]["labels"] for s in audited})))
    page.section("Steps", table(_step_rows(steps), formats={"time": fmt.seconds, "peak memory": fmt.size,
                                                            "its Ray task's peak": fmt.size}),
                 note("Peak memory: this process's resident memory while the stage ran (the driver's, on Ray; a "
                      "stage whose work is one process runs there as one Ray task, whose peak has a column of its "
                      "own). A reused stage was unchanged since an earlier run, whose time and memory are shown."))
    if any(s.get("phases") for s in steps):
        page.section("Where the time went", table(_phase_rows(steps), formats={"time": fmt.seconds,
                                                                               "per second": fmt.number}),
                     note("The progress bars each step showed on the terminal, as counted when they finished "
                          "(work done on Ray workers is counted in the step's total time only, except a stage "
                          "run as one task, whose bars the driver drew as they advanced)."))
    page.section("Stage reports", _links(steps))
    if data["final_top"] and len(audited) >= 2:
        page.section(f"The top features after {audited[-1]['step']}", table(
            data["final_top"], formats={"z* of the input": fmt.z, "z* after": fmt.z}),
            note("The corpus the pipeline made, ranked again: a feature the input's ranking did not lead with can "
                 "lead now (— : in fewer rows than min_count at the input)."))
    if data.get("final_unaudited"):
        made = data["final_unaudited"]
        page.section(f"The corpus the pipeline made ({made['step']})",
                     note(f"Not audited: {made['why']}. The figures above end at the last step whose rows were."))
    elif final_stats is not None:
        last = audited[-1]["step"]
        page.section(f"z-statistics of the corpus the pipeline made ({last})",
                     figure(figures.zplot(final_stats, 6, f"{corpus}: after {last}")))
    page.section("Pipeline", code(spec.to_yaml()))
    return page.html()


def _weighted_note(audited: list[dict]) -> str:
    """Which steps' z* are weighted, and what that means ("" where none is)."""
    weighted = [s["step"] for s in audited if s["audit"].get("weighted")]
    return f" After {', '.join(weighted)} the rows carry weights: {WEIGHTED_NOTE}." if weighted else ""


def _verdicts(steps: list[dict]) -> str:
    """Each step's verdicts: the line (red when the stage broke its promise) and its warnings with the remedy."""
    out = []
    for s in steps:
        for part, v in s.get("verdicts", {}).items():
            css = "" if v["ok"] else ' class="bad"'
            name = s["step"] + (f" ({part})" if part else "")
            out.append(f"<p{css}><b>{html.escape(name)}</b>: {html.escape(v['line'])}</p>")
            if v["warnings"]:
                out.append("<ul>" + "".join(f"<li>{html.escape(w)}</li>" for w in v["warnings"]) + "</ul>")
    return "".join(out)


def _worse(first: dict, last: dict) -> str:
    """A warning where the pipeline left a label with more significant features or a higher max z*."""
    worse = [f"{label}: {first['significant'].get(label, 0):,} → {last['significant'].get(label, 0):,} significant "
             f"features, max z* {fmt.z(first['max_z'].get(label))} → {fmt.z(last['max_z'].get(label))}"
             for label in first["labels"]
             if last["significant"].get(label, 0) > first["significant"].get(label, 0)
             or (last["max_z"].get(label) or 0) > (first["max_z"].get(label) or 0) + 0.5]
    return (f'<p class="bad">The pipeline made the shortcuts of {len(worse)} label(s) stronger: '
            f'{html.escape("; ".join(worse))}. See the top features after the last stage below.</p>' if worse else "")


def _audit_alpha(spec) -> float:
    return _audit_config(spec).alpha


def write_pipeline_report(run, spec, opts: ReadOptions, names: tuple, echo) -> None:
    """``OUT/pipeline/``: the resolved pipeline file, the run's accounting, the receipt and its report."""
    spec = dataclasses.replace(spec, out=run.out, engine=run.engine)   # as run (--out, --engine)
    config = spec.report
    data, final_stats, audits = receipt(run, spec, opts, config, names, echo)
    inputs = [p for paths in spec.input.split_paths().values() for p in paths]
    corpus = corpus_name(inputs, opts.storage_options)
    with StageOutput(run.out, opts.storage_options).files("pipeline") as d:
        d.write_text("pipeline.yaml", spec.to_yaml())
        d.write_text("run.json", json.dumps(run.to_dict(), indent=1))
        d.write_text("receipt.json", json.dumps(data, indent=1, default=str))
        d.write_text("report.html", render(data, final_stats, spec, corpus, inputs))
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
    with tempfile.TemporaryDirectory() as tmp:
        pngs = browser.screenshot_reports(Path(root), Path(tmp))
        for png in pngs:
            d.write_bytes(f"screenshots/{png.name}", png.read_bytes())
    echo(f"   screenshots: {len(pngs)} reports in {join(out, 'pipeline', 'screenshots')}")
