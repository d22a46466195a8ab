"""Configs as data: stage config dataclasses ↔ plain dicts (YAML/JSON), and pipeline files.

A pipeline file::

    input:                       # raw files (with preset or map) or finished corpora
      splits: {dev: data/snli_dev.jsonl, test: data/snli_test.jsonl}   # or paths: [...]
      preset: snli               # or map: {text_a: premise, text_b: hypothesis, label: gold}
    engine: local                # local | ray
    out: snli-out
    stages:
      - audit: {k: 20}
      - zfilter: {k: 20}

Relative paths are taken from the pipeline file's folder; ``${VAR}`` and ``${VAR:-default}``
are read from the environment.
"""
from __future__ import annotations

import dataclasses
import os
import re
import typing
from dataclasses import dataclass
from typing import Any

import yaml

from refinery.core.validation import Allowed, at_least, one_of, setting, validate
from refinery.io.schema import PRESETS
from refinery.io.storage import get_fs, is_local


class ConfigError(ValueError):
    """A pipeline file or stage config that cannot run, named by where it is wrong."""


def to_dict(config) -> dict:
    """A config dataclass as plain data (tuples as lists, nested configs as dicts)."""
    def plain(v):
        if dataclasses.is_dataclass(v):
            return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v
    return plain(config)


def from_dict(cls: type, data: dict | None, where: str = "config"):
    """Build config dataclass ``cls`` from plain data, checking keys and types; nested configs recurse."""
    data = dict(data or {})
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(fields)}")
    values = {}
    for name, value in data.items():
        values[name] = _coerce(hints[name], value, f"{where}.{name}")
    try:
        return cls(**values)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from None


# scalar field types: the Python types a YAML value may have, and how an error names them
_SCALARS = {bool: ((bool,), "true or false"), int: ((int,), "an integer"), float: ((int, float), "a number"),
            str: ((str,), "a string")}


def _coerce(hint, value, where: str):
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union or type(hint).__name__ == "UnionType":
        if value is None and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(arg, value, where)
            except ConfigError:
                continue
        raise ConfigError(f"{where}: {value!r} is not a {' or '.join(getattr(a, '__name__', str(a)) for a in args)}")
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping of {hint.__name__} keys, got {value!r}")
        return from_dict(hint, value, where)
    if hint is tuple or origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return tuple(value)
    if hint in _SCALARS:
        types, what = _SCALARS[hint]
        if not isinstance(value, types) or (isinstance(value, bool) and hint is not bool):
            raise ConfigError(f"{where}: expected {what}, got {value!r}")
        return float(value) if hint is float else value
    return value  # dict / Any: as given


@dataclass
class InputSpec:
    """The pipeline's input: named splits or plain paths, and how to read them."""

    splits: dict = setting(default_factory=dict, help="{split: path or [paths]}.")
    paths: list = setting(default_factory=list, help="Files, folders, globs or corpora (one split).")
    preset: str | None = setting(None, Allowed(lambda v: str(v).lower() in PRESETS, f"one of {', '.join(PRESETS)}"
                                               ).or_none(), "Column mapping of a known release.")
    map: dict | None = setting(None, help="Explicit column mapping {text_a: COL, text_b: COL, label: COL, id: COL}.")
    labels: list | None = setting(None, help="Declared label set (rows outside it are rejected).")
    on_bad_row: str = setting("quarantine", one_of("quarantine", "fail"), "Quarantine bad rows, or fail.")
    max_chars: int = setting(20_000, at_least(1), "Reject rows whose text is longer.")
    batch_rows: int = setting(65_536, at_least(1), "Rows read per batch.")
    csv_multiline: bool = setting(False, help="Let a quoted CSV field span lines (one record), not rejects.")
    storage_options: dict = setting(default_factory=dict, help="fsspec storage options.")

    def __post_init__(self):
        validate(self)
        if bool(self.splits) == bool(self.paths):
            raise ValueError("give exactly one of splits (named) or paths")
        if self.preset and self.map:
            raise ValueError("give preset or map, not both")

    def split_paths(self) -> dict:
        """{split: [paths]}: named splits, or one split per plain path's file stem (none for a corpus)."""
        if self.splits:
            return {s: [p] if isinstance(p, str) else list(p) for s, p in self.splits.items()}
        return {"": list(self.paths)}


@dataclass
class StageSpec:
    name: str
    config: Any

    def to_dict(self) -> dict:
        return {self.name: to_dict(self.config)}


@dataclass
class PipelineSpec:
    input: InputSpec
    stages: list
    out: str | None = None
    engine: str = "local"

    def to_dict(self) -> dict:
        return {"input": {k: v for k, v in to_dict(self.input).items() if v not in ({}, [], None)},
                "engine": self.engine, **({"out": self.out} if self.out else {}),
                "stages": [s.to_dict() for s in self.stages]}

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=None, width=100)


_VAR = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


def _expand(value, where: str):
    """``${VAR}`` / ``${VAR:-default}`` in strings, recursively; an unset VAR without default is an error."""
    if isinstance(value, str):
        def sub(m):
            if m.group(1) in os.environ:
                return os.environ[m.group(1)]
            if m.group(2) is None:
                raise ConfigError(f"{where}: environment variable {m.group(1)} is not set")
            return m.group(2)
        return _VAR.sub(sub, value)
    if isinstance(value, list):
        return [_expand(v, where) for v in value]
    if isinstance(value, dict):
        return {k: _expand(v, f"{where}.{k}") for k, v in value.items()}
    return value


def _anchor(path: str, base: str) -> str:
    """A relative local path taken from the pipeline file's folder; URLs as they are."""
    fs, _ = get_fs(path)
    if not is_local(fs) or "://" in path or os.path.isabs(path):
        return path
    return os.path.normpath(os.path.join(base, path))


def parse_pipeline(data: dict, base: str = ".", where: str = "pipeline") -> PipelineSpec:
    from refinery.pipeline.stage import stage_class

    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with input and stages")
    data = _expand(data, where)
    unknown = sorted(set(data) - {"input", "stages", "out", "engine"})
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; known: input, stages, out, engine")
    if "input" not in data or not data.get("stages"):
        raise ConfigError(f"{where}: needs input and at least one stage")
    spec_in = from_dict(InputSpec, data["input"], f"{where}: input")
    spec_in.splits = {s: ([_anchor(p, base) for p in ps] if isinstance(ps, list) else _anchor(ps, base))
                      for s, ps in spec_in.splits.items()}
    spec_in.paths = [_anchor(p, base) for p in spec_in.paths]
    stages = []
    for i, entry in enumerate(data["stages"], 1):
        name, params = (entry, {}) if isinstance(entry, str) else next(iter(entry.items())) \
            if isinstance(entry, dict) and len(entry) == 1 else (None, None)
        if name is None:
            raise ConfigError(f"{where}: stage {i} must be a name or a one-key mapping name: {{config}}")
        try:
            cls = stage_class(name)
        except ValueError as e:
            raise ConfigError(f"{where}: stage {i}: {e}") from None
        stages.append(StageSpec(name, from_dict(cls.Config, params, f"{where}: stage {i} ({name})")))
    engine = data.get("engine", "local")
    if engine not in ("local", "ray"):
        raise ConfigError(f"{where}: engine must be local or ray, not {engine!r}")
    out = data.get("out")
    return PipelineSpec(spec_in, stages, _anchor(out, base) if out else None, engine)


def load_pipeline(path: str) -> PipelineSpec:
    """Read and validate a pipeline file (YAML or JSON)."""
    fs, local = get_fs(path)
    try:
        with fs.open(local, "r") as fh:
            data = yaml.safe_load(fh)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {' '.join(str(e).split())}") from None
    base = os.path.dirname(os.path.abspath(path)) if is_local(fs) else "."
    return parse_pipeline(data, base, where=path)
