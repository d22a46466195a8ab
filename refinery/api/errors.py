"""Errors and warnings in the API's words: a message's settings named as the keywords a caller gives
(``preset='snli'``, ``allow_overlap=True``, ``{'train': data, 'test': data}``: ``refinery.messages`` in Python's
terms), and the Parquet that in-memory data was written to named as "the data"."""
from __future__ import annotations

import contextlib

from refinery.api.inputs import Source
from refinery.io.scratch import in_memory_names
from refinery.messages import Refusal, shown_as, text


def in_python_terms(message, source: Source | None = None) -> str:
    """A message (its text, or a ``Message``/``Refusal`` record) in the API's words."""
    message = text(message, "python")
    for path in source.all_paths if source else ():
        if source.kind != "path":
            shown = in_memory_names(path)
            message = message.replace(path, shown if shown != path else "the data")
    return message


@contextlib.contextmanager
def python_terms(source: Source | None):
    """Messages made inside in Python's terms (a report's too), and the errors raised inside (``ValueError``,
    ``OSError``) worded for the caller (``in_python_terms``); a Ctrl-C that DuckDB turned into an error of its
    own raised as the ``KeyboardInterrupt`` it was."""
    from refinery.termination import query_interrupted

    try:
        with shown_as("python"):
            yield
    except (ValueError, OSError) as e:
        e.args = (in_python_terms(e, source), *(() if isinstance(e, Refusal) else e.args[1:]))
        raise
    except Exception as e:
        if query_interrupted(e):
            raise KeyboardInterrupt from e
        raise
