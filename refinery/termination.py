"""SIGTERM ends a command as Ctrl-C does: a scheduler's or ``kill``'s stop raises ``Terminated`` (a
``KeyboardInterrupt``) in the main thread, so the same clean-up runs (unpublished folders removed, Ray tasks
cancelled, what was published named) and the command exits 143 in one line instead of dying mid-write or
printing Ray's stack dump. Ray's driver replaces the SIGTERM handler when it connects; ``sigterm_kept``
puts refinery's back."""
from __future__ import annotations

import contextlib
import signal
import sys
import threading


class Terminated(KeyboardInterrupt):
    """The process was sent SIGTERM."""


_received: list[int] = []   # SIGTERM, once it came (Ray re-raises it as a plain KeyboardInterrupt, DuckDB as its own)


def _raise_terminated(signum, frame):
    _received.append(signum)
    raise Terminated()


def was_terminated(e: BaseException) -> bool:
    """Whether ``e`` ends a run that SIGTERM stopped: ``Terminated``, or any error after SIGTERM came (Ray re-raises
    the interrupt as a plain ``KeyboardInterrupt``, DuckDB as "Query interrupted" or inside an error of its own)."""
    return isinstance(e, Terminated) or bool(_received)


def query_interrupted(e: BaseException) -> bool:
    """Whether ``e`` is DuckDB's answer to a Ctrl-C that came while it ran a query: its ``InterruptException``, or
    the ``RuntimeError("Query interrupted")`` its Python client raises for one."""
    duckdb = sys.modules.get("duckdb")
    return duckdb is not None and (isinstance(e, duckdb.InterruptException) or
                                   (type(e) is RuntimeError and str(e).startswith("Query interrupted")))


def end_on_sigterm() -> None:
    """Make SIGTERM raise ``Terminated`` (the command line's processes; a library caller's handling is its own)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_terminated)


@contextlib.contextmanager
def sigterm_kept():
    """Put refinery's SIGTERM handler back after the work inside replaced it (``ray.init`` installs its own, which
    exits with code 15: a SIGTERM meanwhile is raised as ``Terminated``)."""
    ours = threading.current_thread() is threading.main_thread() \
        and signal.getsignal(signal.SIGTERM) is _raise_terminated
    try:
        yield
    except SystemExit as e:
        if ours and e.code == signal.SIGTERM:
            _received.append(signal.SIGTERM)
            raise Terminated() from None
        raise
    finally:
        if ours:
            signal.signal(signal.SIGTERM, _raise_terminated)


def finish_undisturbed() -> None:
    """Ignore Ctrl-C and SIGTERM from here on: the command has ended, and what is left is its exit handlers (Ray's
    shutdown among them), which an interrupt would cut short with a traceback and a Ray left running."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
