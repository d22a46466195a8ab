"""A folder is trusted within itself only: every path that a corpus manifest, refinery's marker or a run's record
names is a file inside the folder that holds that record, named once. A record that names an absolute path, ``..``,
another store or bucket, something that is not a path, or one entry twice, is refused in one line naming the record
(``OutsideFolder``, exit 2), before anything is read or removed by it; on a local disk so is an entry reached through
a symbolic link that leads out of the folder (``links_inside``; a copy made with ``cp -L`` holds no links and reads).
A corpus shared by someone else, or a bucket others may write to, cannot steer what refinery reads or deletes with
the user's credentials, nor make it read a file twice."""
from __future__ import annotations

import os
import posixpath
import re

from refinery.messages import Refusal

MAX_PATH = 4096   # characters of one entry (a file name refinery writes is a few dozen)
# what no entry may hold, looked for in all entries at once, each between newlines (``_suspect``): NUL, '\', another
# store, a leading '/', an empty, '.' or '..' part; and a drive ('C:'), where a ':' is there at all
_SUSPECT = ("\x00", "\\", "://", "\n/", "//", "/\n", "\n\n", "/./", "/.\n", "\n./", "\n.\n", "/../", "/..\n", "\n../",
            "\n..\n")
_DRIVE = re.compile(r"(?m)^.:")


class BadRecord(Refusal):
    """A record of a folder (its manifest, marker, ``_SUCCESS``) that refinery did not write as it is: a field of
    the wrong type, an entry twice, a path outside the folder, JSON cut short. One line naming the record and the
    field; exit 2."""

    code = "bad-input"


class OutsideFolder(BadRecord):
    """A record names a path outside its folder (or no path at all, or one path twice)."""


def _why_outside(entry) -> str | None:
    """Why ``entry`` is not a relative path inside its folder, or None where it is one."""
    if not isinstance(entry, str):
        return f"a {type(entry).__name__}, not a path"
    if not entry or len(entry) > MAX_PATH or "\x00" in entry:
        return "not a file name"
    if "://" in entry or entry.startswith(("/", "\\")) or (len(entry) > 1 and entry[1] == ":"):
        return "an absolute path or another store"
    parts = entry.split("/")
    if ".." in parts:
        return "'..' leaves the folder"
    if "\\" in entry or any(part in ("", ".") for part in parts):
        return "not a plain relative path"
    return None


def _suspect(entries: list[str]) -> bool:
    """Whether some of ``entries`` (texts) may not be a relative path inside the folder (``_why_outside`` decides
    which): one search of them all joined by newlines per thing no entry may hold, a million entries in a fraction
    of a second. An entry holding a newline may be suspected wrongly, never let through wrongly."""
    joined = "\n" + "\n".join(entries) + "\n"
    return any(bad in joined for bad in _SUSPECT) or (":" in joined and _DRIVE.search(joined) is not None) or \
        max(map(len, entries), default=0) > MAX_PATH


def _shown(entry) -> str:
    return repr(entry if not isinstance(entry, str) or len(entry) <= 80 else entry[:80] + "…")


def inside(record: str, key: str, entries) -> list[str]:
    """``entries`` (the ``key`` of the JSON ``record``, a file's path or URL) where each is a relative path inside
    the record's folder (``posixpath.normpath`` leaves it as it is: no ``..``, ``.``, empty or absolute part, no
    scheme) and none is named twice; otherwise ``OutsideFolder`` naming the record, the entry and what to do. A
    million entries take a fraction of a second: they are looked at one by one only where ``_suspect`` finds one."""
    if not isinstance(entries, list):
        raise OutsideFolder(f"{record}: {key!r} is a {type(entries).__name__}, not a list of file names; refinery "
                            f"did not write it as it is: remove or rewrite {record}")
    if not set(map(type, entries)) <= {str} or _suspect(entries):
        for i, entry in enumerate(entries):
            why = _why_outside(entry)
            if why is not None:
                raise OutsideFolder(f"{record}: {key!r} entry {i + 1} {_shown(entry)} is not a file inside the "
                                    f"folder: {why}; refinery reads and removes only files inside the folder that "
                                    f"names them: remove or rewrite {record}")
    if len(set(entries)) != len(entries):
        seen: set[str] = set()
        for i, entry in enumerate(entries):
            if entry in seen:
                raise OutsideFolder(f"{record}: {key!r} entry {i + 1} {_shown(entry)} is named twice; refinery "
                                    f"wrote each file once, and would read it twice: remove or rewrite {record}")
            seen.add(entry)
    return entries


def _leaves(real: str, base: str) -> bool:
    return real != base and not real.startswith(base.rstrip(os.sep) + os.sep)


def _links_under(base: str) -> dict[str, str]:
    """{path relative to the local folder ``base``: where it leads} of every symbolic link under ``base`` that
    leads out of it (the links themselves are not followed): one walk of the folder."""
    found, todo = {}, [""]
    while todo:
        rel = todo.pop()
        try:
            listing = os.scandir(os.path.join(base, rel))
        except OSError:   # a folder that went away or cannot be listed: nothing under it is read from here
            continue
        with listing:
            for entry in listing:
                child = posixpath.join(rel, entry.name) if rel else entry.name
                if entry.is_symlink():
                    real = os.path.realpath(entry.path)
                    if _leaves(real, base):
                        found[child] = real
                elif entry.is_dir(follow_symlinks=False):
                    todo.append(child)
    return found


def link_out(folder: str, entry: str) -> str | None:
    """Where the relative path ``entry`` in local ``folder`` leads through a symbolic link out of ``folder`` (the
    target), or None where it stays inside: a few looks, one per part of ``entry``."""
    base, parts = os.path.realpath(folder), entry.split("/")
    for n in range(1, len(parts) + 1):
        path = os.path.join(folder, *parts[:n])
        if os.path.islink(path):
            real = os.path.realpath(path)
            if _leaves(real, base):
                return real
    return None


def links_inside(record: str, folder: str, fields: dict) -> None:
    """Refuse (``OutsideFolder``) an entry of ``fields`` ({key of ``record``: its entries, checked by ``inside``})
    that is, or lies under, a symbolic link out of the local ``folder``: the file it would read is another folder's.
    One walk of the folder; the entries are looked at only where a link leads out."""
    leading_out = _links_under(os.path.realpath(folder))
    if not leading_out:
        return
    for key, entries in fields.items():
        for i, entry in enumerate(entries):
            part = entry
            while part:
                if part in leading_out:
                    raise OutsideFolder(f"{record}: {key!r} entry {i + 1} {_shown(entry)} is a symbolic link out of "
                                        f"the folder (to {leading_out[part]}); refinery reads and removes only files "
                                        f"inside the folder that names them: copy the folder without links (cp -rL) "
                                        f"or remove the link")
                part = posixpath.dirname(part)
