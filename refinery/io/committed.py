"""Where a run's folder is read: the run its commit named.

A stage's run publishes all its parts (kept/, rejected/, report/ …) in one commit (``publishing.RunOutput``). On a
local disk the folder itself is swapped in one rename, and holds its parts. An object store has no rename: a run
writes its parts under ``<out>/_runs/<run>/``, and its commit is one write of one small object, ``<out>/_SUCCESS``,
that names that run (``root``) and its parts, as Delta Lake's log and Iceberg's metadata pointer do. Refinery reads
``<out>/kept`` as ``<out>/_runs/<run>/kept`` (``committed_url``): a reader finds the run committed before or the
one committed after, whole, never a mix, and an unfinished run's files are named by no pointer.
"""
from __future__ import annotations

from refinery.io.contained import OutsideFolder, link_out
from refinery.io.location import get_fs, is_local, join
from refinery.io.ownership import OWNER_MARKER, holds_corpus, marked, run_record

RUNS = "_runs"         # on an object store: each run's parts under _runs/<run id>/
POINTER_LEVELS = 3     # how far above a path a pointer is looked for (OUT/stages/z_original/kept: 3)


def _within(folder: str, below: list[str], url: str, storage_options: dict | None) -> None:
    """Refuse ``url`` (``below`` the local ``folder``, its parts innermost first) where ``folder`` is one refinery
    published and the way down to ``url`` passes a symbolic link out of it (``kept`` linked to another corpus): what
    refinery reads as a part of its folder is inside that folder."""
    fs, path = get_fs(folder, storage_options)
    if not below or not is_local(fs) or not marked(fs, path):
        return
    target = link_out(path, "/".join(reversed(below)))
    if target is not None:
        raise OutsideFolder(f"{url}: lies in {folder}, a folder refinery wrote ({join(folder, OWNER_MARKER)}), "
                            f"through a symbolic link out of it (to {target}); refinery reads a folder it wrote only "
                            f"inside it: copy it without links (cp -rL), or read {target} itself")


def committed_url(url: str, storage_options: dict | None = None) -> str:
    """Where refinery reads ``url``: inside the committed run that a pointer (a ``_SUCCESS`` naming a run's folder,
    ``root``) of ``url`` or of a folder up to ``POINTER_LEVELS`` above it names, where that run holds the part ``url``
    is in; ``url`` itself otherwise (a local run's folder, any other corpus or file; on a store, a corpus with no
    pointer of its own, looked no further). A local ``url`` inside a folder refinery wrote is refused where it is
    reached through a symbolic link out of that folder (``_within``)."""
    if any(ch in url for ch in "*?["):
        return url
    here, below = url.rstrip("/"), []
    for _ in range(POINTER_LEVELS + 1):
        _within(here, below, url, storage_options)
        pointer = run_record(here, storage_options)
        if pointer is not None and pointer.root is None:
            pointer = None   # a run's folder committed where it lies (a local disk's): not a pointer
        if pointer is None and not below and not is_local(get_fs(here, storage_options)[0]) and \
                holds_corpus(here, storage_options):
            return url   # on a store, a corpus of its own, not a run's part: no pointer above it is looked for
            #              (locally the walk goes on up, for _within's check of the folders above)
        if pointer is not None:
            if below and below[-1] not in pointer.parts:
                return url   # beside the run's parts: a resumable task's files (_checkpoints/, runs/)
            return join(here, pointer.root, *reversed(below))
        parent, _, name = here.rpartition("/")
        if not name or not parent or parent.endswith(":/"):
            return url   # at a bucket or the root: nothing above
        here = parent
        below.append(name)
    return url
