"""``billing unsettled``: the holds the worker could not settle, and resolving them by hand."""

from __future__ import annotations

import getpass
from datetime import UTC, datetime, timedelta

import click

from worker.cli import main
from worker.cli.db import echo_json, fail, ledger_session, settings
from worker.config import RESOLVE_POLICIES
from worker.core.money import Micros
from worker.core.terminal import printable
from worker.ledger.operations import resolve, resolve_expired
from worker.ledger.queries import unsettled


def _default_who() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "cli"


@main.group("unsettled")
def unsettled_group() -> None:
    """Failures: calls whose hold is kept until a result arrives or someone resolves them."""


@unsettled_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON array.")
@click.option("--all", "include_resolved", is_flag=True, help="Include resolved failures.")
def list_command(as_json: bool, include_resolved: bool) -> None:
    """Open failures, oldest first."""
    with ledger_session("unsettled list", readonly=True) as session:
        rows = unsettled(session, include_resolved=include_resolved)
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("no unsettled failures")
    for row in rows:
        exposure = row["exposure_micros"]
        shown = "unpriced" if exposure is None else f"${Micros(exposure).usd()}"
        resolution = row["resolution"]
        tail = f"  {resolution['action']} by {resolution['resolved_by']}" if resolution else ""
        click.echo(
            printable(
                f"{row['request_id']}  {row['account_id']}  {row['model']}  {row['reason']}"
                f"  held ${Micros(row['reserved_micros']).usd()}  exposure {shown}"
                f"  since {row['detected_at']}{tail}"
            )
        )


@unsettled_group.command("resolve")
@click.argument("request_id")
@click.option("--release", "action", flag_value="release", help="Release the whole hold.")
@click.option(
    "--charge-estimate", "action", flag_value="charge_estimate", help="Charge the estimate."
)
@click.option("--note", required=True, help="Why (kept with the resolution).")
@click.option("--by", "who", default=None, help="Who resolves it (default: the login name).")
def resolve_command(request_id: str, action: str | None, note: str, who: str | None) -> None:
    """Resolve one failure, exactly once."""
    if action is None:
        fail("unsettled resolve", "choose --release or --charge-estimate")
    with ledger_session("unsettled resolve") as session:
        status = resolve(
            session,
            request_id,
            action,
            who=who or _default_who(),
            note=note,
            now=datetime.now(UTC),
        )
    click.echo(printable(f"{request_id}: {status}"))


@unsettled_group.command("expire")
@click.option(
    "--policy",
    type=click.Choice(RESOLVE_POLICIES),
    default=None,
    help="Default: BILLING_RESOLVE_POLICY.",
)
def expire_command(policy: str | None) -> None:
    """Resolve the failures older than the grace period (BILLING_GRACE_SECONDS) by policy."""
    config = settings("unsettled expire")
    with ledger_session("unsettled expire") as session:
        count = resolve_expired(
            session,
            now=datetime.now(UTC),
            grace=timedelta(seconds=config.grace_seconds),
            policy=policy or config.resolve_policy,
        )
    click.echo(f"resolved {count}")
