"""The memory a run may take (``--memory-budget``, a pipeline file's ``memory_budget:``, the ``memory_budget=`` of
every Python call): one budget per process, read by everything that holds or spills data within it (the audits'
exact counts, dedup's signatures and bands, DuckDB's ``memory_limit``), and handing freed memory back.

A budget given for a run is set by ``budget_of_run`` in ``REFINERY_MEMORY_BUDGET`` (bytes), which the processes the
run starts inherit (Ray's workers too: ``pipeline.engine.ray_init``); without one each process takes
``DEFAULT_SHARE`` of the memory it may use: its machine's, or its container's (cgroup) limit where that is lower."""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

from refinery.messages import Refusal

MEMORY_BUDGET_ENV = "REFINERY_MEMORY_BUDGET"   # the run's budget in bytes, inherited by the processes it starts
DEFAULT_SHARE = 0.5   # of the memory this process may use, without a budget given
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max",                     # cgroup v2
                  "/sys/fs/cgroup/memory/memory.limit_in_bytes")   # cgroup v1


def usable_memory() -> int:
    """Bytes this process may use: the machine's memory, or its cgroup's limit where one is set lower (a container's
    or a Kubernetes pod's: the machine's memory is not its to take)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in _CGROUP_LIMITS:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < total:   # v2 says "max" without a limit; v1 a huge number
            return int(text)
    return total


def parse_budget(value: str | float | int | None) -> int:
    """Bytes of a budget given as bytes (``8G``, ``8GiB``, ``512M``, ``1000000``) or as a fraction of the usable
    memory (``0.5``); None or ``none``: ``DEFAULT_SHARE`` of it. A bare number over 1 and under 1 MiB is neither."""
    usable = usable_memory()
    if value is None or str(value).strip().lower() == "none":
        return int(DEFAULT_SHARE * usable)
    text = str(value).strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(text[-1:], 1)
    try:
        amount = float(text[:-1] if scale > 1 else text)
    except ValueError:
        raise Refusal(f"memory budget {value!r}: give bytes (8G, 512M) or a fraction of memory (0.5)",
                      code="invalid-setting") from None
    if amount <= 0:
        raise Refusal(f"memory budget {value!r} must be positive", code="invalid-setting")
    if scale == 1 and 1 < amount < 1 << 20:
        raise Refusal(f"memory budget {value!r}: a fraction of memory is at most 1, and bytes want a unit: give "
                      f"{value}G for {value} GiB, or 0.5 for half of this machine's memory", code="invalid-setting")
    return int(amount * usable) if scale == 1 and amount <= 1 else int(amount * scale)


def memory_budget() -> int:
    """This process's budget in bytes: the run's (``REFINERY_MEMORY_BUDGET``), else ``DEFAULT_SHARE`` of the usable
    memory."""
    given = os.environ.get(MEMORY_BUDGET_ENV, "").strip()
    if not given:
        return parse_budget(None)
    try:
        return int(given) if given.isdigit() else parse_budget(given)
    except ValueError as e:
        raise Refusal(f"{MEMORY_BUDGET_ENV}={given}: {e}", code="invalid-setting") from None


@contextmanager
def budget_of_run(value: str | float | int | None) -> Iterator[int]:
    """The budget ``value`` (``parse_budget``) set for this process and those it starts while the block runs, then
    the one before set back (a notebook's next call has its own); None leaves the budget as it is (one set around
    this run, else each process's own default share). Yields this process's budget in bytes."""
    if value is None:
        yield memory_budget()
        return
    before = os.environ.get(MEMORY_BUDGET_ENV)
    os.environ[MEMORY_BUDGET_ENV] = str(parse_budget(value))
    try:
        yield memory_budget()
    finally:
        if before is None:
            os.environ.pop(MEMORY_BUDGET_ENV, None)
        else:
            os.environ[MEMORY_BUDGET_ENV] = before


def return_freed_memory() -> None:
    """Hand the memory freed by a large build back to the system: Arrow's pool keeps freed pages, and glibc's
    heap keeps the arrays under its mmap threshold (up to 32 MiB, raised as large arrays come and go), which a
    process's peak then carries through the rest of a stage."""
    import ctypes
    import ctypes.util

    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
