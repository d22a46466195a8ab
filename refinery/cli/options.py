"""Options shared by the verbs: the input's, the engine, ``--mode``, the task model's, and a verb's pipeline
as a file to save (``--print-config``)."""
from __future__ import annotations

import dataclasses
import functools
import glob
import os

import click

from refinery.io.corpus import OutputExists, input_fingerprints
from refinery.io.storage import (
    CONNECT_TIMEOUT,
    IO_TIMEOUT,
    STORE_ATTEMPTS,
    parse_storage_options,
    read_marker,
    stamp_marker,
)
from refinery.pipeline.engine import ENGINES


def input_options(f):
    """The input options (``InputSpec``'s fields) of a verb that reads corpora, given to it as ``mapping`` and
    ``opts``."""
    from refinery.cli.config_options import config_options, given
    from refinery.pipeline.config import InputSpec, from_dict

    f = io_timeout_option(f)

    @functools.wraps(f)
    def wrapper(*args, io_timeout, **kwargs):
        del io_timeout   # set for every store client by the verb (RefineryCommand.invoke)
        try:
            spec = from_dict(InputSpec, given(InputSpec, kwargs, "in"), where="input")
            kwargs["mapping"], kwargs["opts"] = spec.mapping(), spec.read_options()
        except ValueError as e:
            raise click.UsageError(str(e)) from None
        return f(*args, **kwargs)

    return config_options(InputSpec, "in")(wrapper)


io_timeout_option = click.option(
    "--io-timeout", type=click.FloatRange(min=0, min_open=True), default=IO_TIMEOUT, show_default=True,
    envvar="REFINERY_IO_TIMEOUT", help=f"Seconds an object store may take to answer a read; each call is tried "
                                       f"{STORE_ATTEMPTS} times, connections time out after {CONNECT_TIMEOUT:g} s.")


def printable_pipeline(spec, references: tuple = ()) -> str:
    """``spec`` as a pipeline file to save anywhere: paths absolute (the stage's ``references`` fields too),
    credentials as ``${REFINERY_<NAME>}`` variables."""
    def absolute(path):
        return path if "://" in path else os.path.abspath(path)

    spec_in = spec.input
    changes = {"splits": {s: [absolute(p) for p in ([ps] if isinstance(ps, str) else ps)]
                          for s, ps in spec_in.splits.items()},
               "paths": [absolute(p) for p in spec_in.paths],
               "storage_options": _secrets_as_variables(spec_in.storage_options)}
    stages = [dataclasses.replace(s, config=dataclasses.replace(s.config, **{
        f: tuple(absolute(p) for p in getattr(s.config, f)) if isinstance(getattr(s.config, f), tuple)
        else absolute(getattr(s.config, f)) for f in references if getattr(s.config, f)})) for s in spec.stages]
    return dataclasses.replace(spec, input=dataclasses.replace(spec_in, **changes), stages=stages,
                               out=absolute(spec.out) if spec.out else None).to_yaml()


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
    return click.option("--engine", type=click.Choice(ENGINES), default="local", show_default=True,
                        help="Run in this process, or on Ray (the cluster at RAY_ADDRESS, else a local one).")(f)


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


