"""Every command and subcommand answers ``--help``, and the listing's one-line help registered in
``worker.cli.COMMANDS`` is the command's own (its docstring's first sentence)."""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from worker.cli import COMMANDS, main


def command_paths(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        yield (*prefix, name)
        if isinstance(command, click.Group):
            yield from command_paths(command, (*prefix, name))


PATHS = list(command_paths(main))


def test_every_registered_command_is_found() -> None:
    assert {path[0] for path in PATHS} == set(COMMANDS)
    assert len(PATHS) > len(COMMANDS)  # the groups' subcommands too


@pytest.mark.parametrize("path", PATHS, ids=" ".join)
def test_help_of(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(main, [*path, "--help"], prog_name="billing")
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"Usage: billing {' '.join(path)} ")


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_registered_help_is_the_commands_own(name: str) -> None:
    command = main.get_command(click.Context(main), name)
    assert command is not None
    assert COMMANDS[name][1] == command.get_short_help_str(limit=10**6)


def test_listing_shows_every_command() -> None:
    result = CliRunner().invoke(main, ["--help"], prog_name="billing")
    assert result.exit_code == 0
    listed = [line.split()[0] for line in result.output.split("Commands:\n", 1)[1].splitlines()]
    assert listed == sorted(COMMANDS)
