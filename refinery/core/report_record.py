"""A stage's report as a typed record: ``ReportRecord``, the base of every stage's report (``ZFilterReport``,
``WeightsReport``, …), whose fields are its report.json's entries, in their order.

``to_json()`` is report.json's dict: each field under its name, a record or a verdict inside as its own JSON; a field
declared ``optional()`` is left out while it is None (an entry only some runs have: ``resumed``,
``not_judged``). Records are keyword-only, so that a kind of report adds its entries to its base's (a filter's
own entries after every filter's, ``pipeline.filter.FilterReport``). ``from_json(data)`` is the record again, each field read by its
declared type (a record field by its ``from_json``), so that ``R.from_json(r.to_json())`` equals ``r`` for a record
of JSON values; an entry the data lacks takes its field's default. Messages (``refinery.messages.Message``) stay
records until report.json is written, where they are worded in the terms in force.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field


def optional():
    """A report field left out of the JSON while None (an entry only some runs have)."""
    return field(default=None, metadata={"optional": True})


@dataclass(frozen=True, kw_only=True)
class ReportRecord:
    """The base of every stage's report record; an instance of the base itself is an empty report (a step that
    writes none)."""

    def to_json(self) -> dict:
        """report.json's entries, in the fields' order."""
        data = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not (f.metadata.get("optional") and value is None):
                data[f.name] = as_json(value)
        return data

    @classmethod
    def from_json(cls, data: dict):
        """The record of a report.json's entries (a field the data lacks takes its default)."""
        hints = typing.get_type_hints(cls)
        given = {}
        for f in dataclasses.fields(cls):
            kind = _record_type(hints[f.name])
            if f.name in data:
                value = data[f.name]
                given[f.name] = kind.from_json(value) if kind is not None and value is not None else value
        return cls(**given)


def as_json(value):
    """``value`` as report.json holds it: records and verdicts as their JSON, containers entry by entry."""
    if hasattr(value, "to_json"):
        return value.to_json()
    if dataclasses.is_dataclass(value) and hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, dict):
        return {k: as_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_json(v) for v in value]
    return value


def _record_type(hint):
    """The record class a field's type names (``X`` or ``X | None`` where X reads itself ``from_json``), else None."""
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    found = [t for t in options if isinstance(t, type) and hasattr(t, "from_json")]
    return found[0] if found else None
