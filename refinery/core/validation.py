"""Config fields that say what they accept, checked when the config is built.

A field declared with ``setting(default, allowed, help)`` carries an ``Allowed`` (a test and the
words naming it) and a help line in its ``dataclasses.field`` metadata; ``validate(config)``, called
from each config's ``__post_init__``, checks every such field and raises one line naming the key,
the value and what is allowed: ``k must be a positive integer, got -5``. The CLI, the Python API
and pipeline files all build configs, so all three reject a bad value before any work.
"""
from __future__ import annotations

import dataclasses
import difflib
import numbers
from dataclasses import dataclass
from typing import Any, Callable

from refinery.messages import Refusal


@dataclass(frozen=True)
class Allowed:
    """What a field accepts: ``test(value)``, and ``text`` completing "KEY must be …"."""

    test: Callable[[Any], bool]
    text: str
    choices: tuple | None = None   # the values, when they are a short list (a CLI offers them as choices)

    def or_none(self) -> "Allowed":
        return Allowed(lambda v: v is None or self.test(v), f"{self.text} or none", self.choices)


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def at_least(low: int) -> Allowed:
    """An integer ≥ ``low``."""
    text = {0: "a non-negative integer", 1: "a positive integer"}.get(low, f"an integer of at least {low}")
    return Allowed(lambda v: _is_int(v) and v >= low, text)


def number_in(low: float | None = None, high: float | None = None, *, open_low: bool = False,
              open_high: bool = False) -> Allowed:
    """A number in the interval from ``low`` to ``high`` (either end open, or absent: unbounded)."""
    def test(v) -> bool:
        return _is_number(v) and (low is None or (v > low if open_low else v >= low)) and \
            (high is None or (v < high if open_high else v <= high))
    if high is None:
        text = f"a number {'>' if open_low else '≥'} {low:g}"
    else:
        text = f"a number in {'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}"
    return Allowed(test, text)


def one_of(*choices) -> Allowed:
    return Allowed(lambda v: v in choices, f"one of {', '.join(map(str, choices))}", choices)


def each_of(*choices) -> Allowed:
    """A non-empty list whose every item is one of ``choices``."""
    return Allowed(lambda v: isinstance(v, (list, tuple)) and len(v) > 0 and set(v) <= set(choices),
                   f"a non-empty list of {', '.join(map(str, choices))}")


OPEN_UNIT_INTERVAL = number_in(0, 1, open_low=True, open_high=True)
SEED = at_least(0)
NOT_EMPTY = Allowed(lambda v: isinstance(v, str) and v.strip() != "", "a non-empty string")


FOLDER = "folder"                  # a setting's ``path``: a local path (or a URL)
NAME_OR_FOLDER = "name or folder"  # a model's name or its folder: a path where one of that name exists


def setting(default=dataclasses.MISSING, allowed: Allowed | None = None, help: str = "", *,
            default_factory=dataclasses.MISSING, **cli):
    """A dataclass field whose metadata holds what it accepts, its help line, and how a command line gives it
    (``cli``: ``option="--name"`` or a flag pair ``"--on/--off"``, ``multiple=True`` for a repeated option
    instead of a comma-separated list, ``parse=`` a function of the option's text, ``prefix=`` for the
    options of a nested config, ``hidden=True`` for a field with no option; see ``refinery.cli.config_options``).
    ``path=FOLDER`` or ``NAME_OR_FOLDER`` marks a setting that names a local file or folder: a pipeline file's
    relative one is taken from the file's folder (``pipeline.config.anchor_settings``)."""
    return dataclasses.field(default=default, default_factory=default_factory,
                             metadata={"allowed": allowed, "help": help, **cli})


class SettingError(Refusal):
    """A value a setting's ``Allowed`` refuses: the field, what it accepts and the value. Worded by its key
    (``k must be a positive integer, got -5``: a pipeline file's and the Python API's word for it); the CLI words
    it by its option (``worded("--k")``)."""

    code = "invalid-setting"

    def __init__(self, field: dataclasses.Field, accepts: str, value, choices: tuple | None = None):
        self.field, self.accepts, self.value = field, accepts, value
        close = difflib.get_close_matches(value.lower(), [str(c) for c in choices], n=1) \
            if choices and isinstance(value, str) else []
        self.suggestion = f"; did you mean {close[0]!r}?" if close else ""
        super().__init__(self.worded(field.name))

    def worded(self, name: str) -> str:
        return f"{name} must be {self.accepts}, got {self.value!r}{self.suggestion}"


def validate(config) -> None:
    """Raise ``SettingError`` ("KEY must be …, got VALUE") for the first field whose value its ``Allowed``
    refuses."""
    for f in dataclasses.fields(config):
        allowed = f.metadata.get("allowed")
        value = getattr(config, f.name)
        if allowed is not None and not allowed.test(value):
            raise SettingError(f, allowed.text, value, allowed.choices)
