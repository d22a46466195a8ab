"""The ``refinery`` command group: its verbs found lazily, so that a command imports only what it runs."""
from __future__ import annotations

import importlib

import click

from refinery.cli.base import RefineryCommand, coded, ended, first_sentence


class RefineryGroup(click.Group):
    """The ``refinery`` group: its own commands, the commands of the groups named in ``verbs_from``
    (``"module:group"``, imported when one of them is invoked or listed), and a verb for every registered stage,
    built when it is invoked: a command imports only what it runs, and
    ``refinery --help`` reads the stages' summaries from their sources.

    Errors end as one line on stderr (exit 2 for a user's mistake); ``--debug`` shows the traceback.
    Ctrl-C exits 130 (what a run wrote is removed, a finished output left as it was); a reader that closed
    the pipe (``refinery … | head``) ends the command quietly."""

    command_class = RefineryCommand

    def __init__(self, *args, verbs_from: tuple = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.verbs_from = list(verbs_from)

    def _add_verbs_from(self) -> None:
        while self.verbs_from:
            module, group = self.verbs_from.pop(0).split(":")
            for name, command in getattr(importlib.import_module(module), group).commands.items():
                self.commands.setdefault(name, command)

    def _add_stage_verb(self, name: str) -> None:
        from refinery.cli.stage_verbs import stage_command
        from refinery.pipeline.stage import stage_class

        try:
            stage_class(name)
        except ValueError:   # no such stage: click says "No such command"
            return
        self.add_command(stage_command(name, RefineryCommand))

    def list_commands(self, ctx):
        from refinery.pipeline.stage import stage_names

        self._add_verbs_from()
        return sorted({*self.commands, *stage_names()})

    def get_command(self, ctx, name):
        from refinery.pipeline.stage import REGISTRY

        if name not in self.commands and name in REGISTRY:   # a built-in or registered stage
            self._add_stage_verb(name)
        if name not in self.commands:
            self._add_verbs_from()
        if name not in self.commands:   # an installed plugin's stage
            self._add_stage_verb(name)
        return self.commands.get(name)

    def format_commands(self, ctx, formatter):
        """The verbs with their summaries; a stage's verb not built yet is summed up from its class's docstring."""
        from refinery.pipeline.stage import stage_doc

        rows = [(name, self.commands[name].get_short_help_str() if name in self.commands
                 else first_sentence(stage_doc(name) or name)) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.UsageError as e:   # a command line spelled wrong: its line ends with its code too
            raise coded(e) from e.__cause__
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 — the one place errors become messages
            if ctx.params.get("debug") and not isinstance(e, (KeyboardInterrupt, BrokenPipeError)):
                raise
            raise click.exceptions.Exit(ended(e)) from None
