"""``calls_daily`` against the calls it counts: the report's calls and providers sections give the same
figures from the rollup as from the exact statements, for any mix of calls on both engines; the
ranged drift statement gives the same percentiles; ``verify_calls`` finds damage; the migration's
backfill equals what the workers wrote.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from models import CallsDaily
from reports.book import post, scenario
from reports.test_exact import BASE, DAYS, _call, grouping, plan, whole_day_window
from reports.test_rollup import fresh_url  # noqa: F401 (the fixture: a database at no revision)
from worker.ledger.database import downgrade, make_engine, session_factory, upgrade
from worker.reports import drift, providers
from worker.reports.query import (
    _exact_calls,
    _rolled_calls,
    drift_bounds,
    rebuild_calls,
    verify_calls,
    whole_days,
)
from worker.reports.spec import ReportSpec

calls_daily = CallsDaily.__table__


def _ours(found: dict, spec: ReportSpec, prefix: str) -> dict:
    """The grain keys of this example's accounts (the database may hold other tests' calls)."""
    if "account" not in spec.by:
        return found
    at = spec.by.index("account")
    return {key: values for key, values in found.items() if prefix in key[at]}


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(plans=st.lists(plan, min_size=1, max_size=12), window=whole_day_window, by=grouping)
def test_the_rollup_gives_the_exact_figures(
    session: Session, plans: list[dict], window: tuple[datetime, datetime], by: tuple[str, ...]
) -> None:
    prefix = uuid.uuid4().hex[:10]
    post(session, [_call(prefix, i, p) for i, p in enumerate(plans)])
    spec = ReportSpec(*window, (*by, "account") if "account" not in by else by)
    assert whole_days(spec)
    conn = session.connection()
    rolled = _ours(_rolled_calls(conn, spec), spec, prefix)
    assert rolled == _ours(_exact_calls(conn, spec), spec, prefix)
    assert sum(values["calls"] for values in rolled.values()) == sum(
        1 for p in plans if window[0] <= p["created_at"] < window[1]
    )
    assert providers.per_provider(conn, spec, rolled=True) == providers.per_provider(conn, spec)
    _, differences = verify_calls(conn, spec)
    assert [d for d in differences if prefix in d.key[1]] == []


# drift splits into model ranges on PostgreSQL only (percentile_cont is PostgreSQL's)
@pytest.mark.postgres
@pytest.mark.parametrize("engine", ["postgresql"], indirect=True)
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    plans=st.lists(plan, min_size=1, max_size=12),
    cuts=st.lists(st.sampled_from(["m-one", "m-one0", "m-two", "m-zz"]), unique=True, max_size=3),
)
def test_drift_in_model_ranges_equals_drift_in_one_statement(
    session: Session, plans: list[dict], cuts: list[str]
) -> None:
    conn = session.connection()
    prefix = uuid.uuid4().hex[:10]
    post(session, [_call(prefix, i, p) for i, p in enumerate(plans)])
    spec = ReportSpec(BASE, BASE + timedelta(days=DAYS + 1), ())
    whole = drift.per_model(conn, spec, "percentile_cont")
    assert drift.per_model(conn, spec, "percentile_cont", tuple(sorted(cuts))) == whole
    bounds = drift_bounds(conn, spec)
    assert list(bounds) == sorted(bounds)
    assert drift.per_model(conn, spec, "percentile_cont", bounds) == whole


def test_verify_finds_a_damaged_row_and_rebuild_repairs_it(session: Session) -> None:
    prefix = uuid.uuid4().hex[:8]
    post(session, scenario(prefix))
    conn = session.connection()
    account = f"acct-a-{prefix}"
    conn.execute(
        update(calls_daily)
        .where(calls_daily.c.account_id == account, calls_daily.c.calls > 0)
        .values(calls=calls_daily.c.calls + 1)
    )
    _, differences = verify_calls(conn)
    assert differences and {d.key[1] for d in differences} == {account}
    assert all(d.table == "calls_daily" for d in differences)
    assert all(d.rollup["calls"] == d.ledger["calls"] + 1 for d in differences)
    assert rebuild_calls(conn) > 0
    assert verify_calls(conn)[1] == []


# --- the migration's backfill ---------------------------------------------------------------------


def _rows(conn) -> dict:
    return {tuple(row[:9]): tuple(row[9:]) for row in conn.execute(select(calls_daily)).all()}


def test_upgrade_from_0013_backfills_the_call_rollup(fresh_url: str) -> None:  # noqa: F811
    upgrade(fresh_url)
    engine = make_engine(fresh_url)
    try:
        with session_factory(engine)() as session, session.begin():
            post(session, scenario(uuid.uuid4().hex[:8]))
        with engine.connect() as conn:
            written = {key: row for key, row in _rows(conn).items() if any(row)}
        assert written
        downgrade(fresh_url, "0013")  # the rollup is dropped, the calls stay
        upgrade(fresh_url)
        with engine.connect() as conn:
            assert _rows(conn) == written  # no zero rows: the backfill writes only what is there
            compared, differences = verify_calls(conn)
        assert differences == [] and compared == len(written)
        spec = ReportSpec(datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC), ())
        with engine.connect() as conn:
            assert _rolled_calls(conn, spec) == _exact_calls(conn, spec)
    finally:
        engine.dispose()
