"""``billing statement ACCOUNT --month YYYY-MM``: an account's month, tying out to the micro-dollar
(``worker.reports.statement_query``). Bad input and database errors print one line and exit 2.

Heavy modules (SQLAlchemy, the reports) are imported inside the command, when it runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from worker.cli import main
from worker.cli.db import fail, settings, write_output

FORMATS = ("table", "csv", "json", "html")


@main.command("statement")
@click.argument("account")
@click.option("--month", required=True, help="YYYY-MM (UTC); the month in progress runs to now.")
@click.option("--format", "fmt", default="table", show_default=True, help=", ".join(FORMATS))
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write to FILE.")
def statement_command(account: str, month: str, fmt: str, out: Path | None) -> None:
    """Opening balance, credits, charges by model and day, releases, open failures, closing."""
    from sqlalchemy.exc import SQLAlchemyError

    from worker.cli.db import check_sqlite_file, database_error
    from worker.reports.spec import ReportError
    from worker.reports.statement_query import parse_month, run_statement
    from worker.reports.statement_render import RENDERERS

    try:
        if fmt not in RENDERERS:
            raise ReportError(f"unknown --format {fmt!r}: use {', '.join(FORMATS)}")
        try:
            parse_month(month)
        except ValueError:  # past datetime's range: 9999-12 ends in the year 10000
            raise ReportError(f"--month {month!r} is out of range: the last is 9999-11") from None
        url = settings("statement").database_url
        check_sqlite_file(url)
        found = run_statement(url, account, month)
    except ReportError as exc:
        fail("statement", str(exc))
    except SQLAlchemyError as exc:
        fail("statement", database_error(exc))
    write_output("statement", RENDERERS[fmt](found), out, "statement")
    if not found.ties_out:
        sys.exit(1)
