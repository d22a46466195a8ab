"""The audit: which surface features leak the label, and how strongly (METHODS §1).

Counting streams batches through ``feature_counts.FeatureCounts`` into a counter (exact, or
sketch: DataSketches fed each batch's counts); partial states merge, so the same function runs
in-process, per Ray Data batch, or on new shards added to a saved state (``update``).
"""
from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import asdict, dataclass, field, replace

import pyarrow as pa
import pyarrow.compute as pc

from refinery.core import stats as zstats
from refinery.core.counts import counter_from_bytes, make_counter
from refinery.core.exact_counts import ExactCounts
from refinery.core.feature_counts import load_kernels_in_background
from refinery.core.features import FeatureConfig
from refinery.core.validation import NOT_EMPTY, OPEN_UNIT_INTERVAL, at_least, one_of, setting, validate
from refinery.io.corpus import AllRejected, EmptyInput, iter_input_batches, reject_reasons
from refinery.io.readers import ReadOptions
from refinery.io.schema import Mapping
from refinery.io.spill import memory_budget
from refinery.io.location import get_fs
from refinery.pipeline.engine import check_engine
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage import Output, Stage, StageInput, StageResult
from refinery.progress import progress
from refinery.report import figures, terminal
from refinery.report import format as fmt
from refinery.report.page import (Report, config_table, corpus_name, fields, figure, humanize, per_label,
                                  top_features)


@dataclass
class AuditConfig:
    features: FeatureConfig = field(default_factory=FeatureConfig)
    counting: str = setting("exact", one_of("exact", "sketch"), "Exact counts (spilling to disk past "
                            "memory_budget), or bounded-memory sketches.")
    prior: str = setting("auto", one_of(*zstats.PRIORS), zstats.PRIOR_HELP)
    min_count: int = setting(10, at_least(1), "Rows a feature must be in for its z* to be computed.")
    alpha: float = setting(0.01, OPEN_UNIT_INTERVAL, "Family-wise level of the Bonferroni-corrected threshold.")
    k: int = setting(20, at_least(1), "Top features per label.")
    probe_folds: int = setting(5, at_least(2), "Folds of the cross-fitted hypothesis-only probe (hypo-only).")
    sketch_lg_k: int = setting(16, at_least(3), "Sketch counting: log2 of the frequent-items map size.")
    sketch_recount: bool = setting(True, help="Sketch counting: a second pass counts the sketches' candidates "
                                              "exactly.")
    memory_budget: str | None = setting(None, help="Exact counting: spill counts to disk past this "
                                                   "(8G, 512M, 0.5 of memory; none: half).")
    update: str | None = setting(None, NOT_EMPTY.or_none(), "A previous audit's folder: add the input to its "
                                 "counts (an incremental audit).")

    def __post_init__(self):
        validate(self)
        if self.memory_budget is not None:
            memory_budget(self.memory_budget)   # its own one-line error

    def to_dict(self) -> dict:
        d = asdict(self)
        d["features"] = self.features.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "AuditConfig":
        return cls(**{**d, "features": FeatureConfig.from_dict(d["features"])})

    @property
    def counter_kind(self) -> tuple:
        """What a saved state must share with an update of it."""
        return self.features, self.counting


@dataclass
class AuditResult:
    stats: zstats.ZStats
    counter: object
    config: AuditConfig
    rejected: int = 0
    recounted: ExactCounts | None = None   # sketch mode's second pass: exact counts of the candidates
    features: int = 0                      # distinct features counted (the statistics hold those with n ≥ min_count)
    prior: zstats.Prior = zstats.Prior("uniform")   # the p0 used, and why (config.prior may be auto)

    @property
    def rows(self) -> int:
        return self.counter.rows

    def top_k(self, k: int | None = None) -> dict:
        """The k largest z* per label, significant or not (``null``, the label prior, apart: ``label_prior``)."""
        return self.stats.top_k(k or self.config.k)

    def label_prior(self) -> dict:
        """Per label: its share of the rows, p0 and z*(null, l), the label prior the ``null`` feature measures."""
        return zstats.label_prior(self.stats.labels, self.counter.label_totals, self.stats.p0)

    def error_bounds(self) -> dict:
        bounds = self.counter.error_bounds()
        if self.recounted is not None:
            bounds["recount"] = {"candidates": int(pc.count_distinct(self.recounted.counts()["feature"]).as_py()),
                                 "count_error": 0}
        return bounds


def new_counter(config: AuditConfig, only: pa.Array | None = None):
    """The configured counter; exact counts of just the features ``only`` in the recount pass; exact counts
    spill past ``config.memory_budget``."""
    if only is not None:
        return ExactCounts(only)
    if config.counting == "sketch":
        return make_counter("sketch", lg_max_k=config.sketch_lg_k)
    return make_counter(config.counting, memory_budget=memory_budget(config.memory_budget))


def count_table(table: pa.Table, config: AuditConfig, counter=None, only: pa.Array | None = None):
    """Add one canonical batch's feature–label counts to ``counter`` (a new one if None).

    ``only``: count just these features (rows' label totals are still all counted).
    """
    counter = counter if counter is not None else new_counter(config, only)
    counter.add_table(table, config.features)
    return counter


def probe_counts(table: pa.Table, config: AuditConfig) -> ExactCounts:
    """Counts of ``hypo-only-pred=<label>``: a cross-fitted hypothesis-only probe's prediction per row."""
    from refinery.models import NGramClassifier, cross_fit_proba

    proba, classes = cross_fit_proba(lambda: NGramClassifier("hypothesis"), table, k=config.probe_folds)
    pred = pa.array([f"hypo-only-pred={classes[i]}" for i in proba.argmax(axis=1)], pa.string())
    counts = pa.table({"feature": pred, "label": table["label"]}).group_by(["feature", "label"]).aggregate(
        [([], "count_all")]).rename_columns(["feature", "label", "count"])
    out = ExactCounts()
    out.add_counts(counts)
    return out


def count_local(inputs, mapping: Mapping | None, opts: ReadOptions, config: AuditConfig,
                only: pa.Array | None = None, probe: bool = True, on_rejects=None):
    """One pass over ``inputs``: (counter, rejected rows). ``probe``: add the hypothesis-only probe's counts;
    ``on_rejects``: called with each batch of the input's rejects."""
    counter = new_counter(config, only)
    load_kernels_in_background()
    rejected = 0
    probe_tables = []
    with progress(desc="audit" if only is None else "recount", unit=" rows") as bar:
        for _, batch in iter_input_batches(inputs, mapping, opts):
            count_table(batch.rows, config, counter, only)
            rejected += batch.rejects.num_rows
            if on_rejects is not None and batch.rejects.num_rows:
                on_rejects(batch.rejects)
            if probe and "hypo-only" in config.features.families:
                probe_tables.append(batch.rows.select(["id", "text_a", "text_b", "label"]))
            bar.update(batch.rows.num_rows)
    add_probe(counter, probe_tables, config)
    return counter, rejected


def add_probe(counter, tables, config):
    """Add the hypothesis-only probe's counts over ``tables`` (none: nothing) to ``counter``."""
    if tables:
        probe = probe_counts(pa.concat_tables(tables), config)
        counter.add_counts(probe.counts())


def audit(inputs, mapping: Mapping | None = None, opts: ReadOptions = ReadOptions(),
          config: AuditConfig = AuditConfig(), engine: str = "local", rejects=None) -> AuditResult:
    """Count features over ``inputs`` (added to the saved state of ``config.update`` if given) and compute
    z-statistics. ``rejects``: a corpus writer (``StageOutput.corpus``) that publishes the input's rejects, as a
    corpus of no rows (an ``AllRejected`` error names it when no row was good).

    Sketch mode with ``sketch_recount`` (and no ``state``) reads the inputs twice: the sketches
    bound memory and name the candidate features, then a second pass counts just those exactly,
    so their z* carry no sketch error. An update of a saved state keeps the sketch estimates.
    """
    check_engine(engine)
    base, state = None, config.update
    if state is not None:
        base, saved = load_state(state)
        if saved.counter_kind != config.counter_kind:
            raise ValueError(f"{state}: saved with features {saved.features.to_dict()} and {saved.counting} "
                             "counting; the update must use the same")
    if engine == "ray":
        from refinery.methods.audit_ray import count_ray as count
    else:
        count = count_local
    opts = replace(opts, row_ids="hypo-only" in config.features.families)   # only the probe's folds read ids
    recount = config.counting == "sketch" and config.sketch_recount and base is None
    counter, reasons = _count_with_rejects(count, inputs, mapping, opts, config, recount, rejects)
    rejected = sum(reasons.values())
    if base is not None:
        counter = base.merge(counter)
    if not counter.rows:
        raise AllRejected(inputs, reasons, rejects and f"{rejects.out} (refinery inspect {rejects.out})")
    present = [label for label, n in counter.label_totals.items() if n]
    if len(present) == 1:
        raise EmptyInput(f"only one label ({present[0]!r}) in the {counter.rows:,} rows read ({rejected:,} rejected): "
                         "z-statistics compare labels; check --preset or --map, and the rejects' reasons")
    recounted = count(inputs, mapping, opts, config, only=counter.candidates())[0] if recount else None
    return finish(counter, config, rejected, recounted)


def _count_with_rejects(count, inputs, mapping, opts, config, recount: bool, rejects):
    """The first counting pass: (counter, the rejects per reason), the rejects published by the writer ``rejects``."""
    reasons = Counter()
    if rejects is None:
        counter, _ = count(inputs, mapping, opts, config, probe=not recount,
                           on_rejects=lambda t: reasons.update(reject_reasons(t)))
        return counter, reasons
    with rejects:
        counter, _ = count(inputs, mapping, opts, config, probe=not recount,
                           on_rejects=lambda t: rejects.write(rejects=t))
        rejects.commit()
    return counter, rejects.reasons


def finish(counter, config: AuditConfig, rejected: int = 0, recounted: ExactCounts | None = None) -> AuditResult:
    """z-statistics of the features in at least ``min_count`` rows (the only ones z* is defined for:
    the statistics of a large corpus's millions of rarer features are never built)."""
    source = recounted if recounted is not None else counter
    labels = sorted(counter.label_totals)
    if not sum(counter.label_totals.values()):
        raise EmptyInput(f"no good rows to audit ({rejected:,} rejected)")
    if source.mode == "exact":   # ExactCounts, or core.merged_counts' MergedCounts (summed by Ray workers)
        features, matrix, n = source.matrix(labels, config.min_count)
        counted = source.num_features
    else:
        features, matrix, n = zstats.long_to_matrix(source.counts(), labels)
        counted = len(features)
        features, matrix, n = zstats.at_least(features, matrix, n, config.min_count)
    prior = zstats.choose_prior(config.prior, {l: counter.label_totals[l] for l in labels})
    st = zstats.from_matrix(features, labels, matrix, zstats.prior_vector(labels, counter.label_totals, prior.name),
                            config.min_count, config.alpha, n=n)
    return AuditResult(st, counter, config, rejected, recounted, counted, prior)


def audit_table(table: pa.Table, config: AuditConfig = AuditConfig()) -> AuditResult:
    """The audit of one in-memory table (e.g. to compare a refined corpus with its input)."""
    return finish(count_table(table, config), config)


# ---------------------------------------------------------------- persistence and report

STATE_FILE = "state.bin"
STATE_META = "state.json"


def load_state(path: str):
    """The counter and config saved by an audit in ``path`` (its folder, or the folder's ``report/``)."""
    fs, root = get_fs(path)
    if not fs.exists(os.path.join(root, STATE_META)) and fs.exists(os.path.join(root, "report", STATE_META)):
        root = os.path.join(root, "report")
    with fs.open(os.path.join(root, STATE_META)) as fh:
        meta = json.load(fh)
    with fs.open(os.path.join(root, STATE_FILE), "rb") as fh:
        counter = counter_from_bytes(fh.read())
    return counter, AuditConfig.from_dict(meta["config"])


def write_outputs(result: AuditResult, out: StageOutput, title: str = "Audit: which features leak the label") -> dict:
    """Publish ``out``'s report/: the summary (report.json and summary.json), stats.parquet (features with
    n ≥ min_count), topk.json, zplot.svg, report.html and the mergeable state (every feature's counts)."""
    st, cfg, inputs = result.stats, result.config, out.inputs
    topk = result.top_k()
    summary = {
        "rows": result.rows,
        "rejected": result.rejected,
        "labels": {l: int(result.counter.label_totals.get(l, 0)) for l in st.labels},
        "features": result.features,
        "features_with_min_count": int((st.n >= cfg.min_count).sum()),
        "threshold": st.threshold,
        "prior": str(result.prior),
        "label_prior": result.label_prior(),
        "significant": {l: int(v) for l, v in zip(st.labels, st.significant().sum(axis=0))},
        "max_z": {l: (topk[l][0]["z"] if topk[l] else None) for l in st.labels},
        "error_bounds": result.error_bounds(),
        "spilled_runs": result.counter.spilled_runs,
        "config": cfg.to_dict(),
        "inputs": list(inputs),
    }
    corpus = corpus_name(inputs, out.storage_options)
    svg = figures.zplot(st, k=min(cfg.k, 8), title=f"z-statistics of {corpus}" if corpus else "z-statistics")
    out.publish_report(summary, _html(summary, svg, topk, title, corpus), files={
        "stats.parquet": st.to_table(cfg.min_count),   # the features z* is defined for
        "topk.json": json.dumps(topk, indent=1),
        "zplot.svg": svg,
        STATE_FILE: result.counter.write_state,
        STATE_META: json.dumps({"config": cfg.to_dict(), "rows": result.rows, "inputs": list(inputs)}, indent=1),
        "summary.json": json.dumps(summary, indent=1, default=str)})
    return summary


def _html(summary: dict, svg: str, topk: dict, title: str, corpus: str) -> str:
    cfg = summary["config"]
    return (Report(title, corpus, summary["inputs"])
            .section("Summary", fields({
                "rows": summary["rows"], "input rejects": summary["rejected"],
                "features counted": summary["features"],
                f"features in ≥ {cfg['min_count']:,} rows": summary["features_with_min_count"],
                "significance threshold": f"z* > {fmt.z(summary['threshold'])} (Bonferroni, α = {cfg['alpha']:g})",
                "prior p0": summary["prior"],
                "counting": ", ".join(f"{humanize(k)} {fmt.value(v)}" for k, v in summary["error_bounds"].items()
                                      if not isinstance(v, dict))
                + (f"; spilled to disk in {summary['spilled_runs']:,} runs" if summary["spilled_runs"] else "")}))
            .section("Labels", per_label(summary["label_prior"], **{
                "significant features": summary["significant"], "max z*": summary["max_z"]}, formats={"max z*": fmt.z}))
            .section("z-statistics (Gardner et al. 2021)", figure(svg, (
                "Each dot is a feature: the share of its rows with the label against the number of rows it is in. "
                "Above the red curve a feature's z* exceeds the threshold: it predicts the label more often than "
                "the prior allows.")))
            .section(f"Top {cfg['k']} features per label", top_features(topk, summary["threshold"]))
            .section("Configuration", config_table(cfg))
            .html())


class AuditStage(Stage):
    """z-statistics of surface features against the label (Gardner et al. 2021).

    Writes ``report/`` (stats.parquet, topk.json, summary.json, report.html and the mergeable counts) and
    ``rejects/`` (the input's rejects, each with its reason); in a pipeline the rows pass on to the next stage
    unchanged.
    """

    name, Config = "audit", AuditConfig
    needs = ("text_a", "label")
    output = Output.INPUT
    references = ("update",)

    def measure(self, source: StageInput, out: StageOutput | None = None) -> AuditResult:
        """The audit of ``source``; its input's rejects published as ``out``'s rejects/ (without ``out``, written
        nowhere: what a pipeline's report measures at each step)."""
        config = replace(self.config, features=self.config.features.named(source.field_names, source.single_text))
        rejects = out.corpus("rejects", settings={self.name: config.to_dict()}) if out is not None else None
        return audit(source.paths, source.mapping, source.opts, config, engine=source.engine, rejects=rejects)

    def run(self, source: StageInput, out: StageOutput) -> StageResult:
        result = self.measure(source, out)
        try:
            summary = write_outputs(result, out)
        finally:
            result.counter.close()
        top = ", ".join(f"{l} {z:.1f}" for l, z in summary["max_z"].items() if z is not None)
        lines = ([f"counts spilled to disk in {summary['spilled_runs']} runs (memory budget)"]
                 if summary["spilled_runs"] else []) + [
            f"{summary['rows']:,} rows ({summary['rejected']:,} rejected), {summary['features']:,} features, "
            f"threshold z > {summary['threshold']:.2f}", f"prior: {summary['prior']}",
            terminal.label_prior(summary["label_prior"]), terminal.topk(result.top_k(), threshold=summary["threshold"])]
        return StageResult(summary["rows"] + summary["rejected"],
                           {"counted": summary["rows"], "input rejects": summary["rejected"]}, summary,
                           f"{summary['rows']:,} rows, {summary['features']:,} features; max z* {top}; "
                           f"prior {summary['prior']}", tuple(lines))

