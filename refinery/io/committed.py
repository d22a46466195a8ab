"""Where a run's folder is read: the run its commit named.

A stage's run publishes all its parts (kept/, rejected/, report/ …) in one commit (``publishing.RunOutput``). On a
local disk the folder itself is swapped in one rename, and holds its parts. An object store has no rename: a run
writes its parts under ``<out>/_runs/<run>/``, and its commit is one write of one small object, ``<out>/_SUCCESS``,
that names that run (``root``) and its parts, as Delta Lake's log and Iceberg's metadata pointer do. Refinery reads
``<out>/kept`` as ``<out>/_runs/<run>/kept`` (``committed_url``): a reader finds the run committed before or the
one committed after, whole, never a mix, and an unfinished run's files are named by no pointer.
"""
from __future__ import annotations

from refinery.io.contained import inside
from refinery.io.location import join
from refinery.io.ownership import RUN_MARKER, run_record

RUNS = "_runs"         # on an object store: each run's parts under _runs/<run id>/
POINTER_LEVELS = 3     # how far above a path a pointer is looked for (OUT/stages/z_original/kept: 3)


def run_pointer(url: str, storage_options: dict | None = None) -> dict | None:
    """The ``_SUCCESS`` of the folder ``url`` where it names a committed run's folder (``root``, checked inside
    ``url``; ``parts``), else None."""
    record = join(url.rstrip("/"), RUN_MARKER)
    body = run_record(url, storage_options)
    if body is None or "root" not in body:
        return None
    inside(record, "root", [body["root"]])
    inside(record, "parts", body.setdefault("parts", []))
    return body


def committed_url(url: str, storage_options: dict | None = None) -> str:
    """Where refinery reads ``url``: inside the committed run that a pointer (``run_pointer``) of ``url`` or of a
    folder up to ``POINTER_LEVELS`` above it names, where that run holds the part ``url`` is in; ``url`` itself
    otherwise (a local run's folder, any other corpus or file)."""
    if any(ch in url for ch in "*?["):
        return url
    here, below = url.rstrip("/"), []
    for _ in range(POINTER_LEVELS + 1):
        pointer = run_pointer(here, storage_options)
        if pointer is not None:
            if below and below[-1] not in pointer["parts"]:
                return url   # beside the run's parts: a resumable task's files (_checkpoints/, runs/)
            return join(here, pointer["root"], *reversed(below))
        parent, _, name = here.rpartition("/")
        if not name or not parent or parent.endswith(":/"):
            return url   # at a bucket or the root: nothing above
        here = parent
        below.append(name)
    return url
