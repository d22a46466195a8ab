"""Configs as data: stage config dataclasses ↔ plain dicts (YAML/JSON), and pipeline files.

A pipeline file::

    input:                       # raw files (with preset or map) or finished corpora
      splits: {dev: data/snli_dev.jsonl, test: data/snli_test.jsonl}   # or paths: [...]
      preset: snli               # or map: {text_a: premise, text_b: hypothesis, label: gold}
    engine: local                # local | ray
    memory_budget: 8G            # what each process of the run may hold (default: half the machine's memory)
    out: snli-out
    stages:
      - audit: {k: 20}
      - zfilter: {k: 20}

Relative paths (the input's, ``out`` and the settings that name a file or folder, such as a saved model's) are
taken from the pipeline file's folder; ``${VAR}`` and ``${VAR:-default}``
are read from the environment.
"""
from __future__ import annotations

import dataclasses
import difflib
import numbers
import os
import re
import typing
from dataclasses import dataclass, field
from typing import Any

from refinery.messages import Refusal
from refinery.core.validation import NAME_OR_FOLDER, Allowed, at_least, one_of, setting, validate
from refinery.io.read_options import DEFAULT_BATCH_ROWS, DEFAULT_MAX_CHARS, ReadOptions
from refinery.io.schema import PRESETS, Mapping, parse_mapping, resolve_mapping
from refinery.io.location import get_fs, is_local, parse_storage_options
from refinery.io.memory import parse_budget
from refinery.pipeline.stage import mapped_references, reference_values


INPUT_DIR = "00-input"   # a pipeline's step 0: its input as one corpus


def step_folder(i: int, name: str) -> str:
    """The folder of a pipeline's ``i``-th step, stage ``name``: ``01-zfilter``."""
    return f"{i:02d}-{name}"


class ConfigError(Refusal):
    """A pipeline file or stage config that cannot run, named by where it is wrong."""

    code = "invalid-setting"


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


RUN_KEYS = ("engine", "memory_budget")   # a pipeline file's keys for the whole run, beside input, stages, out
MOVED_TO_RUN = ("memory_budget",)   # a step's keys that became the run's: left out of a step where null, as older
#                                     refinery printed them (--print-config), refused where set


def from_dict(cls: type, data: dict | None, where: str = "config"):
    """Build config dataclass ``cls`` from plain data, checking keys and types; nested configs recurse."""
    data = {k: v for k, v in (data or {}).items() if not (k in MOVED_TO_RUN and v is None)}
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        run_keys = [k for k in unknown if k in RUN_KEYS]
        said = f"; {', '.join(run_keys)}: the run's, not a step's (the pipeline file's top level)" if run_keys else ""
        close = [m for k in unknown for m in difflib.get_close_matches(k, list(fields), n=1)]
        meant = f"; did you mean {', '.join(map(repr, close))}?" if close and not run_keys else ""
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}{meant}; known: {', '.join(fields)}{said}",
                          code="unknown-setting")
    values = {}
    for name, value in data.items():
        values[name] = _coerce(hints[name], value, f"{where}.{name}")
    try:
        return cls(**values)
    except (TypeError, ValueError) as e:   # a SettingError stays its cause, for the CLI to name the option
        raise ConfigError(f"{where}: {e}" if where else str(e), code=_code_of(e)) from e


def _code_of(error: BaseException) -> str | None:
    """The code of a refusal a config's check raised, for the ``ConfigError`` that names where it is wrong (a
    plain ``ValueError``: none, the default)."""
    return error.code if isinstance(error, Refusal) else None


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
    if hint in (tuple, list) or origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return tuple(map(_plain, value)) if tuple in (hint, origin) else list(map(_plain, value))
    if hint in (int, float) and isinstance(value, numbers.Number) and not isinstance(value, bool):
        value = value.item() if hasattr(value, "item") else value   # a numpy scalar
    if isinstance(value, FromEnvironment):
        value = value.typed(hint, where) if hint in (bool, int, float) else str(value)
    if hint in _SCALARS:
        types, what = _SCALARS[hint]
        if not isinstance(value, types) or (isinstance(value, bool) and hint is not bool):
            raise ConfigError(f"{where}: expected {what}, got {value!r}")
        return float(value) if hint is float else value
    return _plain(value)  # dict / Any: as given


def _plain(value):
    """``value`` with every ``FromEnvironment`` in it a plain string (a YAML dump refuses a subclass)."""
    if isinstance(value, FromEnvironment):
        return str(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _map_columns(text: str) -> dict:
    """``text_a=COL,text_b=COL,…`` as {canonical field: column}."""
    return dict(parse_mapping(text).columns)


# a label set's names: text or numbers (a file's labels 0, 1), never a YAML boolean (an unquoted yes, no, on, off)
_LABEL_NAMES = Allowed(lambda v: isinstance(v, (list, tuple)) and bool(v) and all(
    isinstance(x, (str, int, float)) and not isinstance(x, bool) for x in v),
    "a list of label names (quote yes, no, on, off, true and false in a pipeline file: unquoted, YAML reads them as "
    "booleans)")


@dataclass
class InputSpec:
    """The input of a pipeline or a verb: named splits or plain paths, and how to read them. Its fields are the
    ``input:`` keys of a pipeline file and the input options of every verb that reads corpora."""

    splits: dict = setting(default_factory=dict, help="{split: path or [paths]}.", hidden=True)
    paths: list = setting(default_factory=list, help="Files, folders, globs or corpora (one split).", hidden=True)
    preset: str | None = setting(None, Allowed(lambda v: str(v).lower() in PRESETS, f"one of {', '.join(PRESETS)}",
                                               tuple(PRESETS)).or_none(),
                                 "Column mapping of a known release (see README, 'Bringing your own data').")
    map: dict | None = setting(None, help="Explicit column mapping.", parse=_map_columns,
                               metavar="text_a=COL,text_b=COL,label=COL,id=COL")
    labels: list | None = setting(None, _LABEL_NAMES.or_none(), "Declared label set (rows outside it are rejected).",
                                  metavar="A,B,C", parse=lambda v: [x.strip() for x in v.split(",") if x.strip()])
    on_bad_row: str = setting("quarantine", one_of("quarantine", "fail"),
                              "Quarantine bad rows in rejects, or fail naming file and line.")
    max_chars: int = setting(DEFAULT_MAX_CHARS, at_least(1), "Reject rows whose text is longer.")
    batch_rows: int = setting(DEFAULT_BATCH_ROWS, at_least(1), "Rows read per batch (memory grows with it).")
    csv_multiline: bool = setting(False, help="Let a quoted CSV field span lines (one record); by default each such "
                                              "line is a reject.")
    storage_options: dict = setting(default_factory=dict, help="fsspec storage option (e.g. endpoint_url=http://"
                                    "127.0.0.1:9000); repeat for more.", option="--storage-option", multiple=True,
                                    parse=parse_storage_options, metavar="KEY=VALUE")

    def __post_init__(self):
        validate(self)
        if self.splits and self.paths:
            raise Refusal("give splits (named) or paths, not both", code="conflicting-settings")
        if self.preset and self.map:
            raise Refusal("give preset or map, not both", code="conflicting-settings")

    def split_paths(self) -> dict:
        """{split: [paths]}: named splits, the splits of a Hugging Face ``DatasetDict`` folder given alone, or
        the plain paths as one unnamed split. A stage's folder stands for the corpus it made (``corpus_of``)."""
        from refinery.io.corpus import corpus_of, is_corpus
        from refinery.io.inputs import hf_splits

        if not self.splits and not self.paths:
            raise Refusal("no input: give paths or named splits", code="missing-setting")
        if self.splits:
            return {s: [corpus_of(p, self.storage_options) for p in ([p] if isinstance(p, str) else p)]
                    for s, p in self.splits.items()}
        if len(self.paths) == 1 and not is_corpus(self.paths[0], self.storage_options) and (
                named := hf_splits(self.paths[0], self.storage_options)):
            return named
        return {"": [corpus_of(p, self.storage_options) for p in self.paths]}

    def mapping(self) -> Mapping | None:
        """How raw files' columns become canonical ones (None: the inputs are canonical corpora)."""
        text_map = ",".join(f"{k}={v}" for k, v in self.map.items()) if self.map else None
        return resolve_mapping(self.preset, text_map, ",".join(map(str, self.labels)) if self.labels else None)

    def read_options(self) -> ReadOptions:
        return ReadOptions(batch_rows=self.batch_rows, max_chars=self.max_chars, on_bad_row=self.on_bad_row,
                           storage_options=dict(self.storage_options), csv_multiline=self.csv_multiline)


@dataclass
class StageSpec:
    name: str
    config: Any
    reads: str | None = None   # the step whose output the stage reads (``input``, a name or NN-name); none: the last

    def to_dict(self) -> dict:
        return {self.name: to_dict(self.config), **({READS: self.reads} if self.reads else {})}


READS = "reads"   # a stage entry's key beside its name: the earlier step it reads instead of the one before it


@dataclass
class ReportConfig:
    """The pipeline report's settings (the file's ``report:`` key; ``refinery run``'s options)."""

    audit_steps: bool = setting(True, help="Audit the input and each stage's output for the report (z* of the top "
                                           "features stage by stage; a cheap pass). Off: the rows' flow only.")
    top_features: int = setting(3, at_least(1), "The input's top features per label followed through the stages.")
    screenshots: bool = setting(False, help="Save PNG screenshots of every report of the run under "
                                            "OUT/pipeline/screenshots (needs chromium).")

    def __post_init__(self):
        validate(self)


@dataclass
class PipelineSpec:
    input: InputSpec
    stages: list
    out: str | None = None
    engine: str = "local"
    report: ReportConfig = field(default_factory=ReportConfig)
    memory_budget: str | None = None   # ``io.memory.parse_budget``'s; None: the default share of the memory

    def __post_init__(self):
        if self.memory_budget is not None:
            try:
                parse_budget(self.memory_budget)
            except ValueError as e:
                raise ConfigError(str(e), code=_code_of(e)) from None

    def to_dict(self) -> dict:
        return {"input": {k: v for k, v in to_dict(self.input).items() if v not in ({}, [], None)},
                "engine": self.engine, **({"memory_budget": self.memory_budget} if self.memory_budget else {}),
                **({"out": self.out} if self.out else {}),
                "stages": [s.to_dict() for s in self.stages], "report": to_dict(self.report)}

    def to_yaml(self) -> str:
        """The pipeline file of this spec, credentials as ``${REFINERY_<NAME>}`` variables (printed and saved with
        a run's report, it names where they come from, never what they are)."""
        import yaml

        from refinery.io.redaction import secrets_as_variables

        data = self.to_dict()
        if data["input"].get("storage_options"):
            data["input"]["storage_options"] = secrets_as_variables(data["input"]["storage_options"])
        return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)


_VAR = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


class FromEnvironment(str):
    """A value that is a ``${VAR}`` whole: text, read as the number or true/false its setting takes (the file's
    ``k: ${K}`` with K=20 is k: 20; a number written in the file as text stays refused)."""

    def typed(self, hint: type, where: str):
        text = self.strip()
        try:
            if hint is bool:
                return {"true": True, "false": False}[text.lower()]
            return int(text) if hint is int else float(text)
        except (KeyError, ValueError):
            raise ConfigError(f"{where}: the environment gives {str(self)!r}, not {_SCALARS[hint][1]}") from None


def _expand(value, where: str):
    """``${VAR}`` / ``${VAR:-default}`` in strings, recursively; an unset VAR without default is an error."""
    if isinstance(value, str):
        def sub(m):
            if m.group(1) in os.environ:
                return os.environ[m.group(1)]
            if m.group(2) is None:
                raise ConfigError(f"{where}: environment variable {m.group(1)} is not set", code="missing-setting")
            return m.group(2)
        expanded = _VAR.sub(sub, value)
        return FromEnvironment(expanded) if _VAR.fullmatch(value) else expanded
    if isinstance(value, list):
        return [_expand(v, where) for v in value]
    if isinstance(value, dict):
        return {k: _expand(v, f"{where}.{k}") for k, v in value.items()}
    return value


def anchor_path(path: str, base: str) -> str:
    """A relative local path taken from the pipeline file's folder; URLs as they are."""
    fs, _ = get_fs(path)
    if not is_local(fs) or "://" in path:
        return path
    path = os.path.expanduser(path)
    return path if os.path.isabs(path) else os.path.normpath(os.path.join(base, path))


def anchor_input(spec_in: "InputSpec", base: str) -> "InputSpec":
    """``spec_in`` with its relative local paths (plain and each split's) taken from ``base``."""
    return dataclasses.replace(
        spec_in, paths=[anchor_path(p, base) for p in spec_in.paths],
        splits={s: anchor_path(ps, base) if isinstance(ps, str) else [anchor_path(p, base) for p in ps]
                for s, ps in spec_in.splits.items()})


def anchor_settings(config, base: str):
    """``config`` (nested configs too) with its settings that name a local file or folder (``setting(path=…)``)
    taken from ``base`` where relative: a ``FOLDER`` one always, a ``NAME_OR_FOLDER`` one (a model's name or its
    folder) where a path of that name exists there."""
    changes = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            anchored = anchor_settings(value, base)
        elif isinstance(value, str) and f.metadata.get("path"):
            anchored = anchor_path(value, base)
            if f.metadata["path"] == NAME_OR_FOLDER and not os.path.exists(anchored):
                anchored = value
        elif isinstance(value, (tuple, list)) and "NAME=PATH" in (f.metadata.get("metavar") or ""):
            anchored = type(value)(_anchor_named(spec, base) for spec in value)   # evaluation sets
        else:
            continue
        if anchored != value:
            changes[f.name] = anchored
    return dataclasses.replace(config, **changes) if changes else config


def _anchor_named(spec, base: str):
    """An evaluation set's ``NAME=PATH[:PRESET]`` with its path taken from ``base`` where relative."""
    if not isinstance(spec, str) or "=" not in spec:
        return spec
    name, _, rest = spec.partition("=")
    head, colon, preset = rest.rpartition(":")
    path, suffix = (head, f":{preset}") if colon and preset.lower() in PRESETS else (rest, "")
    return f"{name}={anchor_path(path, base)}{suffix}"


def anchor_references(config, references: tuple, step_names: set, base: str):
    """``config`` with the corpora its ``references`` fields name by a relative path taken from ``base``; the
    name of a preceding step (``step_names``) stays, for the runner to replace by that step's output."""
    def anchored(value: str) -> str:
        return value if value in step_names else anchor_path(value, base)

    changes = {f: mapped_references(v, anchored) for f in references if (v := getattr(config, f))}
    return dataclasses.replace(config, **changes) if changes else config


def _refuse_absent_inputs(config, cls, step_names: set, base: str, where: str) -> None:
    """Refuse, before any step runs, what a stage would read that is not there: a ``references`` value that names
    no earlier step and no local file, folder or glob match (a relative path taken from ``base``; a step's name
    mistyped, ``zfiltre``, is answered with the closest step), or a local file the stage reads besides
    (``Stage.also_reads``: evaluation sets, an audit's saved state)."""
    import difflib
    import glob

    def there(path: str) -> bool:
        return "://" in path or os.path.exists(path) or bool(glob.glob(path))

    for f in cls.references:
        for v in reference_values(getattr(config, f)):
            if v in step_names or there(anchor_path(cls.referenced_path(v), base)):
                continue
            close = difflib.get_close_matches(v, sorted(step_names), n=1)
            raise ConfigError(f"{where}: {f}: {v!r} is no earlier step and no file or folder"
                              + (f"; did you mean {close[0]!r}?" if close else
                                 f" (earlier steps: {', '.join(sorted(step_names))})"),
                              code="unknown-setting" if close else "bad-input")
    absent = next((path for path in cls(config).also_reads() if not there(path)), None)
    if absent:
        raise ConfigError(f"{where}: {absent} is no file or folder (a file the stage reads)", code="bad-input")


def _step_names(before: list) -> set:
    """What a stage's references may name: the input, and each preceding stage by its name or its folder."""
    return {"input", INPUT_DIR, *(s.name for s in before),
            *(step_folder(i, s.name) for i, s in enumerate(before, 1))}


def parse_pipeline(data: dict, base: str = ".", where: str = "pipeline") -> PipelineSpec:
    from refinery.pipeline.engine import ENGINES
    from refinery.pipeline.stage import stage_class

    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with input and stages")
    data = _expand(data, where)
    known = ("input", "stages", "out", *RUN_KEYS, "report")
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(known)}",
                          code="unknown-setting")
    if "input" not in data or not data.get("stages"):
        raise ConfigError(f"{where}: needs input and at least one stage", code="missing-setting")
    spec_in = from_dict(InputSpec, data["input"], f"{where}: input")
    if not spec_in.splits and not spec_in.paths:
        raise ConfigError(f"{where}: input: give paths or splits", code="missing-setting")
    try:
        spec_in.mapping()   # a map's unknown field or a preset's typo named with the file, before any stage
    except ValueError as e:
        raise ConfigError(f"{where}: input: {e}", code=_code_of(e)) from None
    spec_in = anchor_input(spec_in, base)
    stages = []
    for i, entry in enumerate(data["stages"], 1):
        reads = entry.get(READS) if isinstance(entry, dict) else None
        named = {k: v for k, v in entry.items() if k != READS} if isinstance(entry, dict) else {}
        name, params = (entry, {}) if isinstance(entry, str) else next(iter(named.items())) \
            if len(named) == 1 else (None, None)
        if name is None:
            raise ConfigError(f"{where}: stage {i} must be a name or a mapping name: {{config}} (and, to read an "
                              f"earlier step than the one before it, {READS}: STEP)")
        if reads is not None and (not isinstance(reads, str) or reads not in _step_names(stages)):
            raise ConfigError(f"{where}: stage {i} ({name}): {READS}: {reads!r} names no earlier step; give one of "
                              f"{', '.join(sorted(_step_names(stages)))}", code="unknown-setting")
        try:
            cls = stage_class(name)
        except ValueError as e:
            raise ConfigError(f"{where}: stage {i}: {e}", code=_code_of(e)) from None
        config = anchor_settings(from_dict(cls.Config, params, f"{where}: stage {i} ({name})"), base)
        _refuse_absent_inputs(config, cls, _step_names(stages), base, f"{where}: stage {i} ({name})")
        stages.append(StageSpec(name, anchor_references(config, cls.references, _step_names(stages), base), reads))
    engine = data.get("engine", "local")
    if engine not in ENGINES:
        raise ConfigError(f"{where}: engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    out = data.get("out")
    report = from_dict(ReportConfig, data.get("report") or {}, f"{where}: report")
    budget = data.get("memory_budget")
    if budget is not None and not isinstance(budget, (str, int, float)):
        raise ConfigError(f"{where}: memory_budget: give bytes (8G, 512M) or a fraction of memory (0.5)")
    try:
        return PipelineSpec(spec_in, stages, anchor_path(out, base) if out else None, engine, report,
                            None if budget is None else str(budget))
    except ConfigError as e:
        raise ConfigError(f"{where}: memory_budget: {e}", code=e.code) from None


def load_pipeline(path: str) -> PipelineSpec:
    """Read and validate a pipeline file (YAML or JSON)."""
    import yaml

    fs, local = get_fs(path)
    with fs.open(local, "r") as fh:
        text = fh.read()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        hint = ("; a ${VAR} inside [ ] or { } needs quotes: [\"${VAR}\"]" if re.search(r"[\[{][^\n]*\$\{", text)
                else "")
        said = " ".join(str(e).replace(' in "<unicode string>",', " at").split())
        raise ConfigError(f"{path}: not valid YAML: {said}{hint}", code="bad-input") from None
    base = os.path.dirname(os.path.abspath(path)) if is_local(fs) else "."
    return parse_pipeline(data, base, where=path)
