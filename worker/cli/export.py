"""``billing export calls``: one row per call for the warehouse (``worker.reports.export``), in CSV,
JSON Lines or Parquet, streamed in constant memory. Bad input and database errors print one line and
exit 2. Heavy modules (SQLAlchemy, the reports, pyarrow) are imported inside the command.
"""

from __future__ import annotations

from pathlib import Path

import click

from worker.cli import main
from worker.cli.db import fail, settings

FORMATS = ("csv", "jsonl", "parquet")


@main.group("export")
def export_group() -> None:
    """Exports for the warehouse: one row per call, CSV, JSON Lines or Parquet."""


@export_group.command("calls")
@click.option("--since", required=True, help="Start, inclusive: RFC 3339 date or timestamp (UTC).")
@click.option("--until", required=True, help="End, exclusive: RFC 3339 date or timestamp (UTC).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="csv", show_default=True)
@click.option("--per-day", is_flag=True, help="One file per UTC day into the directory --out.")
@click.option(
    "--out", required=True, type=click.Path(path_type=Path), help="FILE (DIR with --per-day)."
)
def calls_command(since: str, until: str, fmt: str, per_day: bool, out: Path) -> None:
    """Every call created in [--since, --until): ids, account, model, provider, tier, outcome,
    reason, tokens by kind, unit prices, charge, hold, times."""
    from sqlalchemy.exc import SQLAlchemyError

    from worker.cli.db import check_sqlite_file, database_error
    from worker.core.errors import BillingError
    from worker.reports.export import run_export
    from worker.reports.spec import parse_spec

    try:
        spec = parse_spec(since, until, "")
        url = settings("export calls").database_url
        check_sqlite_file(url)
        written = run_export(url, spec.since, spec.until, fmt, out, per_day=per_day)
    except BillingError as exc:
        fail("export calls", str(exc))
    except SQLAlchemyError as exc:
        fail("export calls", database_error(exc))
    except OSError as exc:
        fail("export calls", f"cannot write {out}: {exc.strerror or exc}")
    click.echo(f"exported {written.calls:,} calls to {out} ({written.files} files)", err=True)
