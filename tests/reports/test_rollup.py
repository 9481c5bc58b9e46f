"""The report's money from ``money_daily`` against the ledger join; partial days; the backfill; CLI."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import create_pg_database, drop_pg_database
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from models import CallsDaily, MoneyDaily
from reports.book import SINCE, UNTIL, _tally, key_of, post, scenario
from reports.test_query import GROUPINGS, _only
from worker.cli import main
from worker.ledger.database import downgrade, make_engine, session_factory, upgrade
from worker.reports import run_verify
from worker.reports.query import (
    _money_rows,
    build_report,
    grain,
    ledger_money_statement,
    money_statement,
    rollup_money_statement,
    verify_money,
    whole_days,
)
from worker.reports.spec import ReportSpec


@pytest.fixture
def book(session: Session) -> list:
    calls = scenario(uuid.uuid4().hex[:8])
    post(session, calls)
    return calls


def _ours(rows: dict, calls: list, by: tuple[str, ...]) -> dict:
    accounts = {c.account for c in calls}
    return {key: money for key, money in rows.items() if key[by.index("account")] in accounts}


@pytest.mark.parametrize("by", GROUPINGS, ids=lambda by: ",".join(by) or "totals")
def test_whole_days_read_the_rollup_and_it_equals_the_ledger(
    session: Session, book: list, by: tuple[str, ...]
) -> None:
    grouped = by if "account" in by else (*by, "account")
    spec = ReportSpec(SINCE, UNTIL, grouped)
    assert whole_days(spec)
    conn = session.connection()
    keys = grain(spec)
    statement = money_statement(spec, conn.dialect.name)
    assert "money_daily" in str(statement) and "entries" not in str(statement)
    rollup = _ours(_money_rows(conn, statement, keys), book, keys)
    ledger = _ours(
        _money_rows(conn, ledger_money_statement(keys, conn.dialect.name, spec), keys), book, keys
    )
    assert rollup == ledger and rollup


@pytest.mark.parametrize(
    ("since", "until"),
    [
        (SINCE + timedelta(hours=4), UNTIL),  # cuts the first day after two of its calls
        (SINCE, UNTIL - timedelta(hours=5, minutes=30)),  # cuts the last day
        (SINCE + timedelta(hours=3), SINCE + timedelta(hours=3, microseconds=1)),  # one instant
    ],
)
def test_a_window_with_a_time_of_day_is_exact_from_the_ledger(
    session: Session, book: list, since, until
) -> None:
    spec = ReportSpec(since, until, ("day", "account", "model"))
    assert not whole_days(spec)
    assert "entries" in str(money_statement(spec, session.get_bind().dialect.name))
    report = build_report(session.connection(), spec)
    got = _only(report.groups, book, spec.by)
    want: dict = {}
    for call in book:
        if since <= call.created_at < until:
            key = key_of(call, spec.by)
            want[key] = want[key] + _tally(call) if key in want else _tally(call)
    assert set(got) == set(want)
    for key, tally in want.items():
        assert dict(got[key].money) == dict(tally.money), key
        assert dict(got[key].counts) == dict(tally.counts), key
        assert got[key].ties_out


def test_verify_finds_a_wrong_row(session: Session, book: list) -> None:
    conn = session.connection()
    spec = ReportSpec(SINCE, UNTIL, ())
    compared, differences = verify_money(conn, spec)
    assert compared >= 4 and differences == []
    account = book[0].account
    conn.execute(
        update(MoneyDaily.__table__)
        .where(MoneyDaily.account_id == account)
        .values(charged=MoneyDaily.charged + 1)
    )
    _, differences = verify_money(conn, spec)
    assert {d.key[1] for d in differences} == {account}
    assert all(d.rollup["charged"] == d.ledger["charged"] + 1 for d in differences)


# --- the migration's backfill ---------------------------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def fresh_url(
    request: pytest.FixtureRequest, tmp_path: Path, pg_database_name: str
) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'backfill.db'}"
        return
    name = f"{pg_database_name}_backfill"
    yield create_pg_database(name)
    drop_pg_database(name)


def test_upgrade_from_0003_backfills_the_rollup_from_the_ledger(fresh_url: str) -> None:
    upgrade(fresh_url)
    engine = make_engine(fresh_url)
    try:
        calls = scenario(uuid.uuid4().hex[:8])
        with session_factory(engine)() as session, session.begin():
            post(session, calls)
        with engine.connect() as conn:
            written = _money_rows(
                conn,
                rollup_money_statement(("day", "account", "model")),
                ("day", "account", "model"),
            )
        assert written
        # Back to 0003 (the rollup is dropped, the ledger stays), then up again: the backfill.
        downgrade(fresh_url, "0003")
        upgrade(fresh_url)
        with engine.connect() as conn:
            backfilled = _money_rows(
                conn,
                rollup_money_statement(("day", "account", "model")),
                ("day", "account", "model"),
            )
            compared, differences = verify_money(conn)
        assert backfilled == written
        assert differences == [] and compared == len(written)
    finally:
        engine.dispose()


# --- billing report --verify-ledger / --rebuild-rollup --------------------------------------------


def test_cli_verifies_and_rebuilds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'billing.db'}"
    upgrade(url)
    engine = make_engine(url)
    with session_factory(engine)() as session, session.begin():
        post(session, scenario(uuid.uuid4().hex[:8]))
    monkeypatch.setenv("DATABASE_URL", url)
    runner = CliRunner()
    result = runner.invoke(main, ["report", "--verify-ledger"])
    assert result.exit_code == 0, result.output
    assert "equal the ledger" in result.output
    window = ["--since", "2033-05-01", "--until", "2033-05-03"]
    assert runner.invoke(main, ["report", "--verify-ledger", *window]).exit_code == 0
    partial = ["--since", "2033-05-01T01:00:00Z", "--until", "2033-05-03"]
    result = runner.invoke(main, ["report", "--verify-ledger", *partial])
    assert result.exit_code == 2 and "whole UTC days" in result.output
    with engine.begin() as conn:  # damage it, as a worker of an older release would
        conn.execute(update(MoneyDaily.__table__).values(held=MoneyDaily.held - 1))
    result = runner.invoke(main, ["report", "--verify-ledger"])
    assert result.exit_code == 1 and "differs" in result.output
    result = runner.invoke(main, ["report", "--rebuild-rollup"])
    assert result.exit_code == 0, result.output
    assert run_verify(url)[1] == []
    with engine.connect() as conn:
        rows = sum(
            conn.execute(select(func.count()).select_from(table)).scalar_one()
            for table in (MoneyDaily.__table__, CallsDaily.__table__)
        )
    assert f"{rows} rows" in result.output
    engine.dispose()
