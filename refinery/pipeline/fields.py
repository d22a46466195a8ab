"""The leaf fields of a config dataclass: what a user names one setting by, in every front door.

A config's leaves are its fields with nested configs flattened (a parent field's ``prefix`` metadata prefixes
its children's names, its ``skip`` leaves some out). A leaf's ``option`` is its CLI option (``--band-min``) and
its ``keyword`` the Python API's keyword argument (``band_min``); both map to the leaf's ``path`` in the
nested dict a pipeline file holds (``("band", "min")``), which ``pipeline.config.from_dict`` builds.
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass


@dataclass(frozen=True)
class Leaf:
    """One setting: the field's path in the nested config, its option name and how its value is read."""

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

    @property
    def keyword(self) -> str:
        """The Python API's keyword argument: the option without dashes (``--band-min`` → ``band_min``)."""
        return self.names[0][2:].replace("-", "_")

    def dest(self, group: str) -> str:
        """The parameter name of the option in a command (``group`` keeps two configs' fields apart)."""
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
    """The setting-bearing fields of config class ``cls``, nested configs flattened (but the fields their
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


def check_unique(fields: list[Leaf], taken: dict) -> None:
    """Refuse an option name given twice: ``taken`` maps the names already in use to what uses them."""
    for leaf in fields:
        for name in leaf.names:
            if name in taken:
                raise TypeError(f"option {name} of {'.'.join(leaf.path)} is also {taken[name]}'s (rename the "
                                "field, or give it a prefix or option in its metadata)")
            taken[name] = ".".join(leaf.path)


def nest(values: dict[tuple, object]) -> dict:
    """{leaf path: value} as the nested dict a pipeline file holds."""
    out: dict = {}
    for path, value in values.items():
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return out
