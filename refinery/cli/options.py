"""Options shared by the verbs: the input's, the engine, ``--mode``, and a verb's pipeline as a file to save
(``--print-config``)."""
from __future__ import annotations

import dataclasses
import functools
import os

import click

from refinery.io.location import CONNECT_TIMEOUT, STORE_ATTEMPTS
from refinery.io.store_failures import IO_TIMEOUT


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
            raise click.UsageError(str(e)) from e   # shown with the refusal's code (``base.coded``)
        return f(*args, **kwargs)

    return config_options(InputSpec, "in")(wrapper)


io_timeout_option = click.option(
    "--io-timeout", type=click.FloatRange(min=0, min_open=True), default=IO_TIMEOUT, show_default=True,
    envvar="REFINERY_IO_TIMEOUT", help=f"Seconds an object store may take to answer a call, its retries (up to "
                                       f"{STORE_ATTEMPTS} tries) included; connections time out after "
                                       f"{CONNECT_TIMEOUT:g} s.")


def memory_budget_option(f):
    from refinery.io.memory import DEFAULT_SHARE

    return click.option(
        "--memory-budget", metavar="SIZE",
        help=f"What each process of the run may hold: bytes (8G, 512M) or a fraction of memory (0.5); default "
             f"{DEFAULT_SHARE:g} of this machine's (or its container's) memory. The audits' exact counts spill to "
             f"disk past it, dedup holds fewer LSH bands at once, DuckDB takes at most half of it; each step's "
             f"peak is printed beside it.")(f)


def printable_pipeline(spec, references: tuple = ()) -> str:
    """``spec`` as a pipeline file to save anywhere: paths absolute (the stage's ``references`` fields and the
    settings that name a file or folder too), credentials as ``${REFINERY_<NAME>}`` variables (``to_yaml``)."""
    from refinery.pipeline.config import anchor_input, anchor_path, anchor_references, anchor_settings

    here = os.getcwd()
    stages = [dataclasses.replace(s, config=anchor_references(anchor_settings(s.config, here), references, {"input"},
                                                              here)) for s in spec.stages]
    return dataclasses.replace(spec, input=anchor_input(spec.input, here), stages=stages,
                               out=anchor_path(spec.out, here) if spec.out else None).to_yaml()



def engine_option(f):
    from refinery.pipeline.engine import ENGINES

    return click.option("--engine", type=click.Choice(ENGINES), default="local", show_default=True,
                        help="Run in this process, or on Ray (the cluster at RAY_ADDRESS, else a local one).")(f)


def mode_option(f):
    from refinery.io.modes import MODE_HELP, MODES

    return click.option("--mode", type=click.Choice(MODES), default="overwrite",
                        show_default=True, help=MODE_HELP)(f)
