"""Click options generated from config dataclasses, so a config field is its CLI option with no CLI edit.

Every leaf field of a config (nested configs flattened, their options prefixed by the field's ``prefix``
metadata when given) becomes ``--field-name``: typed by its annotation, offered as choices when its
``Allowed`` lists them, a ``--name/--no-name`` flag pair for a bool, a comma-separated list for a tuple
(``multiple=True``: a repeated option), and read by the field's ``parse`` for dicts. The help line and the
default shown are the field's. Options default to "not given", and the values given become the nested dict
a pipeline file would hold, built into the config by ``pipeline.config.from_dict``: the same keys, coercion
and validation as a pipeline file's and the Python API's.
"""
from __future__ import annotations

import difflib
import typing

import click

from refinery.core.validation import SettingError
from refinery.messages import text
from refinery.pipeline.fields import Leaf, check_unique, leaves, nest


class SuggestingChoice(click.Choice):
    """click's ``Choice`` whose refusal of a value also names the closest choice (``did you mean 'snli'?``)."""

    def convert(self, value, param, ctx):
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as e:
            choices = {str(c).lower(): c for c in self.choices}
            close = difflib.get_close_matches(str(value).lower(), list(choices), 1, 0.6)
            if close:
                e.message += f" Did you mean {choices[close[0]]!r}?"
            raise


def _shown(value) -> str | None:
    if value is None or value == () or value == {}:
        return None
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    if isinstance(value, dict):   # a repeated NAME=VALUE option's
        return " ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def _comma_list(ctx, param, value):
    return None if value is None else tuple(x.strip() for x in value.split(",") if x.strip())


def click_option(leaf: Leaf, group: str):
    """The ``click.option`` of one field."""
    meta, hint = leaf.field.metadata, leaf.hint
    allowed = meta.get("allowed")
    shown = leaf.names[0 if leaf.default else 1] if hint is bool else _shown(leaf.default)
    kwargs = {"default": None, "help": " ".join(filter(None, [text(meta.get("help", ""), "cli"),
                                                              shown and f"[default: {shown}]"]))}
    if hint is bool:
        return click.option(leaf.declaration, leaf.dest(group), **kwargs)
    if "parse" in meta:
        kwargs["callback"] = lambda ctx, param, value, parse=meta["parse"]: None if not value else parse(value)
        kwargs["multiple"] = bool(meta.get("multiple"))
        kwargs["metavar"] = meta.get("metavar")
        return click.option(leaf.option, leaf.dest(group), **kwargs)
    if hint is tuple or hint is list or typing.get_origin(hint) is tuple:
        if meta.get("multiple"):
            kwargs.update(multiple=True, callback=lambda ctx, param, value: tuple(value) or None,
                          metavar=meta.get("metavar"))
        else:
            kwargs.update(callback=_comma_list, metavar=meta.get("metavar", "A,B,…"))
        return click.option(leaf.option, leaf.dest(group), **kwargs)
    if allowed is not None and allowed.choices:
        kwargs["type"] = SuggestingChoice([str(c) for c in allowed.choices])
    elif hint in (int, float, str):
        kwargs["type"] = hint
    else:
        raise TypeError(f"{leaf.option}: a {hint} field needs parse= in its metadata to be an option")
    return click.option(leaf.option, leaf.dest(group), **kwargs)


def config_options(cls: type, group: str):
    """A decorator adding the options of every field of config class ``cls`` (parameters named ``group__…``)."""
    fields = leaves(cls)
    check_unique(fields, {})

    def decorate(f):
        for leaf in reversed(fields):
            f = click_option(leaf, group)(f)
        return f

    return decorate


def given(cls: type, params: dict, group: str) -> dict:
    """The nested dict of the options of ``group`` given (popped from ``params``), as a pipeline file holds it."""
    values = {leaf.path: params.pop(leaf.dest(group), None) for leaf in leaves(cls)}
    return nest({path: value for path, value in values.items() if value is not None})


def by_option(error: Exception, cls: type) -> str:
    """A refused setting of config ``cls`` worded by its option (``--k must be a positive integer, got 0``), where
    the error's cause is a ``SettingError`` of one of its fields; else the error's own words."""
    setting = error.__cause__ if isinstance(error.__cause__, SettingError) else None
    leaf = setting and next((leaf for leaf in leaves(cls) if leaf.field is setting.field), None)
    return setting.worded(leaf.names[0]) if leaf else str(error)
