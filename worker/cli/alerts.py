"""``billing alerts``: the alert outbox — list it, and run pairing, aggregation and delivery once."""

from __future__ import annotations

import click
from sqlalchemy.exc import SQLAlchemyError

from worker.alerts.config import AlertConfig, redact
from worker.alerts.jobs import run_alerts, run_pairing
from worker.alerts.outbox import listing
from worker.cli import main
from worker.cli.db import database_error, echo_json, fail, ledger_session, settings
from worker.consumer.pricing import PriceSource
from worker.core.terminal import printable
from worker.ledger import database


@main.group("alerts")
def alerts_group() -> None:
    """Alerts: one page per kind per window past a threshold, digests, resolved notices."""


@alerts_group.command("list")
@click.option(
    "--status",
    type=click.Choice(["pending", "sending", "delivered", "logged"]),
    default=None,
    help="Only rows in this state.",
)
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON array.")
def list_command(status: str | None, limit: int, as_json: bool) -> None:
    """Outbox rows, newest first: each message's headline (--json has the whole text)."""
    with ledger_session("alerts list", readonly=True) as session:
        rows = listing(session, status=status, limit=limit)
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("no alerts")
    for row in rows:
        tail = f"  last error: {row['last_error']}" if row["last_error"] else ""
        headline = row["text"].split("\n", 1)[0]
        click.echo(
            printable(
                f"#{row['id']}  {row['status']:<9}  attempts {row['attempts']}  {row['kind']}"
                f"  {headline}{tail}"
            )
        )


@alerts_group.command("deliver")
@click.option("--no-send", is_flag=True, help="Aggregate into the outbox but send nothing.")
def deliver_command(no_send: bool) -> None:
    """Pair twins, aggregate closed windows into the outbox, and send what is due, once."""
    current = settings("alerts deliver")
    config = AlertConfig.from_settings(current)
    engine = database.make_engine(current.database_url)
    sessions = database.session_factory(engine)
    prices = PriceSource(database.session_factory(engine, readonly=True), current.price_book)
    try:
        book = prices.current()
        pairs = run_pairing(sessions, current, book=book)
        run = run_alerts(sessions, config, send=not no_send)
    except SQLAlchemyError as exc:
        fail("alerts deliver", database_error(exc))
    finally:
        engine.dispose()
    stats = run.delivery
    click.echo(
        f"pairs: {pairs['match']} match, {pairs['mismatch']} mismatch; queued {run.queued};"
        f" delivered {stats.delivered}, failed {stats.failed}, logged {stats.logged}"
        f" (webhook {redact(config.webhook_url)})"
    )
