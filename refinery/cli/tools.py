"""The verbs that are not stages: converting and inspecting corpora, SQL over them, synthetic corpora,
evaluating predictions and a local generator server."""
from __future__ import annotations

import json
import os

import click

from refinery.cli.base import RefineryCommand
from refinery.cli.options import input_options, mode_option
from refinery.io.layout import DEFAULT_SHARD_ROWS
from refinery.io.location import parse_storage_options
from refinery.messages import Refusal
from refinery.pipeline.stage import conservation


@click.group()
def tools():
    """The verbs below are added to ``refinery`` itself."""


@tools.command(cls=RefineryCommand)
@click.argument("inputs", nargs=-1, required=True)
@click.option("--out", required=True, help="Output folder or URL.")
@click.option("--format", "fmt", type=click.Choice(["parquet", "hf"]), default="parquet", show_default=True,
              help="parquet: a refinery corpus (Parquet shards; its rejects, manifest and card in .refinery/); hf: a "
                   "Hugging Face save_to_disk folder (a DatasetDict where the rows have splits), its rejects in "
                   "OUT/rejects.parquet.")
@click.option("--shard-rows", type=int, default=DEFAULT_SHARD_ROWS, show_default=True,
              help="Rows per Parquet shard (per Arrow file with --format hf).")
@mode_option
@input_options
def convert(inputs, out, fmt, shard_rows, mode, mapping, opts):
    """Read INPUTS (files, folders, globs, URLs) and write the canonical corpus to OUT."""
    from refinery.io import corpus_writer

    config = {"inputs": list(inputs), "mapping": mapping.__dict__ if mapping else None}
    if fmt == "hf":
        os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")   # the accounting line is the progress
        result = corpus_writer.convert_hf(inputs, out, mapping, opts, mode=mode, shard_rows=shard_rows, config=config)
        where = "a Hugging Face " + (f"DatasetDict ({', '.join(result.splits)})" if result.splits else "Dataset")
    else:
        result = corpus_writer.convert(inputs, out, mapping, opts, mode=mode, shard_rows=shard_rows, config=config)
        where = f"{len(result.manifest.files)} shard(s)"
    if result.skipped:
        click.echo(f"{out}: skipped (same inputs and config)")
    click.echo(f"{out}: {result.rows:,} rows, {result.rejected:,} rejected in {where}")
    click.echo(conservation(result.rows + result.rejected, out=result.rows, rejected=result.rejected))


@tools.command(cls=RefineryCommand)
@click.argument("paths", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--verify", is_flag=True, help="Check each refinery corpus's files against the sha256 its manifest "
                                             "records (a whole read; sizes are checked on every read).")
@input_options
def inspect(paths, as_json, verify, mapping, opts):
    """Rows, schema, label counts, rejects by reason and text lengths of PATHS."""
    from refinery.core.inspect import format_inspection
    from refinery.core.inspect import inspect as run_inspect
    from refinery.io.committed import committed_url
    from refinery.io.corpus import Corpus, corpus_of, is_corpus

    if verify:
        for path in paths:
            if is_corpus(path, opts.storage_options):
                checked = Corpus.open(path, opts.storage_options).verify()
                click.echo(f"{path}: {checked:,} file(s) match the sha256 its manifest records", err=True)

    info = run_inspect(paths, mapping, opts)
    read = {p: committed_url(corpus_of(p, opts.storage_options), opts.storage_options) for p in paths
            if is_corpus(p, opts.storage_options)}
    if any(url != p for p, url in read.items()):   # a run's part on an object store: its committed run's folder
        info = {"read": read, **info}
    click.echo(json.dumps(info, indent=2) if as_json else format_inspection(info))


@tools.command(cls=RefineryCommand)
@click.argument("query")
@click.argument("corpora", nargs=-1, required=True)
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json", "parquet"]), default="table",
              show_default=True, help="How the result is printed (csv: list columns as JSON text; parquet: written to "
                                      "--output or QUERY.parquet).")
@click.option("--output", "output", help="Write the result to this file instead of the terminal.")
@click.option("--limit", type=int, default=50, show_default=True, help="Rows shown in table format.")
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE", help="Bind a $NAME query parameter.")
@input_options
def sql(query, corpora, fmt, output, limit, params, mapping, opts):
    """Run a named query from sql/ (or a .sql FILE) over CORPORA ([SPLIT=]PATH ...), exposed as view ``corpus``."""
    from refinery.io import queries

    import duckdb

    from refinery.io.db import user_queries
    from refinery.io.scratch import temporary_folder

    bad = [p for p in params if "=" not in p]
    if bad:
        raise Refusal(f"--param {bad[0]!r} is not NAME=VALUE", code="invalid-setting")
    if not query.endswith(".sql") and query not in user_queries():
        raise Refusal(f"no query named {query!r}; named queries: {', '.join(user_queries())}, or a FILE.sql",
                      code="unknown-setting")
    con = queries.connect()
    with temporary_folder("sql-") as workdir:
        files = queries.corpus_files(corpora, mapping, opts, workdir)
        queries.register_corpora(con, files, opts.storage_options)
        try:
            result = queries.run(con, query, dict(p.split("=", 1) for p in params))
        except duckdb.Error as e:   # the query's own mistake (a column the corpus lacks): named, with DuckDB's words
            raise Refusal(f"{query}: {str(e).splitlines()[0]} (the view is `corpus`: columns "
                          f"{', '.join(c[0] for c in con.execute('DESCRIBE corpus').fetchall())})",
                          code="invalid-setting") from None
    if output or fmt == "parquet":
        target = output or f"{query.removesuffix('.sql')}.parquet"
        queries.save_result(result, target, fmt)
        click.echo(f"{result.num_rows:,} rows -> {target}")
    elif fmt == "json":
        click.echo(json.dumps(result.to_pylist(), default=str, indent=1))
    elif fmt == "csv":
        import pyarrow.csv as pcsv

        buf = __import__("io").BytesIO()
        pcsv.write_csv(queries.csv_ready(result), buf)
        click.echo(buf.getvalue().decode())
    else:
        click.echo(result.slice(0, limit).to_pandas().to_string(max_colwidth=60))
        click.echo(f"({result.num_rows:,} rows)")


@tools.command(cls=RefineryCommand)
@click.option("--out", required=True, help="Output corpus.")
@click.option("--rows", type=int, default=100_000, show_default=True, help="Rows to generate.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed: the same seed gives the same corpus.")
@click.option("--planted", default=None, metavar="WORD:LABEL:RATE,...",
              help="Spurious tokens to plant (default: six NLI-like shortcuts; none: no planted tokens).")
@click.option("--leak", type=float, default=0.1, show_default=True, help="Rate in other labels, relative.")
@click.option("--label-shares", default=None, metavar="S1,S2,S3",
              help="Each label's share of the rows, in the order entailment, neutral, contradiction (default: equal); "
                   "e.g. 0.56,0.29,0.15 for an imbalanced corpus like SICK.")
@click.option("--premise-pool", type=int, default=0, help="Draw premises from a pool with label-dependent degrees.")
@click.option("--hypothesis-pool", type=int, default=0,
              help="Draw hypotheses uniformly from a pool of this size (with --premise-pool: a fixed vocabulary of "
                   "n-grams, whatever the rows).")
@click.option("--signal-words", type=int, default=0, show_default=True,
              help="Genuine cue words per label (one per hypothesis): the signal a debiased model keeps.")
@click.option("--signal-rate", type=float, default=0.8, show_default=True,
              help="How often a row's cue word is of its own label.")
@click.option("--split", type=click.Choice(["train", "test", "anti-shortcut"]), default="train", show_default=True,
              help="test: other rows of the same distribution; anti-shortcut: the shortcuts reversed (planted words "
                   "and pooled premises of other labels), over the same words as --seed's train split.")
@click.option("--near-duplicates", type=float, default=0.0, show_default=True,
              help="Share of rows made an edited copy of another row (a word substituted, deleted or inserted, "
                   "reordered, or re-cased), each naming its source in planted_copy_of: dedup's ground truth.")
@click.option("--flip-share", type=float, default=0.0, show_default=True,
              help="Share of those near-duplicates given another label (label conflicts).")
@click.option("--contamination", type=float, default=0.0, show_default=True,
              help="Share of rows copied from the held-out rows of --split test of the same --seed (in planted_copy_of): "
                   "decontaminate's ground truth.")
@click.option("--shard-rows", type=int, default=1_000_000, show_default=True, help="Rows per Parquet shard.")
@mode_option
def synth(*, out, rows, seed, planted, leak, label_shares, premise_pool, hypothesis_pool, signal_words, signal_rate,
          split, near_duplicates, flip_share, contamination, shard_rows, mode):
    """Generate a planted-bias NLI-like corpus (deterministic from --seed)."""
    from refinery.io import synth as synth_mod

    kwargs = {"rows": rows, "seed": seed, "leak": leak, "premise_pool": premise_pool,
              "hypothesis_pool": hypothesis_pool, "signal_words": signal_words,
              "signal_rate": signal_rate, "split": split, "near_duplicates": near_duplicates,
              "flip_share": flip_share, "contamination": contamination}
    if planted:
        kwargs["planted"] = synth_mod.parse_planted(planted)
    if label_shares:
        kwargs["label_shares"] = synth_mod.parse_shares(label_shares)
    manifest = synth_mod.write(synth_mod.SynthSpec(**kwargs), out, shard_rows=shard_rows, mode=mode)
    click.echo(f"{out}: {manifest.rows:,} rows in {len(manifest.files)} shard(s)")


@tools.command(cls=RefineryCommand)
@click.option("--predictions", required=True, help="Parquet file or corpus with id, label and a prediction column.")
@click.option("--weights", "weights_path", help="A weights corpus (refinery weights) joined on id (and split).")
@click.option("--prediction-column", default="prediction", show_default=True,
              help="Column holding the predicted label.")
@click.option("--storage-option", "storage_options", multiple=True, metavar="KEY=VALUE",
              help="fsspec storage option (e.g. endpoint_url=http://127.0.0.1:9000).")
def evaluate(predictions, weights_path, prediction_column, storage_options):
    """Accuracy and leakage-neutral ("Debiased Eva") accuracy of predictions, overall and per split."""
    from refinery.io.corpus import read_any
    from refinery.methods.weights.evaluation import evaluate as evaluate_predictions

    so = parse_storage_options(storage_options)
    result = evaluate_predictions(read_any(predictions, so), read_any(weights_path, so) if weights_path else None,
                                  prediction_column)
    click.echo(json.dumps(result, indent=1))


@tools.command(cls=RefineryCommand)
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
