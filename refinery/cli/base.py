"""The command classes every verb shares: how options reach the store clients, how ``--out`` is claimed,
and how errors, Ctrl-C and a closed pipe end a command."""
from __future__ import annotations

import glob
import os
import re
import sys

import click

from refinery.io.redaction import redact_text

# refinery's modules that hold the work are imported where a command runs (a verb's --help imports none of them)


def user_errors() -> tuple:
    """What a user can fix (a bad row, a missing file, an existing output, a wrong option value, storage that
    refuses): exit 2 with one line; anything else is refinery's fault: exit 1, still one line."""
    from refinery.io.corpus import EmptyInput
    from refinery.io.readers import BadRowError

    duckdb = sys.modules.get("duckdb")   # its disk's failures (a file it reads, its spill folder): not loaded, none
    return (BadRowError, FileNotFoundError, FileExistsError, PermissionError, EmptyInput, ValueError, KeyError,
            OSError, *((duckdb.IOException,) if duckdb else ()))


def _one_line(e: BaseException) -> str:
    from refinery.messages import text as worded

    text = worded(e.args[0]) if isinstance(e, KeyError) and e.args else worded(e)   # in the command's terms
    text = " ".join(text.split()) or type(e).__name__
    return redact_text(text if len(text) <= 800 else text[:500] + " … " + text[-300:])   # the remedy is at the end


_SENTENCE_END = re.compile(r"(?<!\bal)(?<!\be\.g)(?<!\bi\.e)\.(?=\s|$)")


INPUT_PARAMS = ("inputs", "named", "train", "cfg__evals", "cfg__evaluate", "original", "predictions")  # corpora verbs read


def input_paths(params: dict) -> list[str]:
    """The paths a verb's parameters name as inputs (``PATH``, ``NAME=PATH``, ``NAME=PATH:PRESET``,
    ``NAME=PATH@SPLIT``): each as it exists (a URL, or a local path or glob that matches), in order."""
    paths = []
    for name in INPUT_PARAMS:
        value = params.get(name)
        for spec in () if value is None else (value,) if isinstance(value, str) else value:
            path = spec.partition("=")[2] if "=" in spec.split("://")[0] else spec
            found = [p for p in (path, path.rsplit(":", 1)[0], path.rsplit("@", 1)[0]) if "://" in p or glob.glob(p)]
            paths += found[:1]
    return paths


class RefineryCommand(click.Command):
    """A verb: its ``--io-timeout`` holds for every store call, ``--engine ray`` needs a cluster that answers
    (``check_ray_address``), its ``--out`` is checked before any work
    (refinery writes only where it may: ``claim_output``, never into, onto or around an input:
    ``check_out_apart``), and its summary in ``refinery --help`` is its docstring's first sentence, whole.
    ``claims_out`` False: the command claims its ``--out`` itself (``refinery run``: with the storage options of
    its pipeline file, which belong to the pipeline, not to its ``out:``)."""

    claims_out = True

    def invoke(self, ctx):
        from refinery.io.store_answers import within_a_run

        with within_a_run():   # a store is asked each lookup once in a command (``store_answers``)
            return self._invoke(ctx)

    def _invoke(self, ctx):
        from refinery.io.ownership import check_out_apart, claim_output
        from refinery.pipeline.cluster_address import check_ray_address

        if ctx.params.get("io_timeout"):   # read by every store client, Ray workers' too
            os.environ["REFINERY_IO_TIMEOUT"] = str(ctx.params["io_timeout"])
        if ctx.params.get("engine") == "ray":   # a cluster that does not answer fails before any work
            check_ray_address()
        if ctx.params.get("out") and self.claims_out:
            options = storage_options_of(ctx)
            if not ctx.params.get("in_place"):   # with it, the runner checks: it knows the part replaced
                check_out_apart(ctx.params["out"], input_paths(ctx.params), storage_options=options)
            claim_output(ctx.params["out"], options)
        return super().invoke(ctx)

    def get_short_help_str(self, limit: int = 45) -> str:
        return self.short_help or first_sentence(self.help or "")


class PipelineCommand(RefineryCommand):
    """``refinery run``: the runner claims ``--out`` (``run_pipeline``), with the pipeline file's storage options."""

    claims_out = False


def first_sentence(doc: str) -> str:
    """A verb's summary in ``refinery --help``: the first sentence of its help, whole."""
    first = " ".join(doc.replace("``", "").split("\n\n")[0].split())
    end = _SENTENCE_END.search(first)
    return first[: end.end()] if end else first


def ended(e: BaseException) -> int:
    """Say on stderr, in one line, how the command that raised ``e`` ended, and give its exit code: 130 for
    Ctrl-C and 143 for SIGTERM (naming what the run had already published), 0 for a reader that closed the pipe
    (nothing said), 2 for what the user can fix (``user_errors``; a store's failure as the line that names its URL
    and operation, whatever library carried it: ``store_failure_in``), 1 for refinery's own fault. ``jobs/run.py``
    ends the same."""
    from refinery.io.store_failures import store_failure_in
    from refinery.termination import was_interrupted, was_terminated

    # whatever the interrupt surfaced as: a library may wrap it in an error of its own
    if was_terminated(e):
        click.echo(f"terminated (SIGTERM): {_published_before()}", err=True)
        return 143
    if was_interrupted(e):
        click.echo(f"interrupted: {_published_before()}", err=True)
        return 130
    if isinstance(e, BrokenPipeError):
        _quiet_stdout()
        return 0
    e = store_failure_in(e) or e
    code = error_code(e)
    click.echo(f"error: {_one_line(e)}" + (f" [{code}]" if code else ""), err=True)
    return 2 if isinstance(e, user_errors()) else 1


def usage_error(message: str, code: str) -> click.UsageError:
    """A mistake in how a command line is spelled (click shows it under the verb's usage, exit 2), of the kind
    ``code`` (``messages.CODES``)."""
    error = click.UsageError(message)
    error.code = code
    return error


_USAGE_CODES = ((click.NoSuchOption, "unknown-setting"), (click.MissingParameter, "missing-setting"),
                (click.BadParameter, "invalid-setting"),
                (getattr(click.exceptions, "NoSuchCommand", ()), "unknown-setting"))   # a verb (click ≥ 8.2)


def coded(e: click.UsageError) -> click.UsageError:
    """``e`` shown with its code at the end, as every refusal's line ends (``usage_error``'s, the refusal it was
    made from, or the kind of click's error: an option that does not exist ``unknown-setting``, …)."""
    code = getattr(e, "code", None) or getattr(e.__cause__, "code", None) or \
        next((c for kind, c in _USAGE_CODES if isinstance(e, kind)), "invalid-setting")
    worded = e.format_message
    e.format_message = lambda: f"{worded()} [{code}]"
    return e


def error_code(e: BaseException) -> str | None:
    """What kind of refusal ``e`` is (``messages.CODES``, explained in docs/errors.md): its ``code`` (a ``Refusal``'s
    and every error class of refinery's that a user can fix), a missing file ``bad-input``, a disk's or store's
    other failure ``storage``, any other error a user can fix ``refused``; None for refinery's own faults."""
    if not isinstance(e, user_errors()):
        return None
    code = getattr(e, "code", None)
    if isinstance(code, str):
        return code
    if isinstance(e, (FileNotFoundError, IsADirectoryError, NotADirectoryError)):   # a path that is not what it
        return "bad-input"                                                           # should be
    return "storage" if isinstance(e, OSError) else "refused"


SHOWN_PUBLISHED = 8   # folders an interrupt names, then how many more


def _published_before() -> str:
    """What an interrupted run had published and left, named under their common parent: each folder is
    whole (``AtomicDir``); nothing else was published. Where the store that holds them fails to say (it may be why
    the run was interrupted), that is said instead: the interrupt still ends the run in one line."""
    publishing = sys.modules.get("refinery.io.publishing")   # not loaded: nothing was published (an interrupt that
    try:                                                      # cut an import short must not import again)
        folders = publishing.published_folders() if publishing else []
    except Exception as e:  # noqa: BLE001 — a store that fails now must not turn the interrupt into its error
        return f"what it had published could not be looked up ({_one_line(e)}); each output is whole, old or new"
    if not folders:
        return "nothing was published; a finished output in --out is as it was"
    parent = _common_parent(folders)
    names = [f[len(parent):].lstrip("/") if parent else f for f in folders]
    more = f" and {len(names) - SHOWN_PUBLISHED} more" if len(names) > SHOWN_PUBLISHED else ""
    where = f" in {parent}" if parent else ""
    return f"published before the interrupt{where}: {', '.join(names[:SHOWN_PUBLISHED])}{more}; nothing else was"


def _common_parent(paths: list[str]) -> str:
    """The longest folder (``/``-separated, URLs too) above every one of ``paths``."""
    split = [p.split("/") for p in paths]
    common = []
    for parts in zip(*split):
        if len(set(parts)) > 1:
            break
        common.append(parts[0])
    return "/".join(common[:min(map(len, split)) - 1])


def _quiet_stdout() -> None:
    """Point stdout at /dev/null: the reader is gone, and the interpreter's last flush must not fail."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())




def storage_options_of(ctx: click.Context) -> dict:
    """The storage options a command line gave (the generated input options parse them already)."""
    if "in__storage_options" in ctx.params:
        return ctx.params["in__storage_options"] or {}
    from refinery.io.location import parse_storage_options

    return parse_storage_options(ctx.params.get("storage_options"))
