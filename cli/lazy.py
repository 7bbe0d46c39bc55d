"""Commands imported only when they run (click's lazy group pattern).

A family's command module imports the Temporal SDK, rich, its domain models and the settings;
`keeper --help` and a shell's TAB need none of that, only each command's name and one-line
help. So the `keeper` group knows its subcommands by "module:attribute" and their help line
(`Lazy`), and imports a module only when its command is resolved to run, or to complete
below it (`keeper tpu status X --<TAB>`).

| what is asked | what is imported |
|---|---|
| `keeper --help`, `keeper <TAB>` | nothing beyond cli/main.py: the table gives names and help |
| `keeper tpu <TAB>` | nothing more: the table also names the group's subcommands |
| `keeper tpu status ...`, `keeper tpu --help` | cli/tpu/commands.py |

tests/common/test_cli_startup.py holds the table to the commands it stands for: the same names,
the same help lines, the same group options.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import click
from click.formatting import HelpFormatter
from click.shell_completion import CompletionItem

# click's own limit for a completion's help (Command.get_short_help_str).
COMPLETION_HELP_LIMIT = 45


def short_help(text: str, limit: int = COMPLETION_HELP_LIMIT) -> str:
    """`text` cut as click cuts a command's help to one line of at most `limit` characters."""
    return click.Command(None, help=text).get_short_help_str(limit)


@dataclass(frozen=True)
class Lazy:
    """A subcommand known by where it lives and what it says of itself."""

    # "keeper.cli.tpu.commands:tpu"
    target: str
    # The command's one-line help: its get_short_help_str() without a length limit.
    help: str
    # A group's subcommands and their one-line help, for completion below it.
    commands: Mapping[str, str] = field(default_factory=dict)

    def short_help(self, limit: int = COMPLETION_HELP_LIMIT) -> str:
        return short_help(self.help, limit)

    def load(self) -> click.Command:
        module, _, attribute = self.target.partition(":")
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.target} is not a click command")
        return command


class LazyGroup(click.Group):
    """A group whose `lazy` subcommands are imported when resolved, and listed (help,
    completion) from their table entries until then."""

    def __init__(self, *args: Any, lazy: Mapping[str, Lazy], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        loaded = self.commands.get(cmd_name)
        if loaded is not None:
            return loaded
        entry = self.lazy.get(cmd_name)
        if entry is None:
            return None
        if ctx.resilient_parsing and entry.commands:
            # Completion walks through the group to a word below it: the table lists that
            # word's candidates; the group is imported only if completion goes deeper.
            return _Listing(cmd_name, entry)
        command = entry.load()
        self.commands[cmd_name] = command
        return command

    def format_commands(self, ctx: click.Context, formatter: HelpFormatter) -> None:
        names = [name for name in self.list_commands(ctx) if not self._hidden(name)]
        if not names:
            return
        # click's Group.format_commands, with the table's help for what is not loaded yet.
        limit = formatter.width - 6 - max(map(len, names))
        rows = [(name, self._short_help(name, limit)) for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        results = [
            CompletionItem(name, help=self._short_help(name, COMPLETION_HELP_LIMIT))
            for name in self.list_commands(ctx)
            if name.startswith(incomplete) and not self._hidden(name)
        ]
        # The group's own options (click.Command's part of Group.shell_complete).
        results.extend(click.Command.shell_complete(self, ctx, incomplete))
        return results

    def _hidden(self, name: str) -> bool:
        loaded = self.commands.get(name)
        return loaded is not None and loaded.hidden

    def _short_help(self, name: str, limit: int) -> str:
        loaded = self.commands.get(name)
        return (
            loaded.get_short_help_str(limit)
            if loaded is not None
            else self.lazy[name].short_help(limit)
        )


class _Listing(click.Group):
    """A lazy group as completion sees it: its subcommands' names and help from the table;
    the group itself is imported only to resolve one of them."""

    def __init__(self, name: str, entry: Lazy) -> None:
        super().__init__(name=name, help=entry.help)
        self.entry = entry

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self.entry.commands)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        group = self.entry.load()
        assert isinstance(group, click.Group), f"{self.entry.target} has subcommands"
        return group.get_command(ctx, cmd_name)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        results = [
            CompletionItem(name, help=short_help(text))
            for name, text in sorted(self.entry.commands.items())
            if name.startswith(incomplete)
        ]
        results.extend(click.Command.shell_complete(self, ctx, incomplete))
        return results
