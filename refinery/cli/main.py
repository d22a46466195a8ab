"""The ``refinery`` command line: a verb per stage (generated from its config), the verbs that are not stages,
and ``run`` for pipeline files."""
from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import sys

import click

from refinery.cli.base import PipelineCommand
from refinery.cli.group import RefineryGroup
from refinery.cli.config_options import config_options, given
from refinery.cli.options import memory_budget_option
from refinery.messages import TERMS_ENV
from refinery.pipeline.config import ReportConfig
from refinery.pipeline.cluster_address import RAY_TIMEOUT, RAY_TIMEOUT_ENV, check_ray_address
from refinery.pipeline.engine import ENGINES
from refinery.quiet import QUIET_ENV, quiet_other_bars, set_quiet
from refinery.termination import end_on_sigterm, finish_undisturbed


@click.group(cls=RefineryGroup, verbs_from=("refinery.cli.tools:tools",),
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--debug", is_flag=True, envvar="REFINERY_DEBUG", help="Show tracebacks instead of one-line errors.")
@click.option("--quiet", "-q", is_flag=True, envvar=QUIET_ENV,
              help="No progress bars (they are drawn only on a terminal anyway).")
@click.option("--ray-timeout", type=click.FloatRange(min=0, min_open=True), default=RAY_TIMEOUT, show_default=True,
              envvar=RAY_TIMEOUT_ENV, metavar="SECONDS",
              help="With --engine ray: seconds the cluster at RAY_ADDRESS may take to answer before the run fails.")
@click.version_option(package_name="refinery")
def main(debug, quiet, ray_timeout):
    """refinery: audit and debias labeled text corpora."""
    end_on_sigterm()
    os.environ.setdefault(TERMS_ENV, "cli")   # messages name options as this command line does (its Ray workers too)
    if quiet:
        set_quiet()
    quiet_other_bars()
    os.environ[RAY_TIMEOUT_ENV] = str(ray_timeout)   # read where Ray is joined (pipeline/engine.py)
    if not debug:  # fsspec's event loop logs a traceback for every request a dead endpoint cut short
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)


@main.command("run", cls=PipelineCommand)
@click.argument("pipeline_file", metavar="PIPELINE.yaml")
@click.option("--out", help="Output root (default: the file's out:): OUT/00-input, OUT/01-<stage>, …")
@click.option("--engine", type=click.Choice(ENGINES), help="Where stages run (default: the file's engine:).")
@memory_budget_option
@click.option("--print-config", is_flag=True, help="Print the pipeline with every default filled in, and exit.")
@config_options(ReportConfig, "report")
def run_pipeline_command(pipeline_file, out, engine, memory_budget, print_config, **report):
    """Run a pipeline file: its input, then each stage on the previous stage's output.

    Stages whose config and inputs are unchanged since the last run are skipped. OUT/pipeline/report.html
    shows what each stage did to the rows and to the input's top features (the report options below
    override the file's report: key).
    """
    from refinery.cli.options import printable_pipeline
    from refinery.pipeline.config import from_dict, load_pipeline, to_dict
    from refinery.pipeline.runner import run_pipeline

    os.environ[TERMS_ENV] = "pipeline"   # its settings are the file's keys: a remedy names max_copies: 2
    spec = load_pipeline(pipeline_file)
    if memory_budget:
        spec = dataclasses.replace(spec, memory_budget=memory_budget)   # checked as the file's key is
    spec.report = from_dict(ReportConfig, {**to_dict(spec.report), **given(ReportConfig, report, "report")},
                            "report options")
    if print_config:
        if out:
            spec.out = out
        if engine:
            spec.engine = engine
        click.echo(printable_pipeline(spec), nl=False)   # --out as given here, absolute; credentials as variables
        return
    if (engine or spec.engine) == "ray":   # a cluster that does not answer fails before any work
        check_ray_address()
    result = run_pipeline(spec, out, engine, echo=click.echo)
    click.echo(f"report: {result.out}/pipeline/report.html")
    if not all(s.result.balanced for s in result.stages):
        raise click.ClickException("a stage's rows do not add up (see the MISMATCH line above)")




def run() -> None:
    """The ``refinery`` console script: the CLI, then an exit that skips native teardown.

    Arrow's and DuckDB's thread pools can abort the process (``terminate called without an
    active exception``, SIGABRT) when C++ static destructors run during interpreter
    finalization, turning a finished run into a failed one. Python's own exit handlers still run (after Ray is
    left, ``finish_undisturbed``); only the native teardown after them is skipped.
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
    finish_undisturbed()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe has nothing left to flush
            pass
    os._exit(code)


if __name__ == "__main__":
    run()
