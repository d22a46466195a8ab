"""Split names of inputs: ``[SPLIT=]PATH`` arguments, and the split a file or folder names by its stem."""
from __future__ import annotations

import posixpath

from refinery.io.inputs import COMPRESSIONS, FORMATS


def parse_split_spec(spec: str) -> tuple[str | None, str]:
    """``SPLIT=PATH`` → (SPLIT, PATH); a plain path (which may hold ``=`` after a ``/``) → (None, PATH)."""
    name, sep, path = spec.partition("=")
    if not sep or "://" in name or "/" in name:
        return None, spec
    return name, path


def split_name(url: str) -> str:
    """The file or folder name without its compression and format extensions (``dev.jsonl.gz`` → ``dev``)."""
    base = posixpath.basename(url.rstrip("/"))
    for suffix in COMPRESSIONS:
        base = base.removesuffix(suffix)
    stem, ext = posixpath.splitext(base)
    return stem if ext.lower() in FORMATS else base


def split_specs(specs) -> dict[str, list[str]]:
    """``[SPLIT=]PATH`` arguments into {split: [paths]}; the split defaults to the file's stem, and a
    split given more than once (SICK train + trial) is made of all its files."""
    out: dict[str, list[str]] = {}
    for spec in specs:
        name, path = parse_split_spec(spec)
        out.setdefault(name or split_name(path), []).append(path)
    return out
