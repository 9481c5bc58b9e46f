"""On PostgreSQL the report's drift section runs on a second connection beside calls: that connection
reads exactly the report's snapshot, and the report it builds equals the one built on one connection.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import sessionmaker

from reports.book import SINCE, UNTIL, post, scenario
from worker.ledger.database import session_factory
from worker.reports import ReportSpec, exported, run_report, snapshot
from worker.reports.query import build_report

pytestmark = pytest.mark.postgres


def test_the_second_connection_reads_the_reports_snapshot(pg_engine: Engine) -> None:
    name = f"report_snapshot_{uuid.uuid4().hex[:10]}"
    with pg_engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE {name} (x int)")
    try:
        with snapshot(pg_engine) as conn:
            side = exported(pg_engine, conn)  # the report's snapshot is taken here
            with pg_engine.begin() as writer:  # committed after it: in neither connection's view
                writer.exec_driver_sql(f"INSERT INTO {name} VALUES (1)")
            with side() as other:
                assert other.exec_driver_sql(f"SELECT count(*) FROM {name}").scalar_one() == 0
                assert other.exec_driver_sql("SHOW transaction_read_only").scalar_one() == "on"
                assert other.exec_driver_sql("SHOW work_mem").scalar_one() == "256MB"
                assert other.exec_driver_sql("SHOW jit").scalar_one() == "off"
            assert conn.exec_driver_sql(f"SELECT count(*) FROM {name}").scalar_one() == 0
        with pg_engine.connect() as fresh:
            assert fresh.exec_driver_sql(f"SELECT count(*) FROM {name}").scalar_one() == 1
    finally:
        with pg_engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE {name}")


@pytest.mark.parametrize("by", [("day",), ("account", "model"), ()])
def test_the_report_beside_equals_the_report_on_one_connection(
    pg_engine: Engine, pg_url: str, by: tuple[str, ...]
) -> None:
    """Committed calls (a second connection cannot see a test's rolled-back transaction)."""
    factory: sessionmaker = session_factory(pg_engine)
    with factory() as session, session.begin():
        post(session, scenario(uuid.uuid4().hex[:8]))
    for spec in (
        ReportSpec(SINCE, UNTIL, by),
        ReportSpec(datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC), by),
    ):
        beside = run_report(pg_url, spec)  # drift on the second connection
        with snapshot(pg_engine) as conn:
            alone = build_report(conn, spec, now=beside.generated_at)
        assert beside == alone
        assert beside.drift  # the scenario's streamed reported calls have a drift
