"""``--mode``: what a run does when its output already holds a finished result, decided in one place.

``overwrite`` makes it again (replacing only what refinery wrote there); ``skip`` keeps it when it was made from the
same inputs and options and refuses it when not; ``error`` refuses any; ``rerun`` (a pipeline's steps) keeps it when
unchanged and makes it again when not. Every verb, ``rf.`` call, pipeline step and corpus writer asks
``keeps_finished``.
"""
from __future__ import annotations

from typing import Callable

from refinery.io.corpus import OutputExists
from refinery.messages import Message, Refusal, Setting

MODES = ("overwrite", "skip", "error")   # a user's choices; ``rerun`` is a pipeline's own
MODE_HELP = ("What to do when OUT already holds a finished result: replace it (only the files refinery wrote "
             "there), keep it when it was made from the same inputs and options, or stop.")


def check_mode(mode: str) -> str:
    """``mode`` where it is one of ``MODES``; else a ``Refusal`` (invalid-setting) naming them."""
    if mode not in MODES:
        raise Refusal(f"mode must be one of {', '.join(MODES)}, got {mode!r}", code="invalid-setting")
    return mode


def keeps_finished(folder: str, mode: str, finished, differs: Callable[[object], str | None]) -> bool:
    """Whether ``mode`` keeps the finished result in ``folder`` (``finished``: what it records of its run, None
    where there is none) rather than make it again; ``differs(finished)`` says how that run differs from this one
    (None: it does not). ``skip`` refuses a different one with that reason, ``error`` refuses any."""
    if not finished or mode == "overwrite":
        return False
    if mode == "error":
        raise OutputExists(Message(f"{folder} already holds a finished result (use ", Setting("mode", "overwrite"),
                                   " or ", Setting("mode", "skip"), ")"))
    why = differs(finished)
    if mode == "skip" and why:
        raise OutputExists(Message(f"{folder} ", why, "; ", Setting("mode", "skip"),
                                   " reuses only an identical run (use ", Setting("mode", "overwrite"), ")"))
    return why is None
