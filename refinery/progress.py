"""Progress of long work: a bar (count, rate, ETA) on a terminal, silent in a pipe or under ``--quiet``.

Every bar closed inside ``recording()`` records what it measured (what, how many, in how long), so a
pipeline's report can show where each stage spent its time, the same figures the terminal showed. Inside
``relayed(send)`` (a stage running as a Ray task) every bar also sends its state, at most twice a second,
to ``send``, and ``Mirror`` draws those states as bars of the process that shows them (the driver).

    for batch in progress(batches, desc="confidence: score", unit=" batch"):
        ...
    with progress(total=rows, desc="zfilter", unit=" rows") as bar:
        bar.update(n)
"""
from __future__ import annotations

import itertools
import sys
import time
from contextlib import contextmanager

from tqdm.auto import tqdm

from refinery.quiet import quiet


RELAY_SECONDS = 0.5             # a relayed bar's state is sent at most this often (and when it closes)
STATUS_SECONDS = 30.0           # in a pipe (no bar), a bar's status line is printed at most this often

_recordings: list[list[dict]] = []   # the phases of each open ``recording()``, innermost last
_relays: list = []                   # the ``send`` of each open ``relayed()``, innermost last
_bar_numbers = itertools.count()     # a bar's key in relayed states (``id`` is reused once a bar is freed)


class Progress(tqdm):
    """tqdm that is silent when not on a terminal (``disable=None``) or quiet, and logs itself when closed."""

    def __init__(self, *args, **kwargs):
        kwargs["disable"] = True if quiet() else kwargs.get("disable")
        kwargs.setdefault("dynamic_ncols", True)
        self._started = time.perf_counter()
        self._logged = False
        self._relayed, self._number = 0.0, next(_bar_numbers)
        super().__init__(*args, **kwargs)
        if self.disable:     # a disabled tqdm counts nothing; keep counting for recording() and relayed()
            self.n, self._desc = 0, kwargs.get("desc") or (args[1] if len(args) > 1 else "")
            self._unit = kwargs.get("unit", "it")
        self._said = self._started   # when its last status line was printed (in a pipe)
        self._relay()

    def update(self, n=1):
        if self.disable:
            self.n += n
            self._relay()
            self._status()
            return None
        shown = super().update(n)
        self._relay()
        return shown

    def __iter__(self):
        if not self.disable:
            for item in super().__iter__():
                yield item
                self._relay()
            return
        for item in self.iterable:
            yield item
            self.n += 1
            self._relay()
            self._status()

    def _status(self) -> None:
        """In a pipe (a job's log, ``| tee``), where no bar is drawn: one line of what it is doing and how far,
        every ``STATUS_SECONDS``, so a long stage shows life without flooding the log. Not under ``--quiet``, and
        not in a Ray task, whose bars its driver shows (``relayed``)."""
        now = time.perf_counter()
        if now - self._said < STATUS_SECONDS or _relays or quiet():
            return
        self._said = now
        state = self._state()
        share = f" ({state['count'] / state['total']:.0%})" if state["total"] else ""
        of = f" of {state['total']:,}" if state["total"] else ""
        tqdm.write(f"{state['what']}: {state['count']:,}{of} {state['unit']}{share}, {now - self._started:,.0f} s",
                   file=sys.stderr)

    def _state(self, closed: bool = False) -> dict:
        return {"what": ((self._desc if self.disable else self.desc) or "").rstrip(": "), "count": int(self.n),
                "unit": (self._unit if self.disable else self.unit).strip(), "total": self.total,
                "seconds": round(time.perf_counter() - self._started, 3), "closed": closed}

    def _relay(self, closed: bool = False) -> None:
        if _relays and (closed or time.perf_counter() - self._relayed >= RELAY_SECONDS):
            self._relayed = time.perf_counter()
            _relays[-1](self._number, self._state(closed))

    def close(self):
        if "_logged" not in vars(self):   # an interrupt cut __init__ short: tqdm's __del__ closes a bar never set up
            return
        if not self._logged:
            self._logged = True
            if _recordings:
                state = self._state()
                _recordings[-1].append({k: state[k] for k in ("what", "count", "unit", "seconds")})
            self._relay(closed=True)
        super().close()


class RowsDone:
    """Called with the rows of a batch done so far (a float, rising): moves ``bar`` by the whole rows gained."""

    def __init__(self, bar: Progress):
        self.bar, self.shown = bar, 0

    def __call__(self, rows: float) -> None:
        gained = int(rows) - self.shown
        if gained > 0:
            self.bar.update(gained)
            self.shown += gained


def announce(text: str) -> None:
    """A line about the work as it starts (a resume from checkpoints) on stderr, above any bar: on a terminal,
    in a pipe and under ``--quiet`` alike, for it is no bar."""
    tqdm.write(text, file=sys.stderr)


def progress(iterable=None, *, desc: str, unit: str = " it", total=None, **kwargs) -> Progress:
    """A progress bar over ``iterable`` (or updated by hand with ``total``)."""
    return Progress(iterable, desc=desc, unit=unit, total=total, **kwargs)


@contextmanager
def relayed(send):
    """Send every bar's state (``send(key, state)``, throttled) while open: a Ray task's bars, for its driver."""
    _relays.append(send)
    try:
        yield
    finally:
        _relays.remove(send)


class Mirror:
    """The bars of another process drawn here from the states it relayed (``update`` with each new snapshot
    ``{key: state}``); bars closed here record their phases with the other process's counts and seconds."""

    def __init__(self):
        self.bars: dict = {}

    def update(self, states: dict) -> None:
        for key, state in states.items():
            bar = self.bars.get(key)
            if bar is False:     # closed here already; later snapshots still hold it
                continue
            if bar is None:   # rates over the other process's whole time (its updates arrive in bursts)
                bar = self.bars[key] = progress(total=state["total"], desc=state["what"], unit=" " + state["unit"],
                                                smoothing=0)
            bar._started = time.perf_counter() - state["seconds"]
            if not bar.disable:
                bar.start_t = bar._time() - state["seconds"]
            bar.update(state["count"] - bar.n)
            if state["closed"]:
                bar.close()
                self.bars[key] = False

    def close(self) -> None:
        for bar in self.bars.values():
            if bar is not False:
                bar.close()


def reset_peak_rss() -> None:
    """Start a new high-water mark of this process's resident memory (Linux: ``clear_refs`` 5 resets VmHWM)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def peak_rss() -> int | None:
    """This process's peak resident memory in bytes since the last reset (VmHWM), where the OS tells."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


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
