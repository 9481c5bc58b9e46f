"""``billing unsettled``: the holds the worker could not settle, and resolving them by hand.

``list`` and ``resolve`` take the same filters (``--account --reason --model --since --until
--limit``: one query, ``worker.ledger.queries.unsettled``), so what ``list`` shows is what
``resolve`` with the same options resolves; ``resolve --dry-run`` shows it without writing.
Resolving is idempotent: a failure already resolved by the same action is reported as ``already
…`` and exits 0, as a repeated credit does; by another action it is an error (exit 2). Heavy
modules (SQLAlchemy, the ledger) are imported inside the commands, when they run.
"""

from __future__ import annotations

import getpass
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from worker.cli import main
from worker.cli.db import echo_json, fail, ledger_session, settings
from worker.config import RESOLVE_POLICIES
from worker.core.money import Micros
from worker.core.result import Reason
from worker.core.terminal import printable

REASONS = tuple(str(reason) for reason in Reason)


def _default_who() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "cli"


def _filter_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The filters ``list`` and ``resolve`` share, outermost option first."""
    for option in reversed(
        (
            click.option("--account", help="Only this account."),
            click.option("--reason", type=click.Choice(REASONS), help="Only this reason."),
            click.option("--model", help="Only this model (as the call named it)."),
            click.option("--since", help="Detected at or after: RFC 3339 date or timestamp."),
            click.option("--until", help="Detected before: RFC 3339 date or timestamp."),
            click.option(
                "--limit", type=click.IntRange(min=1), help="At most this many, oldest first."
            ),
        )
    ):
        command = option(command)
    return command


def _filters(command: str, given: dict[str, Any]) -> dict[str, Any]:
    """The filter options as ``queries.unsettled`` keywords; a bad time is one line, exit 2."""
    found = dict(given)
    for name in ("since", "until"):
        if found[name] is None:
            continue
        # Only when a time is given: ``worker.reports`` brings the report's modules with it.
        from worker.reports.spec import ReportError, parse_time

        try:
            found[name] = parse_time(found[name], name)
        except ReportError as exc:
            fail(command, str(exc))
    if found["since"] and found["until"] and found["since"] >= found["until"]:
        fail(command, "--since must be before --until")
    return found


def _line(row: dict[str, Any]) -> str:
    exposure = row["exposure_micros"]
    shown = "unpriced" if exposure is None else f"${Micros(exposure).usd()}"
    resolution = row["resolution"]
    tail = f"  {resolution['action']} by {resolution['resolved_by']}" if resolution else ""
    return printable(
        f"{row['request_id']}  {row['account_id']}  {row['model']}  {row['reason']}"
        f"  held ${Micros(row['reserved_micros']).usd()}  exposure {shown}"
        f"  since {row['detected_at']}{tail}"
    )


@main.group("unsettled")
def unsettled_group() -> None:
    """Failures: calls whose hold is kept until a result arrives or someone resolves them."""


@unsettled_group.command("list")
@_filter_options
@click.option("--json", "as_json", is_flag=True, help="One JSON array.")
@click.option("--all", "include_resolved", is_flag=True, help="Include resolved failures.")
def list_command(as_json: bool, include_resolved: bool, **given: Any) -> None:
    """Open failures, oldest first."""
    from worker.ledger.queries import unsettled

    filters = _filters("unsettled list", given)
    with ledger_session("unsettled list", readonly=True) as session:
        rows = unsettled(session, include_resolved=include_resolved, **filters)
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("no unsettled failures")
    for row in rows:
        click.echo(_line(row))


@unsettled_group.command("resolve")
@click.argument("request_id", required=False)
@_filter_options
@click.option("--release", "action", flag_value="release", help="Release the whole hold.")
@click.option(
    "--charge-estimate", "action", flag_value="charge_estimate", help="Charge the estimate."
)
@click.option("--note", required=True, help="Why (kept with the resolution).")
@click.option("--by", "who", default=None, help="Who resolves it (default: the login name).")
@click.option("--dry-run", is_flag=True, help="Show what would be resolved; write nothing.")
def resolve_command(
    request_id: str | None,
    action: str | None,
    note: str,
    who: str | None,
    dry_run: bool,
    **given: Any,
) -> None:
    """Resolve REQUEST_ID, or every open failure the filters select, exactly once."""
    from worker.ledger.operations import resolve
    from worker.ledger.queries import unsettled

    command = "unsettled resolve"
    if action is None:
        fail(command, "choose --release or --charge-estimate")
    filters = _filters(command, given)
    chosen = any(value is not None for value in filters.values())
    if request_id is not None and chosen:
        fail(command, "give REQUEST_ID or filters (--account, --reason, ...), not both")
    if request_id is None and not chosen:
        fail(command, "give REQUEST_ID or at least one filter (--account, --reason, ...)")
    now = datetime.now(UTC)

    def resolve_one(session: Any, rid: str) -> None:
        """Resolve one call (a repeat of the same resolution is not an error); say how it ended."""
        who_ = who or _default_who()
        status = resolve(session, rid, action, who=who_, note=note, now=now, repeat_ok=True)
        click.echo(printable(f"{rid}: {status}"))

    if request_id is not None:
        if dry_run:
            fail(command, "--dry-run goes with filters; `billing show REQUEST_ID` shows one call")
        with ledger_session(command) as session:
            resolve_one(session, request_id)
        return
    with ledger_session(command, readonly=dry_run) as session:
        rows = unsettled(session, **filters)
        for row in rows:
            if dry_run:
                click.echo(_line(row))
            else:
                resolve_one(session, row["request_id"])
    held = Micros(sum(row["reserved_micros"] for row in rows))
    verb = "would resolve" if dry_run else "resolved"
    click.echo(f"{verb} {len(rows)} by {action}, holding ${held.usd()}", err=True)


@unsettled_group.command("expire")
@click.option(
    "--policy",
    type=click.Choice(RESOLVE_POLICIES),
    default=None,
    help="Default: BILLING_RESOLVE_POLICY.",
)
def expire_command(policy: str | None) -> None:
    """Resolve the failures older than the grace period (BILLING_GRACE_SECONDS) by policy."""
    from worker.ledger.operations import resolve_expired

    config = settings("unsettled expire")
    with ledger_session("unsettled expire") as session:
        count = resolve_expired(
            session,
            now=datetime.now(UTC),
            grace=timedelta(seconds=config.grace_seconds),
            policy=policy or config.resolve_policy,
        )
    click.echo(f"resolved {count}")
