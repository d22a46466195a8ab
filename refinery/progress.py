"""Progress of long work: a bar (count, rate, ETA) on a terminal, silent in a pipe or under ``--quiet``.

Every bar closed inside ``recording()`` records what it measured (what, how many, in how long), so a
pipeline's report can show where each stage spent its time, the same figures the terminal showed.

    for batch in progress(batches, desc="confidence: score", unit=" batch"):
        ...
    with progress(total=rows, desc="zfilter", unit=" rows") as bar:
        bar.update(n)
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager

from tqdm.auto import tqdm

QUIET_ENV = "REFINERY_QUIET"   # set by ``refinery --quiet``; inherited by Ray workers and subprocesses

_recordings: list[list[dict]] = []   # the phases of each open ``recording()``, innermost last


def quiet() -> bool:
    return os.environ.get(QUIET_ENV, "") not in ("", "0")


def set_quiet(value: bool = True) -> None:
    if value:
        os.environ[QUIET_ENV] = "1"
    else:
        os.environ.pop(QUIET_ENV, None)


class Progress(tqdm):
    """tqdm that is silent when not on a terminal (``disable=None``) or quiet, and logs itself when closed."""

    def __init__(self, *args, **kwargs):
        kwargs["disable"] = True if quiet() else kwargs.get("disable")
        kwargs.setdefault("dynamic_ncols", True)
        self._started = time.perf_counter()
        self._logged = False
        super().__init__(*args, **kwargs)
        if self.disable:     # a disabled tqdm counts nothing; keep counting for recording()
            self.n, self._desc = 0, kwargs.get("desc") or (args[1] if len(args) > 1 else "")
            self._unit = kwargs.get("unit", "it")

    def update(self, n=1):
        if self.disable:
            self.n += n
            return None
        return super().update(n)

    def __iter__(self):
        if not self.disable:
            yield from super().__iter__()
            return
        for item in self.iterable:
            yield item
            self.n += 1

    def close(self):
        if not self._logged and _recordings:
            self._logged = True
            desc = self._desc if self.disable else self.desc
            unit = self._unit if self.disable else self.unit
            _recordings[-1].append({"what": (desc or "").rstrip(": "), "count": int(self.n), "unit": unit.strip(),
                            "seconds": round(time.perf_counter() - self._started, 3)})
        super().close()


def progress(iterable=None, *, desc: str, unit: str = " it", total=None, **kwargs) -> Progress:
    """A progress bar over ``iterable`` (or updated by hand with ``total``)."""
    return Progress(iterable, desc=desc, unit=unit, total=total, **kwargs)


@contextmanager
def recording():
    """Collect the phases the bars closed inside log (``with recording() as phases: …``); nested calls see
    their own."""
    found: list[dict] = []
    _recordings.append(found)
    try:
        yield found
    finally:
        _recordings.remove(found)
