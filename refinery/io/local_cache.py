"""Local caches: what refinery derives once and reuses (dequantized model weights, an endpoint's answers by
prompt hash), each published whole, so that processes sharing a cache never read half of an entry."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable


def cache_text(path: str | Path, text: str) -> None:
    """Write ``text`` as the local file ``path`` whole (a temporary name, then a rename), making its folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".tmp-{os.getpid()}")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def cache_folder(target: str | Path, write: Callable[[str], None]) -> str:
    """Make the local folder ``target`` by ``write(a temporary folder)`` and one rename; where another process
    published it first, theirs is kept and the temporary removed. ``target``."""
    target = Path(target)
    temporary = target.with_name(target.name + f".tmp-{os.getpid()}")
    write(str(temporary))
    try:
        os.replace(temporary, target)
    except OSError:   # another process published it first
        shutil.rmtree(temporary, ignore_errors=True)
    return str(target)
