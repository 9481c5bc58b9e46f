"""``billing upstream import``: the providers' usage and cost exports, as downloaded, into the
database (``worker.upstream``); the alert job then raises ``upstream_leakage`` for the days they
cover (``worker.alerts.upstream_leakage``).

Every file is read and checked before anything is written; all files go in one transaction. Bad
input prints one line naming the file and the JSON path and exits 2.
"""

from __future__ import annotations

from pathlib import Path

import click

from worker.cli import main
from worker.cli.db import fail, ledger_session


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
    from datetime import UTC, datetime

    from worker.core.errors import BillingError
    from worker.upstream.exports import read_export
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
    stats = ImportStats()
    with ledger_session("upstream import") as session:
        now = datetime.now(UTC)
        for source, export in exports:
            import_export(session, export, source, now, stats)
    click.echo(
        f"upstream {provider}: {len(files)} files: {stats}; a day leaking past the thresholds is"
        " alerted by the next alert run (upstream_leakage)"
    )
