"""Keyword arguments as configs: a call's keywords are the stage config's keys, named as in a pipeline file (a
nested config's fields also by the flat names of their CLI options: ``band_min=``), and the input's
(``preset=``, ``map=``, …); ``pipeline.config.from_dict`` builds and validates them as it does for the CLI and
a pipeline file."""
from __future__ import annotations

import dataclasses
import difflib
import typing

from refinery.pipeline.config import InputSpec
from refinery.pipeline.fields import Leaf, leaves

# where and how a stage's function runs, besides its config
CALL_KEYS = ("out", "engine", "mode", "split", "memory_budget")


def config_keywords(cls: type) -> dict[str, Leaf]:
    """A config's keyword arguments: top-level fields by their pipeline keys, nested ones by the flat names of
    their CLI options."""
    out: dict[str, Leaf] = {}
    for leaf in leaves(cls):
        name = leaf.path[0] if len(leaf.path) == 1 else leaf.keyword
        if name in out:
            raise TypeError(f"{cls.__name__}: keyword {name} names both {'.'.join(out[name].path)} and "
                            f"{'.'.join(leaf.path)}")
        out[name] = leaf
    return out


INPUT_KEYS = config_keywords(InputSpec)   # preset=, map=, labels=, on_bad_row=, …


def _nested_fields(cls: type) -> set[str]:
    return {name for name, hint in typing.get_type_hints(cls).items() if dataclasses.is_dataclass(hint)}


def config_dict(cls: type, kwargs: dict, where: str) -> dict:
    """The nested dict a pipeline file holds for config ``cls``, from keyword arguments; an unknown keyword is a
    ``TypeError`` that names the nearest known one."""
    keywords, nested = config_keywords(cls), _nested_fields(cls)
    fields = {f.name for f in dataclasses.fields(cls) if f.init}
    out: dict = {}
    for key, value in kwargs.items():
        if key in nested and isinstance(value, dict):
            out.setdefault(key, {}).update(value)
        elif key in keywords:
            node = out
            for part in keywords[key].path[:-1]:
                node = node.setdefault(part, {})
            node[keywords[key].path[-1]] = value
        elif key in fields:
            out[key] = value
        else:
            known = sorted(set(keywords) | fields | set(INPUT_KEYS) | set(CALL_KEYS))
            close = difflib.get_close_matches(key, known, n=1)
            raise TypeError(f"{where}() got an unknown keyword {key!r}"
                            + (f"; did you mean {close[0]!r}?" if close else "") + f" (keywords: {', '.join(known)})")
    return out


def input_keywords(kwargs: dict, where: str | None = None) -> tuple[dict, dict]:
    """(the input's keywords, the rest); with ``where`` (a function that takes only the input's), a keyword
    of neither is a ``TypeError``."""
    given = {k: v for k, v in kwargs.items() if k in INPUT_KEYS}
    for key, value in list(given.items()):
        parse = INPUT_KEYS[key].field.metadata.get("parse")
        if parse and isinstance(value, str):
            given[key] = parse(value)
    rest = {k: v for k, v in kwargs.items() if k not in INPUT_KEYS}
    if where and rest:
        config_dict(InputSpec, rest, where)   # names the unknown keyword
    return given, rest
