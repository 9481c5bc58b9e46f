"""Readers never hold a writer out: read-only work runs on ``database.read_only`` engines.

On SQLite a reader used to begin ``IMMEDIATE`` like a writer, so a report held the worker's
transactions out for as long as it ran (and past the busy timeout they failed). The SQLite busy
timeout is lowered in these tests so that a reader taking the write lock fails them in seconds; the
assertions themselves are about order (the writer committed while the reader was still open), not
about time.
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, func, insert, select
from sqlalchemy.exc import DBAPIError

from ledger.factories import make_meta, settled
from models import PriceRow
from models.reservations import Reservation
from worker.cli import main
from worker.consumer.pricing import PriceSource
from worker.db import engine as db_engine
from worker.ledger.balances import balance
from worker.ledger.database import make_engine, session_factory, upgrade
from worker.ledger.operations import apply_result, hold
from worker.reports import ReportSpec, build_report, snapshot

SPEC = ReportSpec(datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC), ("day",))
NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
GRACE = timedelta(hours=1)


@pytest.fixture
def short_busy_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(db_engine, "SQLITE_BUSY_TIMEOUT_MS", 2_000)


@pytest.fixture
def sqlite_file(tmp_path: Path, short_busy_timeout: None) -> str:
    url = f"sqlite:///{tmp_path / 'billing.db'}"
    upgrade(url)
    engine = make_engine(url)
    with session_factory(engine)() as session, session.begin():
        hold(session, make_meta("req-ok", reserved=10_000, created_at=NOW), now=NOW)
        apply_result(session, settled("req-ok", charge=4_000, created_at=NOW), now=NOW, grace=GRACE)
    engine.dispose()
    return url


def reservations(conn) -> int:
    return conn.execute(select(func.count()).select_from(Reservation)).scalar_one()


def test_a_writer_commits_while_a_report_is_open(sqlite_file: str) -> None:
    writer = make_engine(sqlite_file)
    reader = make_engine(sqlite_file, readonly=True)
    reading, writer_finished = threading.Event(), threading.Event()
    committed: list[str] = []
    seen: dict[str, object] = {}

    def report() -> None:
        with snapshot(reader) as conn:
            seen["report"] = build_report(conn, SPEC)  # the report's own reads, in its transaction
            seen["before"] = reservations(conn)
            reading.set()
            writer_finished.wait(timeout=60)
            # Still inside the report's transaction: had the writer been waiting for it, it
            # would not have committed yet.
            seen["committed while open"] = list(committed)
            seen["after"] = reservations(conn)

    thread = threading.Thread(target=report)
    thread.start()
    try:
        assert reading.wait(timeout=60)
        with session_factory(writer)() as session, session.begin():
            hold(session, make_meta("req-new", reserved=2_000, created_at=NOW), now=NOW)
        committed.append("req-new")
    finally:
        writer_finished.set()
        thread.join()
        writer.dispose()
        reader.dispose()
    assert seen["committed while open"] == ["req-new"]
    # The report kept its snapshot: the hold committed beside it is not in what it read.
    assert seen["before"] == seen["after"] == 1


READ_COMMANDS = [
    ["balance", "acct-1", "--json"],
    ["show", "req-ok", "--json"],
    ["unsettled", "list", "--json"],
    ["alerts", "list", "--json"],
    ["prices", "list", "--json"],
    ["report", "--format", "json", "--since", "2026-11-01", "--until", "2026-12-01"],
    ["doctor", "--only", "migrations"],
]


@pytest.mark.parametrize("command", READ_COMMANDS, ids=lambda argv: " ".join(argv[:2]))
def test_read_commands_run_beside_an_open_write_transaction(
    sqlite_file: str, command: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that took the write lock would wait for this writer (and fail after the busy
    timeout); a read-only one runs at once and sees only what was committed."""
    monkeypatch.setenv("DATABASE_URL", sqlite_file)
    writer = make_engine(sqlite_file)
    try:
        with session_factory(writer)() as session, session.begin():
            hold(session, make_meta("req-open", reserved=7_000, created_at=NOW), now=NOW)
            session.flush()
            result = CliRunner().invoke(main, command)
            assert result.exit_code == 0, result.output
            assert "req-open" not in result.output
            if command[0] == "balance":
                assert json.loads(result.output)["held_micros"] == 0
    finally:
        writer.dispose()


def test_the_price_source_reads_beside_an_open_write_transaction(sqlite_file: str) -> None:
    """The worker's price book is re-read between batches, while other processes write."""
    writer = make_engine(sqlite_file)
    try:
        prices = PriceSource(session_factory(writer, readonly=True), refresh_seconds=0)
        with session_factory(writer)() as session, session.begin():
            hold(session, make_meta("req-open", reserved=7_000, created_at=NOW), now=NOW)
            session.flush()
            assert prices.current().price_for("gpt-4o-mini", NOW) is not None
    finally:
        writer.dispose()


def test_a_read_only_session_refuses_writes(engine: Engine) -> None:
    """Both engines: SQLite through ``query_only``, PostgreSQL through READ ONLY transactions."""
    row = {
        "model": "ro-test",
        "effective_from": NOW,
        "input": Decimal(1),
        "cached_input": Decimal(1),
        "output": Decimal(1),
        "created_at": NOW,
    }
    reader = session_factory(engine, readonly=True)
    with pytest.raises(DBAPIError), reader() as session, session.begin():
        session.execute(insert(PriceRow.__table__).values(**row))


def test_a_connection_writes_again_after_it_served_a_reader(tmp_path: Path) -> None:
    """query_only belongs to the pooled connection: a writer handed the reader's connection next
    gets it back writable."""
    url = f"sqlite:///{tmp_path / 'billing.db'}"
    upgrade(url)
    engine = make_engine(url, pool_size=1, max_overflow=0)
    try:
        with session_factory(engine, readonly=True)() as session, session.begin():
            assert balance(session, "acct-1").held == 0
        with session_factory(engine)() as session, session.begin():
            hold(session, make_meta("req-after", reserved=1_000, created_at=NOW), now=NOW)
        with session_factory(engine, readonly=True)() as session, session.begin():
            assert balance(session, "acct-1").held == 1_000
    finally:
        engine.dispose()
