"""A click group that imports a command's module only when that command is named.

``billing --help`` lists every command from the one-line help registered with it, importing none of
them; ``billing show …`` imports ``worker.cli.show`` alone. The module registers its command on the
group when imported (``@main.command`` / ``@main.group``), as an eagerly loaded module would.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import click


class LazyGroup(click.Group):
    """``lazy``: command name -> (module that registers it, its one-line help as listed)."""

    def __init__(self, *args: Any, lazy: Mapping[str, tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(self.lazy))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            module = self.lazy[cmd_name][0]
            importlib.import_module(module)
            if cmd_name not in self.commands:
                raise RuntimeError(f"{module} does not register the command {cmd_name!r}")
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The listing, as click writes it, but from the registered help: nothing is imported."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            if name in self.lazy:
                stand_in = click.Command(name, help=self.lazy[name][1])  # shortened as click does
                rows.append((name, stand_in.get_short_help_str(limit)))
            elif not self.commands[name].hidden:
                rows.append((name, self.commands[name].get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)
