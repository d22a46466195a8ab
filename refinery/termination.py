"""SIGINT and SIGTERM end a command as they should whatever is in flight: Ctrl-C exits 130, SIGTERM (a scheduler's
or ``kill``'s stop) 143, each in one line, after the same clean-up (unpublished folders removed, Ray tasks
cancelled, what was published named). SIGTERM raises ``Terminated`` (a ``KeyboardInterrupt``) in the main thread
instead of killing the process mid-write or printing Ray's stack dump. Each signal is recorded as it comes, so that
an interrupt a library turned into an error of its own (DuckDB's "Query interrupted", Ray's, a store's failure
raised by the clean-up it started) still ends as the interrupt it was. Ray's driver replaces the SIGTERM handler
when it connects; ``sigterm_kept`` puts refinery's back. A signal that comes while numba compiles a kernel is
delivered once the compiler is done (``_deferred``); one whose exception Python had to drop, raised where an exception
cannot escape (a ``__del__``, a weakref or gc callback: ``sys.unraisablehook``), is delivered again (``_redelivered``).
"""
from __future__ import annotations

import _thread
import contextlib
import os
import signal
import sys
import threading


class Terminated(KeyboardInterrupt):
    """The process was sent SIGTERM."""


_received: list[int] = []   # the signals that came (Ray re-raises them as a plain KeyboardInterrupt, DuckDB as its own)
# code an exception must not unwind: numba compiling a kernel (half-registered machine code crashes the kernel's next
# call) and llvmlite's ctypes callbacks (an exception raised in one is printed and dropped: the run would go on), and
# a finalizer (``__del__``: dropped too)
_UNINTERRUPTIBLE = ("numba", "llvmlite")   # their packages' modules
_FINALIZER = "__del__"
RETRY_SECONDS = 0.05   # how soon a signal that came inside such code is delivered again
_retrying: set[int] = set()


def _uninterruptible(frame) -> bool:
    """Whether the main thread, stopped at ``frame``, is inside a module of ``_UNINTERRUPTIBLE`` or a ``__del__`` (or
    called by one)."""
    while frame is not None:
        if frame.f_globals.get("__name__", "").partition(".")[0] in _UNINTERRUPTIBLE or \
                frame.f_code.co_name == _FINALIZER:
            return True
        frame = frame.f_back
    return False


def _deferred(signum: int, frame) -> bool:
    """Whether the signal came inside code it must not unwind (``_uninterruptible``): then it is delivered again
    ``RETRY_SECONDS`` later (``_thread.interrupt_main`` runs this handler anew), until it lands outside."""
    if not _uninterruptible(frame):
        return False
    _deliver_again(signum)
    return True


def _deliver_again(signum: int) -> None:
    """Deliver ``signum`` to the main thread anew ``RETRY_SECONDS`` from now (once, however often asked meanwhile)."""
    if signum not in _retrying:
        _retrying.add(signum)

        def again():
            _retrying.discard(signum)
            _thread.interrupt_main(signum)

        timer = threading.Timer(RETRY_SECONDS, again)
        timer.daemon = True
        timer.start()


def _redelivered(unraisable) -> None:
    """``sys.unraisablehook`` while refinery's handlers are set: the ``KeyboardInterrupt`` (or ``Terminated``) a
    handler raised inside a finalizer, which Python prints and drops (the run would go on as if no signal came), is
    delivered again (``_deliver_again``), to be raised where it ends the run; any other unraisable exception goes to
    the hook that was there before."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _received:
        _deliver_again(signal.SIGTERM if isinstance(unraisable.exc_value, Terminated) else signal.SIGINT)
        return
    _unraisable_before(unraisable)


_unraisable_before = sys.unraisablehook


def _keep_exceptions_of_finalizers() -> None:
    """Install ``_redelivered`` (once)."""
    global _unraisable_before
    if sys.unraisablehook is not _redelivered:
        _unraisable_before, sys.unraisablehook = sys.unraisablehook, _redelivered


def _raise_terminated(signum, frame):
    if _deferred(signum, frame):
        return
    _received.append(signum)
    raise Terminated()


def _raise_interrupted(signum, frame):
    if _deferred(signum, frame):
        return
    _received.append(signum)
    raise KeyboardInterrupt()


def was_terminated(e: BaseException) -> bool:
    """Whether ``e`` ends a run that SIGTERM stopped: ``Terminated``, or any error after SIGTERM came (Ray re-raises
    the interrupt as a plain ``KeyboardInterrupt``, DuckDB as "Query interrupted" or inside an error of its own)."""
    return isinstance(e, Terminated) or signal.SIGTERM in _received


def was_interrupted(e: BaseException) -> bool:
    """Whether ``e`` ends a run that Ctrl-C stopped: a ``KeyboardInterrupt`` or DuckDB's answer to one
    (``query_interrupted``), itself or behind the error it became (a clean-up's store error raised while the
    interrupt was handled), or any error after SIGINT came (``end_on_interrupt``)."""
    links, seen = [e], set()
    while links:
        link = links.pop()
        if link is None or id(link) in seen:
            continue
        if isinstance(link, KeyboardInterrupt) or query_interrupted(link):
            return True
        seen.add(id(link))
        links += [link.__cause__, link.__context__]
    return signal.SIGINT in _received


def query_interrupted(e: BaseException) -> bool:
    """Whether ``e`` is DuckDB's answer to a Ctrl-C that came while it ran a query: its ``InterruptException``, or
    the ``RuntimeError("Query interrupted")`` its Python client raises for one."""
    duckdb = sys.modules.get("duckdb")
    return duckdb is not None and (isinstance(e, duckdb.InterruptException) or
                                   (type(e) is RuntimeError and str(e).startswith("Query interrupted")))


def end_on_interrupt() -> None:
    """Make Ctrl-C raise ``KeyboardInterrupt``, recorded (the command line's process, once its command runs)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _raise_interrupted)
        _keep_exceptions_of_finalizers()


def end_on_sigterm() -> None:
    """Make SIGTERM raise ``Terminated`` (the command line's processes; a library caller's handling is its own)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_terminated)
        _keep_exceptions_of_finalizers()


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
    """Ignore Ctrl-C and SIGTERM from here on: the command has ended, and what is left is leaving Ray
    (``_ray_left_off_the_console``) and its exit handlers, which an interrupt would cut short with a traceback and a
    Ray left running."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _ray_left_off_the_console()


def _ray_left_off_the_console() -> None:
    """Leave the Ray this process started or joined with the native log lines its leaving prints (``Failed to push
    error to driver`` for a task that failed as the run stopped) kept off the console: the command's last line stays
    its last. They stay in the session's ``python-core-driver-*.log``."""
    if "ray" not in sys.modules or not sys.modules["ray"].is_initialized():
        return
    sys.stderr.flush()
    console, nowhere = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(nowhere, 2)
        sys.modules["ray"].shutdown()
    finally:
        os.dup2(console, 2)
        os.close(console)
        os.close(nowhere)
