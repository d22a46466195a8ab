"""A local folder replaced in one step: a run writes what it publishes as ``<out>`` into ``<out>.tmp-<pid>-<run>``
(``temporary_folder``), and ``swap_in`` exchanges the two folders in one rename, carrying the user's files and a
task's resumable work across; a temporary folder a dead run left is removed by the next run (``remove_stale_temps``).
``publishing.AtomicDir`` and ``publishing.RunOutput`` publish through it on a local disk.
"""
from __future__ import annotations

import ctypes
import glob
import os
import posixpath
import re
import shutil

from refinery.io.location import get_fs
from refinery.io.ownership import OWNER_MARKER, RUN_MARKER, marker_body, new_run_id, owned_files

_TEMP = re.compile(r"\.tmp-(\d+)-[0-9A-Za-z]+(-[0-9A-Za-z]+)*$")   # <out>.tmp-<pid>-<run>[-old]: a temporary folder


_in_use: set[str] = set()   # this process's temporary folders that a writer still writes or publishes


def temporary_folder(path: str, run_id: str) -> str:
    """``<path>.tmp-<pid>-<run>``: where a run writes what it publishes as ``path``, in use until ``released``."""
    tmp = f"{path}.tmp-{os.getpid()}-{run_id}"
    _in_use.add(tmp)
    return tmp


def released(tmp: str) -> None:
    _in_use.discard(tmp)


def remove_stale_temps(path: str) -> list[str]:
    """Remove ``<path>.tmp-<pid>-*`` folders left by runs that ended without removing them: their process is gone (a
    kill -9, a crash), or it is this one and no writer uses it (a run whose disk failed under it). One that holds
    the previous folder swapped out (``swap_in`` cut before it moved the user's files back) gives them back first."""
    removed = []
    for tmp in glob.glob(glob.escape(path) + ".tmp-*-*"):
        found = _TEMP.search(tmp)
        pid = int(found.group(1)) if found else None
        if pid is not None and (not _alive(pid) if pid != os.getpid() else tmp.removesuffix("-old") not in _in_use):
            if os.path.lexists(path) and os.path.lexists(os.path.join(tmp, OWNER_MARKER)):
                _move_entries(tmp, path, [rel for rel in _foreign_entries(tmp)
                                          if not os.path.lexists(os.path.join(path, rel))])
            shutil.rmtree(tmp, ignore_errors=True)
            removed.append(tmp)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # no such process (or no such pid at all)
        return False
    except PermissionError:
        return True
    return True


_LOCAL = get_fs("/")[0]


def _foreign_entries(root: str) -> list[str]:
    """Paths under local folder ``root`` (relative) that refinery did not write, taken whole: files, links and
    folders holding none of what a marker lists. A folder's marker (``.refinery.json``) lists the files refinery
    wrote there (and its ``_SUCCESS``, which versions before one commit per output did not list); a subfolder with a
    marker of its own (a part of a run: kept/, report/) answers for itself. A folder without a marker is foreign
    whole (every entry of ``root``, if ``root`` has none)."""
    top = owned_files(_LOCAL, root)
    if not top:
        return sorted(os.listdir(root))
    foreign: list[str] = []
    marked = [("", top)]
    while marked:
        base, owned = marked.pop()
        parents = set()
        for d in {posixpath.dirname(f) for f in owned}:
            while d and d not in parents:   # owned paths are relative (``contained.inside``)
                parents.add(d)
                d = posixpath.dirname(d)
        todo = [""]
        while todo:
            sub = todo.pop()
            for name in sorted(os.listdir(os.path.join(root, base, sub))):
                child = posixpath.join(sub, name) if sub else name
                full = posixpath.join(base, child) if base else child
                where = os.path.join(root, full)
                if child in owned or child in (OWNER_MARKER, RUN_MARKER) or _TEMP.search(name):
                    continue   # a run's _SUCCESS in a folder refinery marked: refinery's (earlier versions left it unlisted)
                folder = os.path.isdir(where) and not os.path.islink(where)
                inner = owned_files(_LOCAL, where) if folder else set()
                if inner:
                    marked.append((full, inner))
                elif child in parents and folder:
                    todo.append(child)
                else:
                    foreign.append(full)
    return sorted(foreign)


def _move_entries(source: str, target: str, entries) -> None:
    """Move ``entries`` (paths relative to local folder ``source``) to the same paths under ``target``. A folder made
    for them that was refinery's in ``source`` stays refinery's (a marker listing itself alone, ``unpublish``)."""
    for rel in entries:
        _parents_made(source, target, rel)
        os.rename(os.path.join(source, rel), os.path.join(target, rel))


def _parents_made(source: str, target: str, rel: str) -> None:
    """The folders above ``rel`` made under local folder ``target`` where missing; one that was refinery's in
    ``source`` stays refinery's (a marker listing itself alone, ``unpublish``)."""
    made, d = [], posixpath.dirname(rel)
    while d and not os.path.lexists(os.path.join(target, d)):
        made.append(d)
        d = posixpath.dirname(d)
    os.makedirs(os.path.dirname(os.path.join(target, rel)), exist_ok=True)
    for folder in made:
        if os.path.lexists(os.path.join(source, folder, OWNER_MARKER)):
            with open(os.path.join(target, folder, OWNER_MARKER), "w") as fh:
                fh.write(marker_body([OWNER_MARKER], run=new_run_id(), emptied=True))


def _linked(source: str, target: str, entries) -> bool:
    """Hard links of ``entries`` (paths relative to local folder ``source``: files, links, folders taken whole) at
    the same paths under ``target`` (``_link_tree``), with the folders they need (``_parents_made``); False, with
    none of them left in ``target``, where the disk cannot (no hard links there)."""
    try:
        for rel in entries:
            _parents_made(source, target, rel)
            _link_tree(os.path.join(source, rel), os.path.join(target, rel))
        return True
    except OSError:
        for rel in entries:
            where = os.path.join(target, rel)
            if os.path.isdir(where) and not os.path.islink(where):
                shutil.rmtree(where, ignore_errors=True)
            elif os.path.lexists(where):
                os.remove(where)
        return False


def _link_tree(source: str, target: str) -> None:
    """``source`` at ``target``: a file hard-linked (the same file, not a copy), a link copied as a link, a folder
    made and its entries linked in turn."""
    if os.path.islink(source):
        os.symlink(os.readlink(source), target)
    elif os.path.isdir(source):
        os.mkdir(target)
        for name in os.listdir(source):
            _link_tree(os.path.join(source, name), os.path.join(target, name))
    else:
        os.link(source, target, follow_symlinks=False)


def swap_in(tmp: str, path: str, carried=()) -> None:
    """Publish the local folder ``tmp`` as ``path`` in one step (a reader finds the previous folder whole, or this
    one). What the previous folder holds that refinery did not write (``_foreign_entries``) is hard-linked into the
    new one before the swap, so that a kill at any point leaves the user's files in ``path``; its ``carried``
    entries (a run's resumable work), and the user's where the disk cannot link them, are moved across after it;
    the rest of it is removed. A cut after the swap leaves the previous folder at ``tmp``, whose foreign files the
    next run gives back where ``path`` lacks them (``remove_stale_temps``)."""
    if not os.path.lexists(path):
        os.rename(tmp, path)
        return
    foreign = _foreign_entries(path)
    keep = sorted({*foreign, *(c for c in carried if os.path.lexists(os.path.join(path, c)))})
    clash = [f for f in keep if os.path.lexists(os.path.join(tmp, f))]
    if clash:
        raise FileExistsError(f"{path}/{clash[0]} was not written by refinery and is in the way of its output of "
                              "the same name; move it elsewhere and run again")
    if _linked(path, tmp, foreign):
        keep = [k for k in keep if k not in foreign]
    old = tmp
    if not _exchange(tmp, path):
        old = f"{tmp}-old"
        os.rename(path, old)
        os.rename(tmp, path)
    try:
        _move_entries(old, path, keep)
    except OSError as e:
        kept = f"{path}.kept-{os.path.basename(tmp).rsplit('-', 1)[-1]}"
        os.rename(old, kept)
        raise OSError(f"{path}: could not move back files refinery did not write ({e}); the previous folder, "
                      f"with them, is at {kept}") from None
    shutil.rmtree(old, ignore_errors=True)   # what is left there, refinery wrote (or links of the user's files)


def _exchange(a: str, b: str) -> bool:
    """Swap two local paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False where unsupported."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0
