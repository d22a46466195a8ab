"""The ``refinery`` command line: a thin layer over the Python API."""
from __future__ import annotations

import atexit
import json
import logging
import os
import re
import sys

import click

from refinery.cli.options import (
    as_pipeline,
    engine_option,
    feature_options,
    finished_mode_option,
    generator_options,
    graph_options,
    input_options,
    mode_option,
    precision_option,
    print_config_option,
    printing_config,
    prior_option,
    prompt_batch_option,
    task_model_options,
)
from refinery.io import corpus as corpus_mod
from refinery.io.readers import BadRowError
from refinery.io.storage import claim_output, parse_storage_options
from refinery.pipeline.stage import conservation

# what a user can fix (a bad row, a missing file, an existing output, a wrong option value, storage
# that refuses): exit 2 with one line; anything else is refinery's fault: exit 1, still one line
USER_ERRORS = (BadRowError, FileNotFoundError, FileExistsError, PermissionError, corpus_mod.EmptyInput, ValueError,
               KeyError, OSError)


def _one_line(e: BaseException) -> str:
    from refinery.io.storage import redact_text

    text = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
    text = " ".join(str(text).split()) or type(e).__name__
    return redact_text(text if len(text) <= 500 else text[:500] + " …")


_SENTENCE_END = re.compile(r"(?<!\bal)(?<!\be\.g)(?<!\bi\.e)\.(?=\s|$)")


class RefineryCommand(click.Command):
    """A verb: its ``--io-timeout`` holds for every store call, its ``--out`` is checked before any work
    (refinery writes only where it may: ``claim_output``), and its summary in ``refinery --help`` is its
    docstring's first sentence, whole."""

    def invoke(self, ctx):
        if ctx.params.get("io_timeout"):   # read by every store client, Ray workers' too
            os.environ["REFINERY_IO_TIMEOUT"] = str(ctx.params["io_timeout"])
        if ctx.params.get("out"):
            claim_output(ctx.params["out"], parse_storage_options(ctx.params.get("storage_options")))
        return super().invoke(ctx)

    def get_short_help_str(self, limit: int = 45) -> str:
        if self.short_help:
            return self.short_help
        first = " ".join((self.help or "").split("\n\n")[0].split())
        end = _SENTENCE_END.search(first)
        return first[: end.end()] if end else first


class RefineryGroup(click.Group):
    """Errors end as one line on stderr (exit 2 for a user's mistake); ``--debug`` shows the traceback.
    Ctrl-C exits 130 (what a run wrote is removed, a finished output left as it was); a reader that closed
    the pipe (``refinery … | head``) ends the command quietly."""

    command_class = RefineryCommand

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except KeyboardInterrupt:
            click.echo("interrupted: nothing was published; a finished output in --out is as it was", err=True)
            raise click.exceptions.Exit(130) from None
        except BrokenPipeError:
            _quiet_stdout()
            raise click.exceptions.Exit(0) from None
        except Exception as e:  # noqa: BLE001 — the one place errors become messages
            if ctx.params.get("debug"):
                raise
            click.echo(f"error: {_one_line(e)}", err=True)
            sys.exit(2 if isinstance(e, USER_ERRORS) else 1)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null: the reader is gone, and the interpreter's last flush must not fail."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


@click.group(cls=RefineryGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--debug", is_flag=True, envvar="REFINERY_DEBUG", help="Show tracebacks instead of one-line errors.")
@click.version_option(package_name="refinery")
def main(debug):
    """refinery: audit and debias labeled text corpora."""
    if not debug:  # fsspec's event loop logs a traceback for every request a dead endpoint cut short
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)


@main.command()
@click.argument("inputs", nargs=-1, required=True)
@click.option("--out", required=True, help="Output folder or URL.")
@click.option("--shard-rows", type=int, default=corpus_mod.DEFAULT_SHARD_ROWS, show_default=True,
              help="Rows per Parquet shard.")
@mode_option
@input_options
def convert(inputs, out, shard_rows, mode, mapping, opts):
    """Read INPUTS (files, folders, globs, URLs) and write the canonical corpus to OUT."""
    reuse = mode == "skip" and corpus_mod.is_corpus(out, opts.storage_options)  # kept only if the config matches
    manifest = corpus_mod.convert(inputs, out, mapping, opts, mode=mode, shard_rows=shard_rows,
                                  config={"inputs": list(inputs), "mapping": mapping.__dict__ if mapping else None})
    if reuse:
        click.echo(f"{out}: skipped (same inputs and config)")
    click.echo(f"{out}: {manifest['rows']:,} rows, {manifest['rejected']:,} rejected "
               f"in {len(manifest['files'])} shard(s)")
    click.echo(conservation(manifest["rows"] + manifest["rejected"], out=manifest["rows"],
                            rejected=manifest["rejected"]))


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@input_options
def inspect(paths, as_json, mapping, opts):
    """Rows, schema, label counts, rejects by reason and text lengths of PATHS."""
    from refinery.core.inspect import format_inspection
    from refinery.core.inspect import inspect as run_inspect

    info = run_inspect(paths, mapping, opts)
    click.echo(json.dumps(info, indent=2) if as_json else format_inspection(info))


@main.command()
@click.argument("query")
@click.argument("corpora", nargs=-1, required=True)
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json", "parquet"]), default="table",
              show_default=True, help="How the result is printed (parquet: written to --output or QUERY.parquet).")
@click.option("--output", "output", help="Write the result to this file instead of the terminal.")
@click.option("--limit", type=int, default=50, show_default=True, help="Rows shown in table format.")
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE", help="Bind a $NAME query parameter.")
@input_options
def sql(query, corpora, fmt, output, limit, params, mapping, opts):
    """Run a named query from sql/ (or a .sql FILE) over CORPORA ([SPLIT=]PATH ...), exposed as view ``corpus``."""
    import tempfile

    from refinery.io import queries

    bad = [p for p in params if "=" not in p]
    if bad:
        raise ValueError(f"--param {bad[0]!r} is not NAME=VALUE")
    con = queries.connect()
    with tempfile.TemporaryDirectory(prefix="refinery-sql-") as workdir:
        files = queries.corpus_files(corpora, mapping, opts, workdir)
        queries.register_corpora(con, files, opts.storage_options)
        result = queries.run(con, query, dict(p.split("=", 1) for p in params))
    if output or fmt == "parquet":
        import pyarrow.csv as pcsv
        import pyarrow.parquet as pq

        target = output or f"{query.removesuffix('.sql')}.parquet"
        if fmt == "parquet":
            pq.write_table(result, target)
        elif fmt == "csv":
            pcsv.write_csv(result, target)
        else:
            with open(target, "w") as fh:
                json.dump(result.to_pylist(), fh, default=str, indent=1)
        click.echo(f"{result.num_rows:,} rows -> {target}")
    elif fmt == "json":
        click.echo(json.dumps(result.to_pylist(), default=str, indent=1))
    elif fmt == "csv":
        import pyarrow.csv as pcsv

        buf = __import__("io").BytesIO()
        pcsv.write_csv(result, buf)
        click.echo(buf.getvalue().decode())
    else:
        click.echo(result.slice(0, limit).to_pandas().to_string(max_colwidth=60))
        click.echo(f"({result.num_rows:,} rows)")


def _memory_budget_option(ctx, param, value):
    """Check a --memory-budget now (exit 2 on a bad value), not after the counting."""
    if value is not None:
        from refinery.io.spill import memory_budget

        try:
            memory_budget(value)
        except ValueError as e:
            raise click.BadParameter(str(e)) from None
    return value


@main.command()
@click.argument("inputs", nargs=-1, required=True)
@click.option("--out", required=True, help="Output folder: stats.parquet, topk.json, report.html, state.")
@click.option("--k", type=int, default=20, show_default=True, help="Top features per label.")
@click.option("--min-count", type=int, default=10, show_default=True,
              help="Rows a feature must be in for its z* to be computed and ranked.")
@prior_option
@click.option("--alpha", type=float, default=0.01, show_default=True, help="Family-wise level (Bonferroni).")
@click.option("--counting", type=click.Choice(["exact", "sketch"]), default="exact", show_default=True,
              help="Exact counts (spilling to disk past --memory-budget), or bounded-memory sketches.")
@click.option("--sketch-lg-k", type=int, default=16, show_default=True, help="log2 of frequent-items map size.")
@click.option("--sketch-recount/--no-sketch-recount", default=True, show_default=True,
              help="Sketch mode: a second pass counts the sketches' candidate features exactly.")
@click.option("--memory-budget", callback=_memory_budget_option,
              help="Exact counting: past this much memory, counts spill to disk and merge by partition "
                   "(8G, 512M, or a fraction of memory such as 0.5)  [default: half of memory]")
@engine_option
@click.option("--update", "state", help="A previous audit folder: add INPUTS to its counts.")
@finished_mode_option
@feature_options
@print_config_option
@input_options
def audit(inputs, out, k, min_count, prior, alpha, counting, sketch_lg_k, sketch_recount, memory_budget, engine,
          state, feature_config, mapping, opts):
    """z-statistics of surface features against the label (Gardner et al. 2021)."""
    from refinery.methods import audit as audit_mod
    from refinery.pipeline.report import terminal_label_prior, terminal_topk

    config = audit_mod.AuditConfig(features=feature_config, mode=counting, prior=prior, min_count=min_count,
                                   alpha=alpha, k=k, sketch_lg_max_k=sketch_lg_k, sketch_recount=sketch_recount,
                                   memory_budget=memory_budget)
    if state and printing_config():
        raise click.UsageError("--update has no pipeline equivalent (a pipeline audits its own input)")
    as_pipeline("audit", config, inputs, out, engine)
    result = audit_mod.audit(inputs, mapping, opts, config, engine=engine, state=state)
    try:
        summary = audit_mod.write_outputs(result, out, inputs)
    finally:
        result.counter.close()
    if summary["spilled_runs"]:
        click.echo(f"counts spilled to disk in {summary['spilled_runs']} runs (memory budget)")
    click.echo(conservation(summary["rows"] + summary["rejected"], counted=summary["rows"],
                            rejected=summary["rejected"]))
    click.echo(f"{summary['rows']:,} rows ({summary['rejected']:,} rejected), {summary['features']:,} features, "
               f"threshold z > {summary['threshold']:.2f}")
    click.echo(f"prior: {summary['prior']}")
    click.echo(terminal_label_prior(summary["label_prior"]))
    click.echo(terminal_topk(result.top_k()))
    click.echo(f"report: {out}/report.html")


@main.command()
@click.option("--out", required=True, help="Output corpus.")
@click.option("--rows", type=int, default=100_000, show_default=True, help="Rows to generate.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed: the same seed gives the same corpus.")
@click.option("--planted", default=None, metavar="WORD:LABEL:RATE,...",
              help="Spurious tokens to plant (default: six NLI-like shortcuts; none: no planted tokens).")
@click.option("--leak", type=float, default=0.1, show_default=True, help="Rate in other labels, relative.")
@click.option("--premise-pool", type=int, default=0, help="Draw premises from a pool with label-dependent degrees.")
@click.option("--signal-words", type=int, default=0, show_default=True,
              help="Genuine cue words per label (one per hypothesis): the signal a debiased model keeps.")
@click.option("--signal-rate", type=float, default=0.8, show_default=True,
              help="How often a row's cue word is of its own label.")
@click.option("--split", type=click.Choice(["train", "test", "anti-shortcut"]), default="train", show_default=True,
              help="test: other rows of the same distribution; anti-shortcut: the shortcuts reversed (planted words "
                   "and pooled premises of other labels), over the same words as --seed's train split.")
@click.option("--shard-rows", type=int, default=1_000_000, show_default=True, help="Rows per Parquet shard.")
@mode_option
def synth(out, rows, seed, planted, leak, premise_pool, signal_words, signal_rate, split, shard_rows, mode):
    """Generate a planted-bias NLI-like corpus (deterministic from --seed)."""
    from refinery.io import synth as synth_mod

    kwargs = {"rows": rows, "seed": seed, "leak": leak, "premise_pool": premise_pool, "signal_words": signal_words,
              "signal_rate": signal_rate, "split": split}
    if planted:
        kwargs["planted"] = synth_mod.parse_planted(planted)
    manifest = synth_mod.write(synth_mod.SynthSpec(**kwargs), out, shard_rows=shard_rows, mode=mode)
    click.echo(f"{out}: {manifest['rows']:,} rows in {len(manifest['files'])} shard(s)")


@main.command()
@click.argument("inputs", nargs=-1)
@click.option("--out", required=True, help="Output folder: kept/, rejected/, report/.")
@click.option("--k", type=int, default=20, show_default=True, help="|B_Z(l)|: top-k biased features per label.")
@click.option("--batch-size", type=int, default=1000, show_default=True, help="Rows per decision batch.")
@click.option("--min-count", type=int, default=10, show_default=True,
              help="Rows of Z a feature must be in before it can be biased.")
@click.option("--warmup", type=int, default=0, show_default=True, help="Accept all rows until Z holds this many.")
@prior_option
@click.option("--shuffle-seed", type=int, default=None, help="Shuffle the stream (the result depends on order).")
@click.option("--seed-corpus", multiple=True, help="Z starts as this corpus (conditional filtering).")
@click.option("--composition", "composition", type=click.Choice(["plain", "zaug", "parz", "seqz"]), default="plain",
              show_default=True, help="Wu et al. §4.2 with --original and --generated.")
@click.option("--original", multiple=True, help="D0 for --composition.")
@click.option("--generated", multiple=True, help="G for --composition.")
@engine_option
@mode_option
@feature_options
@print_config_option
@input_options
def zfilter(inputs, out, k, batch_size, min_count, warmup, prior, shuffle_seed, seed_corpus, composition,
            original, generated, engine, mode, feature_config, mapping, opts):
    """z-filtering (Wu et al. 2022, Algorithm 1): keep the rows that carry no top-k biased feature."""
    from refinery.methods import zfilter as zf

    config = zf.ZFilterConfig(k=k, batch_size=batch_size, min_count=min_count, warmup=warmup, prior=prior,
                              shuffle_seed=shuffle_seed, features=feature_config, seed=tuple(seed_corpus))
    if composition == "plain":
        if not inputs:
            raise click.UsageError("give INPUTS (or --composition with --original/--generated)")
        as_pipeline("zfilter", config, inputs, out, engine)
        report = zf.run(inputs, out, mapping, opts, config, engine=engine, mode=mode)
    else:
        if not original or not generated:
            raise click.UsageError("--composition needs --original and --generated")
        as_pipeline("compose", zf.ComposeConfig(composition, tuple(original), config), generated, out, engine)
        report = zf.compose(composition, original, generated, out, mapping, opts, config, engine=engine, mode=mode)
    click.echo(f"kept {report['kept']:,}, rejected {report['rejected']:,}; prior {report['prior']}")
    rows_in, parts = zf.accounting(report)
    click.echo(conservation(rows_in, **parts))
    for label in report["max_z_before"]:
        click.echo(f"  max z* {label:<16} {report['max_z_before'][label]!s:>8} -> {report['max_z_after'][label]}")
    click.echo(f"report: {out}/report/report.html")


@main.command()
@click.argument("inputs", nargs=-1, required=True)
@click.option("--out", required=True, help="Output folder: kept/ and rejected/.")
@click.option("--tau", type=float, default=0.95, show_default=True,
              help="τ: keep a row when p_M(label | text) exceeds it.")
@click.option("--proba-column", help="Column holding p_M(label | text).")
@click.option("--model", "model", metavar="ngram|transformer|FOLDER",
              help="ngram or transformer: cross-fitted on INPUTS (--folds); else a saved classifier "
                   "(refinery probe --save-model).")
@click.option("--folds", type=int, default=5, show_default=True, help="K of the cross-fitting.")
@mode_option
@print_config_option
@input_options
def confidence(inputs, out, tau, proba_column, model, folds, mode, mapping, opts):
    """Keep rows whose task-model confidence in their label exceeds --tau."""
    from refinery.methods import confidence as conf

    config = conf.ConfidenceConfig(tau, model, proba_column, folds)
    as_pipeline("confidence", config, inputs, out)
    report = conf.run(inputs, out, mapping, opts, config, mode)
    click.echo(f"kept {report['kept']:,}, rejected {report['rejected']:,} (tau {tau})")
    click.echo(conservation(report["rows_in"], kept=report["kept"],
                            **{"filtered out": report["rejected"], "input rejects": report["input_rejected"]}))


@main.command()
@click.argument("inputs", nargs=-1, required=True)
@click.option("--out", required=True, help="Output corpus: the input and its up-sampled copies, report/.")
@click.option("--k", type=int, default=10, show_default=True, help="Tokens to correct.")
@click.option("--step", type=float, default=0.2, show_default=True,
              help="Share of a token's deficit drawn on each of its turns, in (0, 1].")
@click.option("--iterations", type=int, default=10, show_default=True, help="Round-robin passes at most.")
@click.option("--band", default="0.002,0.02", show_default=True,
              help="Count band as fractions of the corpus (MIN,MAX), or absolute counts if > 1.")
@click.option("--min-count", type=int, default=20, show_default=True,
              help="Rows a token must be in, whatever the band.")
@click.option("--stopwords/--keep-stopwords", default=True, show_default=True, help="Remove stopwords.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the draws.")
@mode_option
@print_config_option
@input_options
def upsample(inputs, out, k, step, iterations, band, min_count, stopwords, seed, mode, mapping, opts):
    """AUDAC adaptive round-robin up-sampling (DuckDB SQL over Parquet)."""
    from refinery.methods import upsample as up

    try:
        lo, hi = (float(x) for x in band.split(","))
    except ValueError:
        raise click.BadParameter(f"{band!r} is not MIN,MAX (e.g. 0.002,0.02)", param_hint="--band") from None
    config = up.UpsampleConfig(k=k, step=step, iterations=iterations, band_min=lo, band_max=hi,
                               min_count=min_count, remove_stopwords=stopwords, seed=seed)
    as_pipeline("upsample", config, inputs, out)
    report = up.run(inputs, out, mapping, opts, config, mode=mode)
    click.echo(f"{report['rows_before']:,} -> {report['rows_after']:,} rows (+{report['growth']:.1%}), "
               f"{report['iterations_run']} iteration(s)")
    click.echo(conservation(report["rows_before"] + report["rejected"], out=report["rows_before"],
                            rejected=report["rejected"]) + f" (+ {report['rows_added']:,} up-sampled copies)")
    for tok in report["tokens"]:
        click.echo(f"  {tok:<16} max p̂ {max(report['p_hat_before'][tok].values()):.3f} -> "
                   f"{report['max_p_after'][tok]:.3f}")
    if report["uncorrectable"]:
        click.echo("  uncorrectable: " + ", ".join(u["token"] for u in report["uncorrectable"]))
    if report["left_out"]:
        lo, hi = report["band"]
        click.echo(f"  left out of the top {k} tokens by z* (band: n from {lo:,} to {hi:,}):")
        for e in report["left_out"]:
            click.echo(f"    {e['token']:<14} z* {e['z']:6.1f} {e['label']}, n {e['n']:,}: {e['reason']}")
        if report["band_hint"]:
            click.echo(f"  --band {report['band_hint']} would take in those outside the band")
    click.echo(f"report: {out}/report/report.html")


@main.command()
@click.option("--out", required=True, help="Output folder: features.parquet, predictions.parquet, report.json/html.")
@click.option("--test-split", help="The split to score (default: 'test', else the last --input).")
@click.option("--identical-pairs", "identical_label", metavar="LABEL",
              help="Also write identical/: every distinct sentence paired with itself, labelled LABEL (paper §3).")
@finished_mode_option
@graph_options
@print_config_option
@input_options
def leakage(inputs, out, test_split, identical_label, graph, forest, mapping, opts):
    """How well the sentence graph alone predicts the label (leakage features, random forest)."""
    from refinery.methods import leakage as leakage_mod

    config = leakage_mod.LeakageConfig(graph, forest, test_split, identical_label)
    as_pipeline("leakage", config, inputs, out)
    try:
        report = leakage_mod.run(inputs, out, mapping, opts, config)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    click.echo(f"{report['edges']:,} pairs, {report['nodes']:,} sentences; test split {report['test_split']!r}")
    pairs = sum(report["rows"].values())
    click.echo(conservation(pairs + report["rejected"], pairs=pairs, rejected=report["rejected"]))
    click.echo(f"  leakage accuracy  {report['leakage_accuracy']:.4f}  (advanced {report['advanced_accuracy']:.4f})")
    click.echo(f"  majority accuracy {report['majority_accuracy']:.4f}  ({report['majority_label']})")
    for name, acc in report["ablations"].items():
        click.echo(f"  {name:<22} {acc:.4f}")
    click.echo(f"report: {out}/report.html")


@main.command()
@click.option("--out", required=True, help="Output corpus: the rows with split and weight columns.")
@click.option("--folds", type=int, default=10, show_default=True, help="K of the cross-prediction (paper: 100).")
@click.option("--features", "feature_set", type=click.Choice(["basic", "advanced"]), default="basic",
              show_default=True, help="Leakage features the forest reads.")
@click.option("--min-proba", type=float, default=1e-3, show_default=True, help="Floor of P̂(y|l).")
@click.option("--clip", type=float, default=None, help="Cap weights at this multiple of the mean.")
@mode_option
@graph_options
@print_config_option
@input_options
def weights(inputs, out, folds, feature_set, min_proba, clip, mode, graph, forest, mapping, opts):
    """Leakage-neutral IPS weights w = 1/P(S=y|l) (Zhang et al. 2019, Algorithm 1)."""
    from refinery.methods import weights as weights_mod

    try:
        config = weights_mod.WeightsConfig(folds=folds, features=feature_set, min_proba=min_proba, clip=clip,
                                           forest=forest, graph=graph, seed=forest.seed)
        as_pipeline("weights", config, inputs, out)
        report = weights_mod.run(inputs, out, mapping, opts, config, mode=mode)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    d = report["diagnostics"]
    click.echo(conservation(report["rows"] + report["rejected"], out=report["rows"], rejected=report["rejected"]))
    click.echo(f"{d['rows']:,} rows -> {out}: weight min {d['min']:.3f}, max {d['max']:.2f}, "
               f"effective sample size {d['effective_sample_size']:,.0f}")
    if report["low_ess_warning"]:
        click.echo(f"warning: {report['low_ess_warning']['message']}", err=True)
    oof = report["out_of_fold"]
    click.echo(f"  leakage-only model: accuracy {oof['accuracy']:.4f} -> weighted {oof['weighted_accuracy']:.4f} "
               f"(weighted majority {oof['weighted_majority_accuracy']:.4f})")


@main.command()
@click.option("--predictions", required=True, help="Parquet file or corpus with id, label and a prediction column.")
@click.option("--weights", "weights_path", help="A weights corpus (refinery weights) joined on id (and split).")
@click.option("--prediction-column", default="prediction", show_default=True,
              help="Column holding the predicted label.")
@click.option("--storage-option", "storage_options", multiple=True, metavar="KEY=VALUE",
              help="fsspec storage option (e.g. endpoint_url=http://127.0.0.1:9000).")
def evaluate(predictions, weights_path, prediction_column, storage_options):
    """Accuracy and leakage-neutral ("Debiased Eva") accuracy of predictions, overall and per split."""
    from refinery.io.corpus import read_any
    from refinery.methods.weights import evaluate as evaluate_predictions

    so = parse_storage_options(storage_options)
    try:
        result = evaluate_predictions(read_any(predictions, so),
                                      read_any(weights_path, so) if weights_path else None, prediction_column)
    except (KeyError, ValueError, FileNotFoundError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
    click.echo(json.dumps(result, indent=1))


@main.command()
@click.option("--train", "train", multiple=True, required=True, help="Training corpus (repeatable).")
@click.option("--eval", "evaluate_on", multiple=True, help="Corpora to score (repeatable).")
@click.option("--out", required=True, help="Folder: report.json, predictions.parquet.")
@click.option("--hypothesis-only", is_flag=True, help="Read text_b alone (the hypothesis-only probe).")
@task_model_options
@click.option("--save-model", help="Save the fitted classifier here (for --model of confidence, IBADR).")
@finished_mode_option
@precision_option
@input_options
def probe(train, evaluate_on, out, hypothesis_only, backend, model_name, epochs, lr, batch, max_length, save_model,
          train_precision, mapping, opts):
    """Train a classifier (hypothesis-only or full input) on --train and score --eval corpora."""
    from refinery.methods import probe as probe_mod

    params = {} if backend == "ngram" else {"model": model_name, "epochs": epochs, "lr": lr,
                                             "batch_size": batch, "max_length": max_length,
                                             "precision": train_precision}
    report = probe_mod.run(list(train), list(evaluate_on), out, mapping, opts, backend,
                           "hypothesis" if hypothesis_only else "pair", params, save_model)
    click.echo(f"{backend} ({'hypothesis-only' if hypothesis_only else 'full input'}) on "
               f"{report['train_rows']:,} rows in {report['fit_seconds']:.0f}s")
    for name, r in report["eval"].items():
        click.echo(f"  {name:<28} accuracy {r['accuracy']:.4f}  (majority {r['majority_accuracy']:.4f}, "
                   f"{r['rows']:,} rows)")


@main.command()
@click.option("--train", "train", multiple=True, required=True, metavar="NAME=PATH[@SPLIT]",
              help="A training corpus (repeat; the first is the baseline). Folders, globs, finished corpora; a "
                   "corpus with a split column trains on its 'train' rows, or on @SPLIT's.")
@click.option("--eval", "evals", multiple=True, required=True, metavar="NAME=PATH[:PRESET]",
              help="An evaluation set with its own preset (default: the training --preset/--map).")
@click.option("--label-map", "label_maps", multiple=True, metavar="NAME=FROM:TO,...",
              help="Map training labels onto evaluation set NAME's labels (presets' maps built in: hans).")
@click.option("--out", required=True, help="Folder: report/ (report.json, report.html, predictions.parquet), runs/.")
@task_model_options
@click.option("--seeds", type=int, default=1, show_default=True,
              help="Runs per corpus (n-gram: bootstrap replicates of the corpus; transformer: initialisations).")
@click.option("--bootstrap", type=int, default=1000, show_default=True, help="Draws of the paired bootstrap.")
@click.option("--by", "by", multiple=True, metavar="COL", help="Also break accuracy down by this column.")
@click.option("--hypothesis-only", is_flag=True, help="Train the hypothesis-only bias probe instead.")
@click.option("--allow-overlap", is_flag=True,
              help="Score evaluation rows also found in a training corpus (marked in the report) instead of failing.")
@finished_mode_option
@precision_option
@input_options
def compare(train, evals, label_maps, out, backend, model_name, epochs, lr, batch, max_length, seeds, bootstrap, by,
            hypothesis_only, allow_overlap, train_precision, mapping, opts):
    """Does it help? The same model trained on each corpus, scored on in-domain and challenge sets."""
    from refinery.methods import compare as cmp

    try:
        train_sets = cmp.parse_named(train, "--train")
        maps = dict(_label_map(m) for m in label_maps)
        eval_sets = [cmp.parse_eval_set(e, maps) for e in evals]
        unknown = sorted(set(maps) - {e.name for e in eval_sets})
        if unknown:
            raise ValueError(f"--label-map names no evaluation set: {', '.join(unknown)}")
        config = cmp.CompareConfig(backend=backend, inputs="hypothesis" if hypothesis_only else "pair",
                                   model=model_name, epochs=epochs, lr=lr, batch_size=batch, max_length=max_length,
                                   precision=train_precision, seeds=seeds, bootstrap=bootstrap, by=tuple(by),
                                   allow_overlap=allow_overlap)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    report = cmp.run(train_sets, eval_sets, out, mapping, opts, config)
    names = list(report["train"])
    click.echo(f"{backend} ({'hypothesis-only' if hypothesis_only else 'full input'}), {seeds} seed(s); "
               f"training rows: " + ", ".join(f"{n} {report['train'][n]['rows']:,}" for n in names))
    width = max(len(n) for n in names) + 2
    for ev, per in report["accuracy"].items():
        info = report["eval"][ev]
        click.echo(f"{ev} ({info['rows']:,} rows; majority class {info['majority']['label']} "
                   f"{info['majority']['accuracy']:.1%})")
        for n in names:
            click.echo(f"  {n:<{width}} {cmp.accuracy_cell(per[n])}")
    click.echo(f"report: {out}/report/report.html")


def _label_map(spec: str) -> tuple[str, dict]:
    name, sep, pairs = spec.partition("=")
    out = {}
    for pair in filter(None, pairs.split(",")):
        src, colon, dst = pair.partition(":")
        if not colon:
            raise ValueError(f"--label-map {spec!r}: {pair!r} is not FROM:TO")
        out[src] = dst
    if not sep or not out:
        raise ValueError(f"--label-map {spec!r} is not NAME=FROM:TO,...")
    return name, out


@main.command()
@click.argument("inputs", nargs=-1, required=True)
@click.option("--out", required=True, help="Output corpus of generated rows (+ generation/failed.parquet).")
@click.option("--template", default=None, help="Prompt template over {text_a} {text_b} {label} {label_description}.")
@click.option("--target-labels", default="own", show_default=True, help="own | all | A,B: labels to generate for.")
@click.option("--limit", type=int, default=None, help="Use only the first N input rows.")
@engine_option
@prompt_batch_option
@click.option("--actors", type=int, default=1, show_default=True, help="Ray Data actor pool size.")
@click.option("--gpus-per-actor", type=float, default=0, show_default=True, help="GPUs each actor asks for.")
@mode_option
@generator_options
@print_config_option
@input_options
def generate(inputs, out, template, target_labels, limit, engine, batch_size, actors, gpus_per_actor, mode, backend,
             sampling, mapping, opts):
    """Label-conditioned generation (e.g. hypotheses for a premise and a label) through a generator stage."""
    from refinery.io.corpus import load
    from refinery.methods import generation

    config = generation.GenerationConfig(template=template or generation.DEFAULT_TEMPLATE,
                                         target_labels=target_labels, limit=limit, sampling=sampling, backend=backend,
                                         batch_size=batch_size, actors=actors, gpus_per_actor=gpus_per_actor)
    as_pipeline("generate", config, inputs, out, engine)
    table, rejects = load(inputs, mapping, opts)
    report = generation.run(table, out, config, engine, mode, input_rejects=rejects,
                            storage_options=opts.storage_options)
    click.echo(f"{report['prompts']:,} prompts -> {report['generated']:,} generated rows, {report['failed']:,} failed "
               f"({backend.name}, {engine})")
    click.echo(conservation(table.num_rows + rejects.num_rows, prompted=report["inputs"],
                            **{"beyond --limit": report["beyond_limit"], "input rejects": rejects.num_rows}))


@main.command()
@click.argument("inputs", nargs=-1, required=True)
@click.option("--out", required=True, help="Output folder: scores/, corpus/ (rewritten, same size), report/.")
@click.option("--score-only", is_flag=True, help="Only write the shortcut score γ per row and the objective.")
@click.option("--top-k", type=int, default=50, show_default=True, help="Rows rewritten per round.")
@click.option("--candidates", type=int, default=4, show_default=True, help="Rewrites per row (m).")
@click.option("--rounds", type=int, default=5, show_default=True,
              help="Rewriting rounds at most (fewer when the objective stops increasing).")
@click.option("--dim", type=int, default=64, show_default=True, help="Positional-encoding size λ.")
@click.option("--verify", "verify_mode", type=click.Choice(["answer", "choice"]), default="answer", show_default=True,
              help="G_β: its answer must be exactly the label, or (transformers) the most likely label is taken.")
@click.option("--verifier-model", help="A saved classifier as G_β instead of a second LLM call.")
@engine_option
@prompt_batch_option
@mode_option
@generator_options
@print_config_option
@input_options
def razor(inputs, out, score_only, top_k, candidates, rounds, dim, verify_mode, verifier_model, engine, batch_size,
          mode, backend, sampling, mapping, opts):
    """RAZOR: shortcut scores γ and the LLM rewrite/verify loop (Yang et al. 2024)."""
    from dataclasses import replace

    from refinery.io.corpus import load
    from refinery.methods import razor as rz

    config = rz.RazorConfig(dim=dim, top_k=top_k, candidates=candidates, rounds=rounds, verify_mode=verify_mode,
                            rewrite=replace(sampling, n=candidates),
                            verify=replace(rz.RazorConfig.verify, seed=sampling.seed), backend=backend,
                            verifier_model=verifier_model, score_only=score_only, batch_size=batch_size)
    as_pipeline("razor", config, inputs, out, engine)
    table, rejects = load(inputs, mapping, opts)
    report = rz.run(table, out, config, engine, mode, input_rejects=rejects, storage_options=opts.storage_options)
    click.echo(conservation(table.num_rows + rejects.num_rows, scored=table.num_rows, rejected=rejects.num_rows))
    click.echo(f"{report['rows']:,} rows scored on {report['field']}: objective {report['objective']:.6g}, "
               f"median γ {report['gamma']['median']:.4g}")
    for r in report.get("rounds", []):
        click.echo(f"  round {r['round']}: {r['candidates']} candidates, {r['accepted']} accepted, "
                   f"{r['replaced']} replaced, objective {r['objective_before']:.6g} -> {r['objective_after']:.6g}"
                   + ("" if r["kept"] else " (undone)"))
    click.echo(f"report: {out}/report/report.html")


@main.command()
@click.argument("inputs", nargs=-1, required=True)
@click.option("--out", required=True, help="Output folder: pool/, generated/, report/, checkpoints/.")
@click.option("--profile", type=click.Choice(["paper", "small"]), default="small", show_default=True,
              help="paper: N_iter 5, 200K per iteration; small: a CPU run (see README).")
@click.option("--sample-rows", type=int, help="Start from a seeded random sample of this many rows.")
@click.option("--iterations", type=int, help="N_iter.")
@click.option("--per-iteration", type=int, help="Pseudo samples generated per iteration.")
@click.option("--groups", type=int, help="N_bi, the number of bias indicators.")
@click.option("--tau", type=float, help="ε: the task model's confidence a pseudo sample must exceed.")
@click.option("--shallow-rows", type=int, help="Rows of the corpus the shallow model is first trained on.")
@click.option("--usm-rows", type=int, help="Pool rows sampled to update the shallow model each iteration.")
@click.option("--shallow", type=click.Choice(["ngram", "transformer"]), help="The shallow model θs.")
@click.option("--task-model", type=click.Choice(["ngram", "transformer"]), help="The confidence filter's model.")
@click.option("--generator", help="Generator θg: a model name or folder (default SmolLM2-135M-Instruct).")
@click.option("--lr", type=float, help="The generator's learning rate.")
@click.option("--first-epochs", type=int, help="Generator epochs in the first iteration.")
@click.option("--later-epochs", type=int, help="Generator epochs in later iterations.")
@click.option("--max-new-tokens", type=int, help="Longest generation, in tokens.")
@click.option("--no-usm", is_flag=True, help="Ablation: never update the shallow model.")
@click.option("--lowest-indicator", is_flag=True, help="Ablation: generate with b1 only (b_r -> b1).")
@click.option("--no-indicator", is_flag=True, help="Ablation: train and generate without bias indicators.")
@click.option("--no-iteration", is_flag=True, help="Ablation: one iteration generating all samples at once.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of samples, draws and training.")
@click.option("--backend", type=click.Choice(["transformers", "vllm"]), default="transformers", show_default=True,
              help="Generation backend for the fine-tuned generator.")
@engine_option
@prompt_batch_option
@click.option("--mode", type=click.Choice(["resume", "overwrite"]), default="resume", show_default=True,
              help="resume: continue from the last finished iteration in --out.")
@precision_option
@print_config_option
@input_options
def ibadr(inputs, out, profile, sample_rows, iterations, per_iteration, groups, tau, shallow_rows, usm_rows, shallow,
          task_model, generator, lr, first_epochs, later_epochs, max_new_tokens, train_precision, no_usm,
          lowest_indicator, no_indicator, no_iteration, seed, backend, engine, batch_size, mode, mapping, opts):
    """IBADR: iterative bias-aware generation of low-bias pseudo samples (Wang et al. 2023)."""
    from dataclasses import replace

    from refinery.io.corpus import load
    from refinery.methods import ibadr as ib

    overrides = {"iterations": iterations, "per_iteration": per_iteration, "groups": groups, "tau": tau,
                 "shallow_rows": shallow_rows, "usm_rows": usm_rows, "sample_rows": sample_rows,
                 "shallow": shallow, "task_model": task_model, "generator": generator, "lr": lr,
                 "first_epochs": first_epochs, "later_epochs": later_epochs}
    config = replace(ib.PROFILES[profile], **{k: v for k, v in overrides.items() if v is not None}, seed=seed,
                     usm=not no_usm, lowest_indicator=lowest_indicator, indicator=not no_indicator,
                     iterate=not no_iteration, backend=backend, batch_size=batch_size, train_precision=train_precision)
    if max_new_tokens:
        config = replace(config, sampling=replace(config.sampling, max_new_tokens=max_new_tokens))
    as_pipeline("ibadr", config, inputs, out, engine)
    table, rejects = load(inputs, mapping, opts)
    report = ib.run(table, out, config, engine, mode, input_rejects=rejects, storage_options=opts.storage_options)
    rows_in, parts = ib.accounting(report)
    click.echo(conservation(rows_in, **parts))
    for h in report["iterations"]:
        click.echo(f"iteration {h['iteration']}: generated {h['generated']:,}, malformed {h['malformed']:,}, "
                   f"low confidence {h['low_confidence']:,}, accepted {h['accepted']:,} -> pool {h['pool_after']:,}")
    z = {k: "n/a" if v is None else f"{v:.2f}" for k, v in report["mean_top_z"].items()}
    click.echo(f"mean z* of the original's top features: {z['original']} (original) vs "
               f"{z['accepted']} (accepted pseudo samples)")
    used = report["iterations"][-1]["train_precision"] if report["iterations"] else None
    if used:
        click.echo(f"generator fine-tuned in {used['dtype']} ({used['requested']}: {used['reason']})")
    click.echo(f"report: {out}/report/report.html")


@main.command("run")
@click.argument("pipeline_file", metavar="PIPELINE.yaml")
@click.option("--out", help="Output root (default: the file's out:): OUT/00-input, OUT/01-<stage>, …")
@click.option("--engine", type=click.Choice(["local", "ray"]), help="Where stages run (default: the file's engine:).")
@click.option("--print-config", is_flag=True, help="Print the pipeline with every default filled in, and exit.")
def run_pipeline_command(pipeline_file, out, engine, print_config):
    """Run a pipeline file: its input, then each stage on the previous stage's output.

    Stages whose config and inputs are unchanged since the last run are skipped.
    """
    from refinery.pipeline.config import load_pipeline
    from refinery.pipeline.runner import run_pipeline

    spec = load_pipeline(pipeline_file)
    if print_config:
        if out:
            spec.out = out
        if engine:
            spec.engine = engine
        click.echo(spec.to_yaml(), nl=False)
        return
    result = run_pipeline(spec, out, engine, echo=click.echo)
    click.echo(f"report: {result.out}/pipeline/report.html")
    if not all(s.result.balanced for s in result.stages):
        raise click.ClickException("a stage's rows do not add up (see the MISMATCH line above)")


@main.command()
@click.option("--model", "model_name", default="HuggingFaceTB/SmolLM2-135M-Instruct", show_default=True,
              help="The model to serve: a name or folder.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=int, default=8000, show_default=True, help="Port to listen on (0: any free one).")
def serve(model_name, host, port):
    """Serve a local transformers generator behind an OpenAI-compatible API (/v1/chat/completions)."""
    from refinery.models.generate import TransformersGenerator
    from refinery.models.server import make_server

    generator = TransformersGenerator(model_name)
    generator._load()
    server = make_server(generator, model_name, host, port)
    click.echo(f"serving {model_name} on http://{host}:{server.server_address[1]}/v1", err=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def run() -> None:
    """The ``refinery`` console script: the CLI, then an exit that skips native teardown.

    Arrow's and DuckDB's thread pools can abort the process (``terminate called without an
    active exception``, SIGABRT) when C++ static destructors run during interpreter
    finalization, turning a finished run into a failed one. Python's own exit handlers (Ray's
    shutdown among them) still run; only the native teardown after them is skipped.
    """
    try:
        main()
        code = 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe has nothing left to flush
            pass
    os._exit(code)


if __name__ == "__main__":
    run()
