"""``billing report``: calls, outcomes and money over a window, as a table, CSV, JSON or HTML.

A thin shell over ``worker.reports``: parse, run the queries in one snapshot with a progress line
per section on stderr, render, write. Bad input and database errors print one line and exit 2.

``--verify-ledger`` instead compares the rollups with the ledger — the money (``money_daily``) per
(day, account, model), the calls (``calls_daily``) per (day, account, model, state) — over the
window's whole days, or everything without one, and exits 1 on any difference; ``--rebuild-rollup``
recomputes both from the ledger (after an upgrade from a release that did not keep them, or to
repair what ``--verify-ledger`` found).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click
from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError

from worker.cli import main
from worker.cli.db import check_sqlite_file, database_error, fail, settings, write_output
from worker.core.errors import BillingError
from worker.core.terminal import printable
from worker.reports import ReportError, run_rebuild, run_report, run_verify
from worker.reports.render_csv import SECTIONS, render_csv, render_sections
from worker.reports.render_html import render_html
from worker.reports.render_json import render_json
from worker.reports.render_table import render_table
from worker.reports.spec import ReportSpec, parse_spec

if TYPE_CHECKING:  # the price book (and its bundled list) is loaded for --upstream alone
    from worker.core.prices import PriceBook

RENDERERS = {"table": render_table, "csv": render_csv, "json": render_json, "html": render_html}


@contextmanager
def _progress_display() -> Iterator[object]:
    """A spinner per section on a terminal's stderr; off a terminal nothing at all (a disabled
    ``rich`` progress still writes a line end when it stops, before any error line)."""
    if not sys.stderr.isatty():

        @contextmanager
        def quiet(_name: str) -> Iterator[None]:
            yield

        yield quiet
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    columns = (SpinnerColumn(), TextColumn("report: {task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:

        @contextmanager
        def section(name: str) -> Iterator[None]:
            task = bar.add_task(name, total=1)
            try:
                yield
            finally:
                bar.update(task, completed=1, description=f"{name} done")

        yield section


@main.command("report")
@click.option("--since", help="Start, inclusive: RFC 3339 date or timestamp (UTC).")
@click.option("--until", help="End, exclusive: RFC 3339 date or timestamp (UTC).")
@click.option(
    "--by", default="day", show_default=True, help="Group by day,account,model ('' = totals)."
)
@click.option(
    "--format", "fmt", default="table", show_default=True, help="table, csv, json or html."
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    help="Write to FILE; with --format csv, to DIR: one <section>.csv per section.",
)
@click.option(
    "--section",
    "csv_section",
    type=click.Choice(SECTIONS),
    default="groups",
    show_default=True,
    help="--format csv to standard output: the section written.",
)
@click.option(
    "--verify-ledger",
    is_flag=True,
    help="Compare the money and call rollups with the ledger (window's whole days, or all); "
    "exit 1 if unequal.",
)
@click.option(
    "--rebuild-rollup",
    is_flag=True,
    help="Recompute the money and call rollups from the ledger, then exit.",
)
@click.option(
    "--upstream",
    is_flag=True,
    help="Add the providers' imported exports against the ledger (`billing upstream import`).",
)
def report_command(
    since: str | None,
    until: str | None,
    by: str,
    fmt: str,
    out: Path | None,
    csv_section: str,
    verify_ledger: bool,
    rebuild_rollup: bool,
    upstream: bool,
) -> None:
    """Calls, settled/unsettled/void, money held/charged/released and the tie-out, for a window."""
    if verify_ledger or rebuild_rollup:
        _rollup(since, until, rebuild=rebuild_rollup)
        return
    try:
        spec = parse_spec(since, until, by)
        if fmt not in RENDERERS:
            raise ReportError(f"unknown --format {fmt!r}: use {', '.join(RENDERERS)}")
        config = settings("report")
        url = config.database_url
        check_sqlite_file(url)
        with _progress_display() as section:
            found = run_report(
                url,
                spec,
                progress=section,  # type: ignore[arg-type]
                upstream_book=_effective_book(config.price_book) if upstream else None,
            )
    except ReportError as exc:
        fail("report", str(exc))
    except SQLAlchemyError as exc:
        fail("report", database_error(exc))
    except BillingError as exc:  # the price book's file rows, read for --upstream
        fail("report", str(exc))
    if fmt == "csv" and out is not None:
        _write_sections(found, out)
        return
    try:
        text = render_csv(found, csv_section) if fmt == "csv" else RENDERERS[fmt](found)
    except ReportError as exc:  # a section the report does not have (upstream without --upstream)
        fail("report", str(exc))
    write_output("report", text, out, "report")


def _write_sections(found: object, out: Path) -> None:
    """``--format csv --out DIR``: one tidy file per section (``render_csv``)."""
    files = render_sections(found)  # type: ignore[arg-type]
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (out / name).write_text(text, encoding="utf-8")
    except OSError as exc:
        fail("report", f"cannot write {out}: {exc.strerror or exc}")
    click.echo(f"report written to {out}: {', '.join(files)}", err=True)


def _rollup(since: str | None, until: str | None, *, rebuild: bool) -> None:
    try:
        url = settings("report").database_url
        check_sqlite_file(url)
        if rebuild:
            if since or until:
                raise ReportError("--rebuild-rollup recomputes every day: no --since/--until")
            rows = run_rebuild(url)
            click.echo(f"money and call rollups rebuilt from the ledger: {rows} rows")
            return
        spec: ReportSpec | None = None
        if since or until:
            spec = parse_spec(since, until, "")
        compared, differences = run_verify(url, spec)
    except ReportError as exc:
        fail("report", str(exc))
    except SQLAlchemyError as exc:
        fail("report", database_error(exc))
    if not differences:
        click.echo(f"money and call rollups equal the ledger: {compared} rows")
        return
    for found in differences:
        key = printable(" ".join(found.key))
        click.echo(f"differs: {found.table} {key}: rollup {found.rollup}, ledger {found.ledger}")
    click.echo(
        f"rollups differ from the ledger on {len(differences)} of {compared} rows "
        "(`billing report --rebuild-rollup` recomputes it)",
        err=True,
    )
    sys.exit(1)


def _effective_book(price_book: str | None) -> Callable[[Connection], PriceBook]:
    """The worker's price book (the prices table over the file rows), read on the report's own
    connection: ``--upstream`` matches model names by it."""

    def book(conn: Connection) -> PriceBook:
        from sqlalchemy.orm import Session

        from worker.consumer.pricing import effective_book

        return effective_book(Session(bind=conn), price_book)

    return book
