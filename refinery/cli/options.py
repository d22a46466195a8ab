"""Option groups shared by the verbs, and ``--print-config`` (a verb as a one-stage pipeline file)."""
from __future__ import annotations

import dataclasses
import functools
import glob
import os

import click

from refinery.io.corpus import OutputExists, input_fingerprints
from refinery.io.readers import ReadOptions
from refinery.io.schema import PRESETS, resolve_mapping
from refinery.io.storage import (
    CONNECT_TIMEOUT,
    IO_TIMEOUT,
    STORE_ATTEMPTS,
    parse_storage_options,
    read_marker,
    stamp_marker,
)


def input_options(f):
    """Options shared by every verb that reads a corpus."""
    options = [
        click.option("--preset", type=click.Choice(list(PRESETS)),
                     help="Column mapping of a known release (see README, 'Bringing your own data')."),
        click.option("--csv-multiline", is_flag=True,
                     help="Let a quoted CSV field span lines (one record); by default each such line is a reject."),
        click.option("--map", "mapping", metavar="text_a=COL,text_b=COL,label=COL,id=COL",
                     help="Explicit column mapping."),
        click.option("--labels", metavar="A,B,C", help="Declared label set (rows outside it are rejected)."),
        click.option("--on-bad-row", type=click.Choice(["quarantine", "fail"]), default="quarantine",
                     show_default=True, help="Quarantine bad rows in rejects, or fail naming file and line."),
        click.option("--max-chars", type=int, default=20_000, show_default=True,
                     help="Reject rows whose text is longer."),
        click.option("--batch-rows", type=int, default=65_536, show_default=True,
                     help="Rows read per batch (memory grows with it)."),
        click.option("--storage-option", "storage_options", multiple=True, metavar="KEY=VALUE",
                     help="fsspec storage option (e.g. endpoint_url=http://127.0.0.1:9000)."),
        click.option("--io-timeout", type=click.FloatRange(min=0, min_open=True), default=IO_TIMEOUT,
                     show_default=True, envvar="REFINERY_IO_TIMEOUT",
                     help=f"Seconds an object store may take to answer a read; each call is tried "
                          f"{STORE_ATTEMPTS} times, connections time out after {CONNECT_TIMEOUT:g} s."),
    ]
    for option in reversed(options):
        f = option(f)

    @functools.wraps(f)
    def wrapper(*args, preset, csv_multiline, mapping, labels, on_bad_row, max_chars, batch_rows, storage_options,
                io_timeout, **kwargs):
        del io_timeout   # set for every store client by the verb (RefineryCommand.invoke)
        try:
            kwargs["mapping"] = resolve_mapping(preset, mapping, labels)
            kwargs["opts"] = ReadOptions(batch_rows=batch_rows, max_chars=max_chars, on_bad_row=on_bad_row,
                                         storage_options=parse_storage_options(storage_options),
                                         csv_multiline=csv_multiline)
        except ValueError as e:
            raise click.UsageError(str(e)) from None
        # for --print-config's pipeline input: the preset by name (the Mapping has lost it), else the parsed map
        parsed = kwargs["mapping"]
        click.get_current_context().meta[_INPUT_ARGS] = {
            "preset": preset, "map": dict(parsed.columns) if mapping else None,
            "labels": list(parsed.label_set) if labels else None, "on_bad_row": on_bad_row, "max_chars": max_chars,
            "batch_rows": batch_rows, "csv_multiline": csv_multiline or None,
            "storage_options": kwargs["opts"].storage_options or None}
        return f(*args, **kwargs)

    return wrapper


_INPUT_ARGS = "refinery.input_args"
_PRINT_CONFIG = "refinery.print_config"


def print_config_option(f):
    """``--print-config``: print the verb as a one-stage pipeline file (same config keys) and exit."""
    def remember(ctx, _param, value):
        ctx.meta[_PRINT_CONFIG] = value

    return click.option("--print-config", is_flag=True, expose_value=False, callback=remember,
                        help="Print this command line as a pipeline file for `refinery run`, and exit.")(f)


def printing_config() -> bool:
    """Whether this command line was given ``--print-config``."""
    return bool(click.get_current_context().meta.get(_PRINT_CONFIG))


def as_pipeline(stage: str, config, inputs, out: str, engine: str = "local") -> None:
    """With ``--print-config``: print ``stage`` with ``config`` over ``inputs`` (paths, or {split: path})
    as a pipeline file and exit; otherwise return and let the verb run."""
    if not printing_config():
        return
    ctx = click.get_current_context()
    from refinery.pipeline.config import InputSpec, PipelineSpec, StageSpec
    from refinery.pipeline.stage import stage_class

    given = {k: v for k, v in ctx.meta[_INPUT_ARGS].items() if v is not None}
    if "storage_options" in given:  # credentials never printed: the file reads them from the environment
        given["storage_options"] = _secrets_as_variables(given["storage_options"])

    def absolute(path):  # the file may be saved anywhere: relative paths would move with it
        return path if "://" in path else os.path.abspath(path)

    where = {"splits": {s: [absolute(p) for p in ps] for s, ps in inputs.items()}} if isinstance(inputs, dict) \
        else {"paths": [absolute(p) for p in inputs]}
    refs = stage_class(stage).references   # fields naming corpora: on the command line always paths
    config = dataclasses.replace(config, **{f: tuple(absolute(p) for p in getattr(config, f)) for f in refs})
    spec = PipelineSpec(InputSpec(**where, **given), [StageSpec(stage, config)], absolute(out), engine)
    click.echo(spec.to_yaml(), nl=False)
    ctx.exit(0)


def _secrets_as_variables(options: dict) -> dict:
    """Storage options with credential values replaced by ``${REFINERY_<NAME>}`` references."""
    from refinery.io.storage import value_is_secret

    return {k: (f"${{REFINERY_{k.upper()}}}" if value_is_secret(k, v) else
                _secrets_as_variables(v) if isinstance(v, dict) else v) for k, v in options.items()}


def precision_option(f):
    from refinery.models.precision import PRECISIONS

    return click.option("--train-precision", type=click.Choice(PRECISIONS), default="auto", show_default=True,
                        help="Fine-tuning precision. auto: bf16 autocast where the device computes bf16 natively "
                             "(CUDA with bf16, CPUs with AVX512-BF16 or AMX), float32 elsewhere.")(f)


MODE_HELP = ("What to do when OUT already holds a finished result: replace it (only the files refinery wrote "
             "there), keep it when it was made from the same inputs and options, or stop.")


def task_model_options(f):
    """The task model of ``probe`` and ``compare``: an n-gram classifier or a fine-tuned encoder."""
    options = [
        click.option("--backend", type=click.Choice(["ngram", "transformer"]), default="ngram", show_default=True,
                     help="An n-gram classifier, or a fine-tuned transformer encoder (--model)."),
        click.option("--model", "model_name", default="sentence-transformers/all-MiniLM-L6-v2", show_default=True,
                     help="Encoder of the transformer backend (name or folder)."),
        click.option("--epochs", type=int, default=2, show_default=True, help="Transformer fine-tuning epochs."),
        click.option("--lr", type=float, default=5e-5, show_default=True, help="Transformer learning rate."),
        click.option("--batch", "batch", type=int, default=32, show_default=True, help="Transformer batch size."),
        click.option("--max-length", type=int, default=128, show_default=True,
                     help="Transformer input length, in tokens."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def engine_option(f):
    return click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
                        help="Run in this process, or on Ray (the cluster at RAY_ADDRESS, else a local one).")(f)


def prompt_batch_option(f):
    return click.option("--batch-size", type=int, default=16, show_default=True,
                        help="Prompts per generator call.")(f)


def prior_option(f):
    return click.option("--prior", type=click.Choice(["auto", "uniform", "empirical"]), default="auto",
                        show_default=True, help="p0 of z*: uniform (1/C), empirical (each label's share), or auto: "
                        "uniform when every label's share is within 1.5x of 1/C, else empirical.")(f)


def mode_option(f):
    return click.option("--mode", type=click.Choice(["overwrite", "skip", "error"]), default="overwrite",
                        show_default=True, help=MODE_HELP)(f)


_INPUT_PARAMS = ("inputs", "train", "evals", "evaluate_on")   # the verbs' parameters that name corpora


def finished_mode_option(f):
    """``--mode`` for verbs that publish one result folder: the command's fingerprint (its options and the
    size and checksum of every input) is stamped into OUT's marker when it finishes, and ``skip`` reuses an
    output whose stamp is the same."""
    f = mode_option(f)

    @functools.wraps(f)
    def wrapper(*args, mode, **kwargs):
        ctx = click.get_current_context()
        out, storage_options = kwargs["out"], parse_storage_options(ctx.params.get("storage_options"))
        stamp = command_fingerprint(ctx, storage_options)
        stored = read_marker(out, storage_options).get("command_fingerprint")
        if stored and mode == "error":
            raise OutputExists(f"{out} already holds a finished result (use --mode overwrite or skip)")
        if stored and mode == "skip":
            if stored != stamp:
                raise OutputExists(f"{out} holds a result made from other inputs or options; --mode skip reuses "
                                   "only an identical run (use --mode overwrite)")
            click.echo(f"{out}: skipped (same inputs and options)")
            return None
        result = f(*args, **kwargs)
        stamp_marker(out, storage_options, command_fingerprint=stamp)
        return result

    return wrapper


def command_fingerprint(ctx, storage_options: dict) -> str:
    """sha256 of the verb, its options (but --mode) and the fingerprints of the inputs it names."""
    import hashlib
    import json

    params = {k: v for k, v in ctx.params.items() if k not in ("mode", "debug")}
    inputs = []
    for name in _INPUT_PARAMS:
        for spec in _as_tuple(params.get(name)):
            path = spec.partition("=")[2] if "=" in spec.split("://")[0] else spec
            # NAME=PATH:PRESET, NAME=PATH@SPLIT: the path is what exists; one that does not is the verb's to report
            found = [p for p in (path, path.rsplit(":", 1)[0], path.rsplit("@", 1)[0])
                     if "://" in p or glob.glob(p)]
            inputs += found[:1]
    prints = input_fingerprints(inputs, storage_options)
    body = json.dumps([ctx.info_name, params, prints], sort_keys=True, default=str)
    return hashlib.sha256(body.encode()).hexdigest()


def _as_tuple(value) -> tuple:
    return () if value is None else (value,) if isinstance(value, str) else tuple(value)


def feature_options(f):
    """Feature families and tokenization shared by the audit and the methods built on it."""
    options = [
        click.option("--features", "families", default="unigram,bigram,null", show_default=True,
                     help="Feature families: unigram,bigram,length,ratio,overlap,null,hypo-only (or 'all')."),
        click.option("--stopwords/--keep-stopwords", default=False, help="Remove English stopwords."),
        click.option("--strip-punct/--keep-punct", default=False, help="Remove punctuation tokens."),
        click.option("--no-lowercase", is_flag=True, help="Keep case."),
        click.option("--field-names", metavar="NAME_A,NAME_B",
                     help="Names of text_a and text_b in feature keys (w@hypothesis)  [default: the preset's, "
                          "else premise,hypothesis]"),
    ]
    for option in reversed(options):
        f = option(f)

    @functools.wraps(f)
    def wrapper(*args, families, stopwords, strip_punct, no_lowercase, field_names, **kwargs):
        from refinery.core.features import FAMILIES, FeatureConfig, TokenizerOptions

        fams = FAMILIES if families == "all" else tuple(x.strip() for x in families.split(",") if x.strip())
        preset = PRESETS.get((kwargs.get("preset") or "").lower())
        names = tuple(field_names.split(",")) if field_names else preset.field_names if preset else None
        single = {"single_field_name": names[0]} if preset and not field_names and "text_b" not in preset.columns \
            else {}
        try:
            kwargs["feature_config"] = FeatureConfig(
                families=fams, tokenizer=TokenizerOptions(not no_lowercase, strip_punct, stopwords),
                **({"field_names": names} if names else {}), **single)
        except ValueError as e:
            raise click.UsageError(str(e)) from None
        return f(*args, **kwargs)

    return wrapper


def graph_options(f):
    """The sentence graph and the forest of the leakage verbs (Zhang et al. 2019)."""
    options = [
        click.option("--input", "inputs", multiple=True, required=True, metavar="SPLIT=PATH",
                     help="A split of the corpus (repeat: --input train=… --input test=…)."),
        click.option("--node-key", type=click.Choice(["auto", "id", "text"]), default="auto", show_default=True,
                     help="Sentence identity: given ids (node_a/node_b), normalized text, or ids where present."),
        click.option("--graph", "graph_scope", type=click.Choice(["transductive", "inductive"]),
                     default="transductive", show_default=True,
                     help="One graph over all splits (the paper's setting) or one per split."),
        click.option("--multigraph/--simple-graph", default=True, show_default=True,
                     help="Duplicate pairs as parallel edges (the reference code) or collapsed."),
        click.option("--trees", type=int, default=100, show_default=True, help="Random forest size."),
        click.option("--seed", type=int, default=0, show_default=True,
                     help="Seed of the random forest (and of the folds of weights)."),
    ]
    for option in reversed(options):
        f = option(f)

    @functools.wraps(f)
    def wrapper(*args, inputs, node_key, graph_scope, multigraph, trees, seed, **kwargs):
        from refinery.io.queries import split_specs
        from refinery.methods.leakage import ForestConfig, GraphConfig

        try:
            kwargs["inputs"] = split_specs(inputs)
        except ValueError as e:
            raise click.UsageError(str(e)) from None
        kwargs["graph"] = GraphConfig(node_key=node_key, transductive=graph_scope == "transductive",
                                      multigraph=multigraph)
        kwargs["forest"] = ForestConfig(n_estimators=trees, seed=seed)
        return f(*args, **kwargs)

    return wrapper


def generator_options(f):
    """Backend, model and sampling of the generator verbs."""
    options = [
        click.option("--backend", type=click.Choice(["transformers", "vllm", "openai"]), default="transformers",
                     show_default=True, help="Where texts are generated: in process, vLLM, or an OpenAI-compatible "
                                             "endpoint (--base-url)."),
        click.option("--model", "model_name", default="HuggingFaceTB/SmolLM2-135M-Instruct", show_default=True,
                     help="The generator: a model name or folder."),
        click.option("--base-url", help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 (openai)."),
        click.option("--api-key-env", default="OPENAI_API_KEY", show_default=True,
                     help="Environment variable holding the endpoint's key (openai)."),
        click.option("--no-chat", is_flag=True, help="Send raw prompts, not the chat template's user turn."),
        click.option("--temperature", type=float, default=0.7, show_default=True,
                     help="Softmax temperature (0: greedy)."),
        click.option("--top-p", type=float, default=0.9, show_default=True,
                     help="Nucleus sampling's probability mass."),
        click.option("--max-new-tokens", type=int, default=48, show_default=True,
                     help="Longest generation, in tokens."),
        click.option("--n", "num", type=int, default=1, show_default=True, help="Samples per prompt."),
        click.option("--seed", type=int, default=0, show_default=True, help="Seed of the sampling."),
        click.option("--tensor-parallel", type=int, default=1, show_default=True, help="vLLM tensor parallel size."),
        click.option("--max-num-seqs", type=int, default=64, show_default=True, help="vLLM batch limit."),
        click.option("--enforce-eager", is_flag=True,
                     help="vLLM: run eagerly, without graph capture or compilation (faster start, slower steps)."),
        click.option("--cache-dir", help="Prompt-hash cache of answers (openai)."),
    ]
    for option in reversed(options):
        f = option(f)

    @functools.wraps(f)
    def wrapper(*args, backend, model_name, base_url, api_key_env, no_chat, temperature, top_p, max_new_tokens, num,
                seed, tensor_parallel, max_num_seqs, enforce_eager, cache_dir, **kwargs):
        from refinery.models.generate import Backend, Sampling

        if backend == "openai" and not base_url:
            raise click.UsageError("--backend openai needs --base-url")
        kwargs.update(backend=Backend(backend, model_name, not no_chat, base_url, api_key_env, cache_dir,
                                      tensor_parallel, max_num_seqs, enforce_eager),
                      sampling=Sampling(temperature, top_p, max_new_tokens, num, seed))
        return f(*args, **kwargs)

    return wrapper
