"""``billing upstream import``: the providers' usage and cost exports, as downloaded, into the
database (``worker.upstream``); then the leakage alert for the days they cover.

Every file is read and checked before anything is written; all files go in one transaction. Bad
input prints one line naming the file and the JSON path and exits 2.
"""

from __future__ import annotations

from pathlib import Path

import click

from worker.cli import main
from worker.cli.db import fail, ledger_session, settings


@main.group("upstream")
def upstream_group() -> None:
    """The providers' own usage and cost exports (upstream reconciliation)."""


@upstream_group.command("import")
@click.option(
    "--provider",
    type=click.Choice(["openai", "anthropic"]),
    required=True,
    help="openai: Usage API completions and Costs API pages; anthropic: messages usage report.",
)
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
def import_command(provider: str, files: tuple[Path, ...]) -> None:
    """Import FILE... (JSON pages as downloaded); importing a period again changes nothing."""
    from datetime import UTC, datetime, timedelta

    from worker.alerts.outbox import enqueue
    from worker.errors import BillingError
    from worker.pipeline.pricing import effective_book
    from worker.upstream.exports import read_export
    from worker.upstream.leakage import leakage_alerts
    from worker.upstream.query import reconciliation
    from worker.upstream.store import ImportStats, import_export

    exports = []
    for path in files:
        try:
            raw = path.read_bytes()
        except OSError as exc:
            fail("upstream import", f"cannot read {path}: {exc.strerror}")
        try:
            exports.append((str(path), read_export(provider, raw, str(path))))
        except BillingError as exc:
            fail("upstream import", str(exc))
    config = settings("upstream import")
    now = datetime.now(UTC)
    stats = ImportStats()
    with ledger_session("upstream import") as session:
        for source, export in exports:
            import_export(session, export, source, now, stats)
        queued = 0
        if stats.days:
            starts = sorted(start for _, start in stats.days)
            since = datetime.combine(starts[0].date(), datetime.min.time(), UTC)
            until = datetime.combine(starts[-1].date(), datetime.min.time(), UTC)
            book = effective_book(session, config.price_book)
            found = reconciliation(session.connection(), since, until + timedelta(days=1), book)
            days = {(start.date().isoformat(), p) for p, start in stats.days}
            alerts = leakage_alerts(
                found,
                days,
                min_micros=config.upstream_leak_micros,
                min_pct=config.upstream_leak_pct,
            )
            queued = enqueue(session, alerts, now)
    click.echo(f"upstream {provider}: {len(files)} files: {stats}; {queued} leakage alerts queued")
