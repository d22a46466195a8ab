"""Messages as records: the words of a refusal, a warning or a remedy, with the settings and commands they name kept
apart as parts, so that each front door names them in its own terms. A remedy that says "lower the cap" names the
setting ``Setting("max_copies", 2)``; the command line shows it as its option (``--max-copies 2``), Python as the
keyword (``max_copies=2``), a pipeline file as its key (``max_copies: 2``; the settings of ``refinery run`` itself,
``COMMAND_SETTINGS``, as its options).

Which terms a message is shown in is the front door's choice (``shown_as``): the CLI and ``refinery run`` set
theirs for the whole process (``REFINERY_TERMS``, which its Ray workers get: a local instance's inherit it, a
cluster's as the job's environment), the API for each call.
Python's are the default. A ``Message`` renders itself in the terms in force wherever it becomes text (a report's
JSON and page, a warning printed, ``str()`` of a ``Refusal``), so a module that words a message never spells an
option, and one record serves every front door.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
from dataclasses import dataclass

TERMS = ("cli", "python", "pipeline")
TERMS_ENV = "REFINERY_TERMS"
_terms: contextvars.ContextVar[str | None] = contextvars.ContextVar("refinery_terms", default=None)


def terms() -> str:
    """The terms messages are shown in here: the front door's (``shown_as``), else ``REFINERY_TERMS``, else Python's."""
    chosen = _terms.get() or os.environ.get(TERMS_ENV, "python")
    return chosen if chosen in TERMS else "python"


@contextlib.contextmanager
def shown_as(name: str):
    """Show messages in ``name``'s terms inside the block (a command sets ``REFINERY_TERMS`` for its whole process
    instead, so that the Ray workers it starts inherit them)."""
    if name not in TERMS:
        raise ValueError(f"terms {name!r}: one of {', '.join(TERMS)}")
    token = _terms.set(name)
    try:
        yield
    finally:
        _terms.reset(token)


class _Unset:
    """A setting named without a value; one object, also after pickling (a Ray worker's message)."""

    def __repr__(self) -> str:
        return "<unset>"

    def __reduce__(self) -> str:
        return "_UNSET"


_UNSET = _Unset()
# settings of the command that runs a pipeline file, not keys of the file: a pipeline's message names them as options
COMMAND_SETTINGS = frozenset({"out", "mode", "in_place", "io_timeout", "ray_timeout"})


@dataclass(frozen=True)
class Setting:
    """A setting a message names: its key (a config field as a pipeline file and Python name it, ``max_copies``),
    the value a remedy gives it (unset: the setting itself), and its option where that is not the key's
    (``--identical-pairs`` for ``identical_label``; ``pipeline.fields.setting`` reads it off the config).
    ``placeholder``: a value that stands for what the user gives (``COLUMN``), shown bare."""

    name: str
    value: object = _UNSET
    option: str | None = None
    placeholder: bool = False

    @classmethod
    def of(cls, config: type, name: str, value=_UNSET, **kw) -> "Setting":
        """Setting ``name`` of the config dataclass ``config``, with the option its field declares (where it
        declares one: ``--identical-pairs``, ``--weighted/--unweighted``)."""
        field = config.__dataclass_fields__[name]
        return cls(name, value, field.metadata.get("option"), **kw)

    def words(self, kind: str) -> str:
        if isinstance(self.value, Shapes):   # what to give, as each front door gives it
            return Setting(self.name, getattr(self.value, kind), self.option, placeholder=True).words(kind)
        has_value = self.value is not _UNSET
        if kind == "cli" or kind == "pipeline" and self.name in COMMAND_SETTINGS:
            on, _, off = (self.option or "--" + self.name.replace("_", "-")).partition("/")
            if self.value is False:
                return off or "--no-" + on[2:]
            if self.value is True or not has_value or self.value is None:
                return on
            return f"{on} {self.value}"
        if kind == "pipeline":
            return f"{self.name}: {_yaml(self.value)}" if has_value else self.name
        if not has_value:
            return f"{self.name}=…"
        shown = self.value if self.placeholder or isinstance(self.value, (bool, int, float)) else repr(self.value)
        return f"{self.name}={shown}"


@dataclass(frozen=True)
class Shapes:
    """A setting's value as each front door gives it, shown bare: ``Setting("evals", Shapes("NAME=PATH[:PRESET]",
    "{'NAME': data}", "[NAME=PATH[:PRESET], …]"))`` reads ``--eval NAME=PATH[:PRESET]``, ``evals={'NAME': data}``,
    ``evals: [NAME=PATH[:PRESET], …]``."""

    cli: str
    python: str
    pipeline: str


def _yaml(value) -> str:
    return "true" if value is True else "false" if value is False else str(value)


@dataclass(frozen=True)
class Command:
    """A refinery command a message names: its verb, settings and what it reads (``on``: an output part of this
    run, ``kept``; none: any input): ``refinery zfilter OUT/kept --k 20``, ``rf.zfilter(result.data, k=20)``, a
    ``zfilter`` step after this one with ``k: 20``. ``function``: the Python function where it is not the verb's
    (``convert``: ``rf.read``)."""

    verb: str
    settings: tuple = ()
    on: str | None = None
    function: str | None = None

    def words(self, kind: str) -> str:
        given = [s.words(kind) for s in self.settings]
        if kind == "cli":
            return " ".join(["refinery", self.verb, *([f"OUT/{self.on}"] if self.on else []), *given])
        if kind == "python":
            name = (self.function or self.verb).replace("-", "_")
            return f"rf.{name}({', '.join(['result.data' if self.on else '…', *given])})"
        article = "an" if self.verb[0] in "aeiou" else "a"
        return (f"{article} {self.verb} step" + (" after this one" if self.on else "")
                + (f" with {', '.join(given)}" if given else ""))


@dataclass(frozen=True)
class RejectsAt:
    """How to read the rejects folder ``url`` (each rejected row with its reason): ``refinery inspect URL``, or in
    Python ``pandas.read_parquet('URL')``."""

    url: str

    def words(self, kind: str) -> str:
        return f"pandas.read_parquet({self.url!r})" if kind == "python" else f"refinery inspect {self.url}"


@dataclass(frozen=True)
class Together:
    """Settings given together: ``--tau auto --keep-share 0.8`` on the command line, ``tau='auto', keep_share=0.8``
    elsewhere."""

    settings: tuple

    def words(self, kind: str) -> str:
        return (" " if kind == "cli" else ", ").join(s.words(kind) for s in self.settings)


@dataclass(frozen=True)
class NamedSplits:
    """The remedy of an input that names no splits: each split its own input."""

    def words(self, kind: str) -> str:
        if kind == "cli":
            return "--input train=PATH --input test=PATH"
        if kind == "python":
            return "{'train': data, 'test': data} (a DatasetDict, or a split column)"
        return "input: {splits: {train: PATH, test: PATH}}"


@dataclass(frozen=True)
class CommandLineOnly:
    """Words only the command line has a setting for (``--in-place``); elsewhere they are left out."""

    parts: tuple

    def words(self, kind: str) -> str:
        return render(self.parts, kind) if kind == "cli" else ""


def render(parts, kind: str | None = None) -> str:
    """The text of ``parts`` (strings, settings, commands, messages) in ``kind``'s terms (those in force: ``terms``)."""
    kind = kind or terms()
    return "".join(p if isinstance(p, str) else p.words(kind) if hasattr(p, "words") else str(p) for p in parts)


@dataclass(frozen=True, init=False)
class Message:
    """Words with the settings they name as parts: ``Message("lower ", Setting("max_copies"), " (now 3)")``. Its
    text is its rendering in the terms in force (``str``); ``+`` joins messages and strings into a message."""

    parts: tuple

    def __init__(self, *parts):
        flat = []
        for p in parts:
            flat.extend(p.parts if isinstance(p, Message) else (p,))
        object.__setattr__(self, "parts", tuple(flat))

    @classmethod
    def joined(cls, parts, separator: str) -> "Message":
        """``separator.join(parts)`` of strings and messages, as a message."""
        return cls(*(p for i, part in enumerate(parts) for p in ((separator, part) if i else (part,))))

    def words(self, kind: str) -> str:
        return render(self.parts, kind)

    def __str__(self) -> str:
        return render(self.parts)

    def __add__(self, other):
        return Message(self, other)

    def __radd__(self, other):
        return Message(other, self)

    def __bool__(self) -> bool:
        return bool(str(self))

    def __contains__(self, text: str) -> bool:
        return text in str(self)


def text(value, kind: str | None = None) -> str:
    """A message, string or refusal as text in ``kind``'s terms (those in force by default)."""
    if isinstance(value, OSError) and value.strerror:   # the system's (errno, reason[, file]): the file named
        return f"{value.filename}: {value.strerror}" if value.filename else value.strerror
    if isinstance(value, BaseException):
        return render(value.args, kind) if value.args else type(value).__name__
    return render((value,), kind)


# What a refusal can be, each a stable name a program matches (``except Refusal as e: if e.code == …``), the command
# line prints after the error (``[missing-columns]``) and docs/errors.md explains with its usual fix.
CODES = {
    "bad-input": "an input file, folder or value that cannot be read as a corpus (its format, encoding or shape)",
    "bad-row": "a row refused under on_bad_row: fail",
    "missing-columns": "the input lacks a column the stage needs, or a mapped column is not in the file",
    "empty-input": "an input, split or label with no rows",
    "all-rejected": "every row of the input was rejected",
    "missing-split": "a split the run names is not in the input, or the input names no splits where some are needed",
    "invalid-setting": "a setting's value is out of its range, of the wrong kind, or not one of its choices",
    "conflicting-settings": "settings given together that exclude each other",
    "missing-setting": "a setting the run needs was not given",
    "unknown-setting": "a setting, key or stage that does not exist",
    "too-few-rows": "too few rows (in all, of a label, or kept) for the method to decide anything",
    "label-emptied": "the run would leave a label with no rows",
    "evaluation-overlap": "rows of an evaluation set that are also training rows (their scores would be inflated)",
    "output-exists": "the output holds a finished run and the mode does not replace it",
    "output-overlaps-input": "the output is, holds or lies inside an input",
    "not-refinerys": "a folder refinery did not make, where it would write or remove",
    "over-budget": "the work does not fit in the memory budget",
    "bad-weights": "a weight column that cannot be counted",
    "storage": "a store or file system that refused or failed a call",
    "cluster": "a Ray cluster that does not answer, or an engine that cannot run here",
    "model": "a model that cannot be loaded, trained or called as configured",
    "missing-package": "an optional package a setting needs is not installed",
    "refused": "any other refusal",
}


class Refusal(ValueError):
    """What the user can fix (exit 2 on the command line), worded as parts: ``Refusal("give ", Setting("labels"),
    " or a preset", code="missing-setting")``. Its text is its rendering in the terms in force; it pickles with its
    parts and code (a Ray worker's refusal is worded by the driver's front door). ``code``: what kind of refusal it
    is, one of ``CODES`` (a subclass names its own)."""

    code = "refused"

    def __init__(self, *parts, code: str | None = None):
        super().__init__(*parts)
        if code is not None:
            if code not in CODES:
                raise TypeError(f"refusal code {code!r} is not one of refinery.messages.CODES")
            self.code = code

    def __str__(self) -> str:
        return text(self)

    def __reduce__(self):
        """Pickled as its parts and attributes, whatever its subclass's ``__init__`` takes (a Ray task's refusal)."""
        return _refusal, (type(self), self.args, self.__dict__)


def _refusal(cls: type, args: tuple, attributes: dict) -> Refusal:
    refusal = cls.__new__(cls)
    refusal.args = args
    refusal.__dict__.update(attributes)
    return refusal
