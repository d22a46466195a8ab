"""A folder is trusted within itself only: every path that a corpus manifest, refinery's marker or a run's record
names is a file inside the folder that holds that record. A record that names an absolute path, ``..``, another
store or bucket, or something that is not a path is refused in one line naming the record (``OutsideFolder``,
exit 2), before anything is read or removed by it: a corpus shared by someone else, or a bucket others may write
to, cannot steer what refinery reads or deletes with the user's credentials."""
from __future__ import annotations

MAX_PATH = 4096   # characters of one entry (a file name refinery writes is a few dozen)


class OutsideFolder(ValueError):
    """A record names a path outside its folder (or no path at all)."""


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


def inside(record: str, key: str, entries) -> list[str]:
    """``entries`` (the ``key`` of the JSON ``record``, a file's path or URL) where each is a relative path inside
    the record's folder (``posixpath.normpath`` leaves it as it is: no ``..``, ``.``, empty or absolute part, no
    scheme); otherwise ``OutsideFolder`` naming the record, the entry and what to do."""
    if not isinstance(entries, list):
        raise OutsideFolder(f"{record}: {key!r} is a {type(entries).__name__}, not a list of file names; refinery "
                            f"did not write it as it is: remove or rewrite {record}")
    for i, entry in enumerate(entries):
        why = _why_outside(entry)
        if why is not None:
            shown = repr(entry if not isinstance(entry, str) or len(entry) <= 80 else entry[:80] + "…")
            raise OutsideFolder(f"{record}: {key!r} entry {i + 1} {shown} is not a file inside the folder: {why}; "
                                f"refinery reads and removes only files inside the folder that names them: remove or "
                                f"rewrite {record}")
    return entries
