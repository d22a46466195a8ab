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

import dataclasses
import typing
from dataclasses import dataclass

import click


@dataclass(frozen=True)
class Leaf:
    """One option: the field's path in the nested config, its option declaration and how its value is read."""

    path: tuple
    field: dataclasses.Field
    hint: object
    default: object
    option: str

    @property
    def declaration(self) -> str:
        """The option's declaration: ``--name``, or ``--on/--off`` for a bool."""
        if self.hint is bool and "/" not in self.option:
            return f"{self.option}/--no-{self.option[2:]}"
        return self.option

    @property
    def names(self) -> list[str]:
        return self.declaration.split("/")

    def dest(self, group: str) -> str:
        """The parameter name of the option in the command (``group`` keeps two configs' fields apart)."""
        return f"{group}__" + "__".join(self.path)


def _unwrap(hint):
    """``X`` of ``X | None``; the hint itself otherwise."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if (typing.get_origin(hint) is typing.Union or type(hint).__name__ == "UnionType") and len(args) == 1:
        return args[0]
    return hint


def _default(f: dataclasses.Field, owner_default=None):
    if owner_default is not None:
        return getattr(owner_default, f.name)
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def leaves(cls: type, path: tuple = (), prefix: str = "", defaults=None, skip: tuple = ()) -> list[Leaf]:
    """The option-bearing fields of config class ``cls``, nested configs flattened (but the fields their
    parent field's ``skip`` metadata names)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if not f.init or f.metadata.get("hidden") or f.name in skip:
            continue
        hint, default = _unwrap(hints[f.name]), _default(f, defaults)
        if dataclasses.is_dataclass(hint):
            sub = f.metadata.get("prefix")
            out += leaves(hint, (*path, f.name), f"{prefix}{sub}-" if sub else prefix, default,
                          f.metadata.get("skip", ()))
            continue
        option = f.metadata.get("option") or f"--{prefix}{f.name.replace('_', '-')}"
        out.append(Leaf((*path, f.name), f, hint, default, option))
    return out


def _shown(value) -> str | None:
    if value is None or value == () or value == {}:
        return None
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    return str(value)


def _comma_list(ctx, param, value):
    return None if value is None else tuple(x.strip() for x in value.split(",") if x.strip())


def click_option(leaf: Leaf, group: str):
    """The ``click.option`` of one field."""
    meta, hint = leaf.field.metadata, leaf.hint
    allowed = meta.get("allowed")
    shown = leaf.names[0 if leaf.default else 1] if hint is bool else _shown(leaf.default)
    kwargs = {"default": None, "help": " ".join(filter(None, [meta.get("help"), shown and f"[default: {shown}]"]))}
    if hint is bool:
        return click.option(leaf.declaration, leaf.dest(group), **kwargs)
    if "parse" in meta:
        kwargs["callback"] = lambda ctx, param, value, parse=meta["parse"]: None if not value else parse(value)
        kwargs["multiple"] = bool(meta.get("multiple"))
        kwargs["metavar"] = meta.get("metavar")
        return click.option(leaf.option, leaf.dest(group), **kwargs)
    if hint is tuple or hint is list or typing.get_origin(hint) is tuple:
        if meta.get("multiple"):
            kwargs.update(multiple=True, callback=lambda ctx, param, value: tuple(value) or None)
        else:
            kwargs.update(callback=_comma_list, metavar=meta.get("metavar", "A,B,…"))
        return click.option(leaf.option, leaf.dest(group), **kwargs)
    if allowed is not None and allowed.choices:
        kwargs["type"] = click.Choice([str(c) for c in allowed.choices])
    elif hint in (int, float, str):
        kwargs["type"] = hint
    else:
        raise TypeError(f"{leaf.option}: a {hint} field needs parse= in its metadata to be an option")
    return click.option(leaf.option, leaf.dest(group), **kwargs)


def check_unique(fields: list[Leaf], taken: dict) -> None:
    """Refuse an option name given twice: ``taken`` maps the names already in use to what uses them."""
    for leaf in fields:
        for name in leaf.names:
            if name in taken:
                raise TypeError(f"option {name} of {'.'.join(leaf.path)} is also {taken[name]}'s (rename the "
                                "field, or give it a prefix or option in its metadata)")
            taken[name] = ".".join(leaf.path)


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
    out: dict = {}
    for leaf in leaves(cls):
        value = params.pop(leaf.dest(group), None)
        if value is None:
            continue
        node = out
        for key in leaf.path[:-1]:
            node = node.setdefault(key, {})
        node[leaf.path[-1]] = value
    return out
