"""``billing doctor``: one line per check, one line of advice per problem; exit 1 on any problem."""

from __future__ import annotations

import os
import sys

import click

from worker.cli import main
from worker.core.terminal import printable
from worker.service import doctor

MARKS = {"ok": "ok", "problem": "PROBLEM", "skip": "skip"}


@main.command("doctor")
@click.option(
    "--only",
    multiple=True,
    type=click.Choice(doctor.CHECK_NAMES),
    help="Run only this check and what it needs (repeatable); e.g. `--only broker` for beat.",
)
@click.option(
    "--max-lag", default=doctor.Limits().max_lag, show_default=True, type=click.IntRange(0)
)
@click.option(
    "--max-dead", default=doctor.Limits().max_dead, show_default=True, type=click.IntRange(0)
)
def doctor_command(only: tuple[str, ...], max_lag: int, max_dead: int) -> None:
    """Check configuration, Redis, the broker, the database and its migrations, the vocabularies,
    the notification backlog and the dead letters."""
    limits = doctor.Limits(max_lag=max_lag, max_dead=max_dead)
    healthy = True
    width = max(len(name) for name in doctor.CHECK_NAMES) + 8
    for check in doctor.run(os.environ, only, limits):
        healthy = healthy and check.ok
        click.echo(printable(f"{MARKS[check.status]:<8} {check.name:<{width}} {check.detail}"))
        if check.advice:
            click.echo(printable(f"{'':<8} {'':<{width}} advice: {check.advice}"))
    sys.exit(0 if healthy else 1)
