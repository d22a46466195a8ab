"""Errors and warnings in the API's words: a message of the CLI's (``--preset snli``, ``--allow-overlap``,
``--input train=PATH --input test=PATH``) as the keywords a caller gives (``preset='snli'``,
``allow_overlap=True``, ``{'train': data, 'test': data}``), and the Parquet that in-memory data was written to
named as "the data". Which options are flags comes from the configs in play, so a new stage's flags read
right without a list here."""
from __future__ import annotations

import contextlib
import re

from refinery.api.inputs import Source
from refinery.api.keywords import INPUT_KEYS, config_keywords
from refinery.io.scratch import in_memory_names

_SPLITS_HINT = re.compile(r"--input train=PATH --input test=PATH")
_OPTION = re.compile(r"--([a-z][a-z0-9-]*)(?: (?!(?:or|and|to|for|with|of|in|is|on|at|the|a|an)\b)([\w.:/-]+))?")
_CLI_ONLY = re.compile(r"; (?:or )?--in-place [^;]*")   # the API has no in-place run


def flag_keywords(configs: tuple = ()) -> dict[str, str]:
    """{a flag of ``configs``' or the input's options: the keyword that sets it} (``--allow-overlap`` →
    ``allow_overlap=True``, ``--no-lowercase`` → ``lowercase=False``)."""
    out = {}
    for keywords in (INPUT_KEYS, *map(config_keywords, configs)):
        for name, leaf in keywords.items():
            if leaf.hint is bool:
                on, *off = leaf.names
                out[on] = f"{name}=True"
                out.update({option: f"{name}=False" for option in off})
    return out


def in_python_terms(message: str, source: Source | None = None, configs: tuple = ()) -> str:
    """A message of the CLI's in the API's words (``configs``: the config classes whose options it may name)."""
    for path in source.all_paths if source else ():
        if source.kind != "path":
            shown = in_memory_names(path)
            message = message.replace(path, shown if shown != path else "the data")
    message = _CLI_ONLY.sub("", message)
    message = _SPLITS_HINT.sub("{'train': data, 'test': data} (a DatasetDict, or a split column)", message)
    flags = flag_keywords(configs)

    def keyword(m):
        option, value = f"--{m.group(1)}", m.group(2)
        if option in flags:
            return flags[option] + (f" {value}" if value is not None else "")
        name = m.group(1).replace("-", "_")
        if value is None:
            return f"{name}=…"
        return f"{name}={value}" if re.fullmatch(r"[\d.]+", value) else f"{name}={value!r}"
    return _OPTION.sub(keyword, message)


@contextlib.contextmanager
def python_terms(source: Source | None, configs: tuple = ()):
    """Errors raised inside (``ValueError``, ``OSError``) worded for the caller (``in_python_terms``); a Ctrl-C
    that DuckDB turned into an error of its own raised as the ``KeyboardInterrupt`` it was."""
    from refinery.termination import query_interrupted

    try:
        yield
    except (ValueError, OSError) as e:
        e.args = (in_python_terms(str(e), source, configs), *e.args[1:])
        raise
    except Exception as e:
        if query_interrupted(e):
            raise KeyboardInterrupt from e
        raise
