"""``billing report``: calls, outcomes and money over a window, from a few aggregate queries.

``spec`` parses what to report, ``query`` (with ``drift``) runs the SQL and builds the ``model``, and
one renderer per format writes it (``render_table``, ``render_csv``, ``render_json``,
``render_html``). ``run_report`` is the whole thing against a database URL; see docs/reports.md.
``run_verify`` compares the rollups (``money_daily``, ``calls_daily``) with the ledger, ``run_rebuild``
recomputes them from it (``billing report --verify-ledger`` / ``--rebuild-rollup``). Each of the
three refuses a database that is not at the migrations' head (``ReportError``: run
``billing db upgrade``), since the queries read every table the migrations create.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine

from worker.db.schema import revisions
from worker.ledger.database import make_engine
from worker.reports.model import Report
from worker.reports.query import (
    MoneyDifference,
    Progress,
    Side,
    build_report,
    rebuild_calls,
    rebuild_money,
    verify_calls,
    verify_money,
)
from worker.reports.spec import ReportError, ReportSpec

if TYPE_CHECKING:  # the price book (and its bundled list) only where --upstream asks for it
    from worker.core.prices import PriceBook

__all__ = [
    "MoneyDifference",
    "Report",
    "ReportError",
    "ReportSpec",
    "build_report",
    "exported",
    "run_rebuild",
    "run_report",
    "run_verify",
]

# Per-transaction planner settings for the report on PostgreSQL: the joins and the per-model sorts fit
# in memory instead of spilling, and JIT compilation (tens of ms per query) does not pay off here.
# random_page_cost at the usual SSD / cached value, so the window's failures are looked up by primary
# key rather than by a pass over every call.
PG_SETTINGS = (
    "SET LOCAL work_mem = '256MB'",
    "SET LOCAL jit = off",
    "SET LOCAL random_page_cost = 1.1",
)


@contextmanager
def snapshot(engine: Engine) -> Iterator[Connection]:
    """One read-only transaction: every section of the report sees the same committed state.

    PostgreSQL: REPEATABLE READ, READ ONLY. SQLite: one transaction is already one snapshot.
    """
    postgres = engine.dialect.name == "postgresql"
    options: dict[str, Any] = {"isolation_level": "REPEATABLE READ"} if postgres else {}
    with engine.connect().execution_options(**options) as conn, conn.begin():
        if postgres:
            conn.exec_driver_sql("SET TRANSACTION READ ONLY")
            for statement in PG_SETTINGS:
                conn.exec_driver_sql(statement)
        yield conn


_SNAPSHOT_ID = re.compile(r"[0-9A-F]+-[0-9A-F]+(-[0-9]+)?")


def exported(engine: Engine, conn: Connection) -> Side:
    """A second connection of the same snapshot as ``conn`` (PostgreSQL), opened when entered.

    ``conn`` (in ``snapshot``'s transaction) exports its snapshot now; the returned factory opens a
    connection whose REPEATABLE READ, READ ONLY transaction imports it (``SET TRANSACTION SNAPSHOT``)
    with the same settings. What that connection reads is exactly what ``conn`` reads: the exported
    snapshot stays valid while ``conn``'s transaction is open, which outlasts the second one."""
    snapshot_id = str(conn.exec_driver_sql("SELECT pg_export_snapshot()").scalar_one())
    if not _SNAPSHOT_ID.fullmatch(snapshot_id):  # interpolated below: SET takes no parameters
        raise ValueError(f"unexpected snapshot id {snapshot_id!r}")

    @contextmanager
    def side() -> Iterator[Connection]:
        options = {"isolation_level": "REPEATABLE READ"}
        with engine.connect().execution_options(**options) as other, other.begin():
            other.exec_driver_sql(f"SET TRANSACTION SNAPSHOT '{snapshot_id}'")
            other.exec_driver_sql("SET TRANSACTION READ ONLY")
            for statement in PG_SETTINGS:
                other.exec_driver_sql(statement)
            yield other

    return side


def require_head(conn: Connection) -> None:
    """Raise ``ReportError`` unless the database is at the migrations' head."""
    found = revisions(conn)
    if found.at_head:
        return
    if found.ahead:
        raise ReportError(
            f"database: at migration {found.shown()}, which this release does not know "
            f"(head {found.heads_shown()}): report with the release that migrated it"
        )
    raise ReportError(
        f"database: at migration {found.shown()}, head is {found.heads_shown()} "
        "(run `billing db upgrade`)"
    )


def connect_args(url: str) -> dict[str, Any]:
    return {"connect_args": {"connect_timeout": 5}} if url.startswith("postgres") else {}


def run_report(
    url: str,
    spec: ReportSpec,
    *,
    progress: Progress | None = None,
    upstream_book: Callable[[Connection], PriceBook] | None = None,
) -> Report:
    """The report over ``url``; ``upstream_book`` adds the upstream reconciliation, its model names
    matched by the book it returns for the report's connection (the caller's: the CLI gives the
    effective book, the prices table over the file rows)."""
    engine = make_engine(url, readonly=True, **connect_args(url))
    try:
        with snapshot(engine) as conn:
            require_head(conn)
            # PostgreSQL: drift runs on a second connection of the same snapshot, beside calls.
            side = exported(engine, conn) if engine.dialect.name == "postgresql" else None
            book = None if upstream_book is None else upstream_book(conn)
            return build_report(conn, spec, progress=progress, side=side, upstream_book=book)
    finally:
        engine.dispose()


def run_verify(url: str, spec: ReportSpec | None = None) -> tuple[int, list[MoneyDifference]]:
    """``verify_money`` and ``verify_calls`` in one snapshot: (keys compared, differences) of both
    rollups together; read-only."""
    engine = make_engine(url, readonly=True, **connect_args(url))
    try:
        with snapshot(engine) as conn:
            require_head(conn)
            money, money_differences = verify_money(conn, spec)
            calls, call_differences = verify_calls(conn, spec)
            return money + calls, money_differences + call_differences
    finally:
        engine.dispose()


def run_rebuild(url: str) -> int:
    """``rebuild_money`` and ``rebuild_calls`` in one transaction, committed; returns the two
    rollups' rows."""
    engine = make_engine(url, **connect_args(url))
    try:
        with engine.begin() as conn:
            require_head(conn)
            return rebuild_money(conn) + rebuild_calls(conn)
    finally:
        engine.dispose()
