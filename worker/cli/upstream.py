"""``billing upstream import``: the providers' usage and cost exports, as downloaded, into the
database (``worker.upstream``); ``billing upstream pull``: the same exports fetched from the
providers' admin APIs (``worker.upstream.pull``). The alert job then raises ``upstream_leakage``
for the days they cover (``worker.alerts.upstream_leakage``).

Every file is read and checked before anything is written; all files go in one transaction. Bad
input prints one line naming the file and the JSON path and exits 2.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

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
    help="openai: Usage API completions and Costs API pages; anthropic: messages usage report"
    " and cost report pages.",
)
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
def import_command(provider: str, files: tuple[Path, ...]) -> None:
    """Import FILE... (JSON pages as downloaded); importing a period again changes nothing."""

    from worker.core.errors import BillingError
    from worker.upstream.exports import read_export

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
    stats = _store("upstream import", exports)
    click.echo(
        f"upstream {provider}: {len(files)} files: {stats}; a day leaking past the thresholds is"
        " alerted by the next alert run (upstream_leakage)"
    )


@upstream_group.command("pull")
@click.option("--provider", type=click.Choice(["openai", "anthropic"]), required=True)
@click.option("--since", required=True, type=click.DateTime(["%Y-%m-%d"]), help="UTC day, first.")
@click.option(
    "--until", required=True, type=click.DateTime(["%Y-%m-%d"]), help="UTC day, excluded."
)
def pull_command(provider: str, since: datetime, until: datetime) -> None:
    """Fetch the usage and cost exports of [SINCE, UNTIL) and import them (as ``import`` does).

    The admin key is read from OPENAI_ADMIN_KEY or ANTHROPIC_ADMIN_KEY; BILLING_UPSTREAM_OPENAI_URL
    / BILLING_UPSTREAM_ANTHROPIC_URL replace the API's address (a proxy). Every page is fetched
    before anything is written; a pull of a period again changes nothing."""
    import os
    from datetime import UTC

    from worker.core.errors import BillingError
    from worker.upstream import pull
    from worker.upstream.exports import read_export

    start, end = since.replace(tzinfo=UTC), until.replace(tzinfo=UTC)
    if end <= start:
        fail("upstream pull", "--until must be after --since")
    key = os.environ.get(pull.KEY_ENV[provider], "").strip()
    if not key:
        fail("upstream pull", f"set {pull.KEY_ENV[provider]} to the {provider} admin API key")
    base = os.environ.get(pull.BASE_ENV[provider], "").strip() or pull.DEFAULT_BASE[provider]
    exports = []
    for kind in ("usage", "cost"):
        source = f"pull {provider} {kind} {start.date()}..{end.date()}"
        try:
            pages = pull.pull(provider, kind, start, end, key, base)
            exports.append((source, read_export(provider, b"[" + b",".join(pages) + b"]", source)))
        except BillingError as exc:
            fail("upstream pull", str(exc))
    stats = _store("upstream pull", exports)
    click.echo(f"upstream {provider} pull {start.date()}..{end.date()}: {stats}")


def _store(command: str, exports: list[tuple[str, Any]]) -> Any:
    """Every export read, ``(source, Export)``, imported in one ledger transaction; the counts."""
    from datetime import UTC

    from worker.upstream.store import ImportStats, import_export

    stats = ImportStats()
    with ledger_session(command) as session:
        now = datetime.now(UTC)
        for source, export in exports:
            import_export(session, export, source, now, stats)
    return stats
