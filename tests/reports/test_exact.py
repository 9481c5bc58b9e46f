"""The report's split calls pass, its money rollup and its anomaly complement give exactly what an
independent oracle computes from the raw rows in Python (``reports.reference``), for any ledger,
window and grouping, on both engines.

Each example posts random calls — every outcome, charges below and above the hold (a true-up, and its
``charge_above_hold`` anomaly), on both sides of midnight and of the window — through the real
operations, then compares the whole report (group rows, per-day series, total, anomalies) with the
reference, for whole-day windows (money from the rollup) and windows with a time of day (money from
the ledger), and both anomaly statements with the reference whichever one the report picks.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.orm import Session

from reports.book import Call, post
from reports.reference import reference_report
from worker.reports.model import REASONS
from worker.reports.query import (
    anomaly_complement_statement,
    anomaly_counts,
    anomaly_direct_statement,
    build_report,
    fewer_outside,
)
from worker.reports.spec import KEYS, ReportSpec

BASE = datetime(2034, 2, 27, tzinfo=UTC)  # three days across a month's end
DAYS = 3

OUTCOMES = (
    ("settled", None, None),
    ("void", None, None),
    ("pending", None, None),
    *(("unsettled", reason, None) for reason in REASONS),
    *(
        ("unsettled", reason, resolution)
        for reason in ("error_finish", "incomplete", "missing_usage")
        for resolution in ("release", "charge_estimate", "settled_late")
    ),
)

instant = st.builds(
    lambda minute, just_before: (
        BASE + timedelta(minutes=minute) - just_before * timedelta.resolution
    ),
    st.integers(0, DAYS * 24 * 60),
    st.booleans(),  # a microsecond before the minute: 23:59:59.999999 when it is midnight
)

plan = st.fixed_dictionaries(
    {
        "account": st.integers(0, 2),
        "model": st.sampled_from(["m-one", "m-two"]),
        "created_at": instant,
        "outcome": st.sampled_from(OUTCOMES),
        "reserved": st.sampled_from([0, 1_000, 10_000]),
        "charge": st.integers(0, 20_000),  # above the hold now and then: a true-up, an anomaly
        "exposure": st.sampled_from([None, 3_000, 15_000]),
        "stream": st.booleans(),
        "source": st.sampled_from(["reported", "estimated"]),
        "completion": st.integers(1, 200),
    }
)


def _call(prefix: str, i: int, p: dict) -> Call:
    kind, reason, resolution = p["outcome"]
    return Call(
        account=f"acct-{prefix}-{p['account']}",
        model=p["model"],
        created_at=p["created_at"],
        kind=kind,
        reserved=p["reserved"],
        stream=p["stream"],
        charge=None if reason == "unpriced" else p["charge"],
        # A usage record is written when a call settles, on time or late: either may be estimated.
        source=p["source"] if kind == "settled" or resolution == "settled_late" else "reported",
        reason=reason,
        exposure=p["exposure"] if resolution != "charge_estimate" else p["exposure"] or 3_000,
        resolution=resolution,
        completion=p["completion"],
        request_id=f"exact-{prefix}-{i}",
    )


whole_day_window = (
    st.tuples(st.integers(-1, DAYS), st.integers(1, DAYS + 1))
    .filter(lambda w: w[0] < w[1])
    .map(lambda w: (BASE + timedelta(days=w[0]), BASE + timedelta(days=w[1])))
)

partial_window = st.tuples(instant, instant).filter(lambda w: w[0] < w[1])

grouping = st.lists(st.sampled_from(KEYS), unique=True, max_size=3).map(tuple)


def _assert_same(session: Session, spec: ReportSpec) -> None:
    conn = session.connection()
    report = build_report(conn, spec)
    want = reference_report(conn, spec)
    assert report.groups == want["groups"]
    assert report.days == want["days"]
    assert report.total == want["total"]
    assert report.anomalies == want["anomalies"]
    for statement in (anomaly_direct_statement(spec), anomaly_complement_statement(spec)):
        got = {str(kind): int(n) for kind, n in conn.execute(statement).all()}
        assert list(got.items()) == list(want["anomalies"].items())


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    plans=st.lists(plan, min_size=1, max_size=12),
    window=st.one_of(whole_day_window, partial_window),
    by=grouping,
)
def test_the_report_equals_the_statements_it_replaced(
    session: Session, plans: list[dict], window: tuple[datetime, datetime], by: tuple[str, ...]
) -> None:
    prefix = uuid.uuid4().hex[:10]
    post(session, [_call(prefix, i, p) for i, p in enumerate(plans)])
    since, until = window
    _assert_same(session, ReportSpec(since, until, by))


@pytest.mark.parametrize(
    ("since", "until"),
    [
        (BASE, BASE + timedelta(days=DAYS)),  # whole days, calls on both sides
        (datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC)),  # every call
        (BASE + timedelta(hours=5), BASE + timedelta(days=1, hours=2)),  # times of day
        (BASE + timedelta(days=1), BASE + timedelta(days=1, microseconds=1)),  # one instant
    ],
)
def test_every_outcome_on_both_sides_of_the_window(session: Session, since, until) -> None:
    """Each outcome at midnight and just before it, and at both ends of the window and just before
    them, charged above and below the hold."""
    prefix = uuid.uuid4().hex[:10]
    calls = []
    for i, (kind, reason, resolution) in enumerate(OUTCOMES):
        edges = (since, until, until - timedelta.resolution, since - timedelta.resolution)
        for j, at in enumerate((BASE - timedelta.resolution, BASE + timedelta(days=1), *edges)):
            calls.append(
                _call(
                    prefix,
                    i * 10 + j,
                    {
                        "account": j,
                        "model": "m-one" if i % 2 else "m-two",
                        "created_at": at,
                        "outcome": (kind, reason, resolution),
                        "reserved": 10_000,
                        "charge": 4_000 if j == 1 else 12_000,  # 12,000 is above the hold
                        "exposure": 15_000 if j == 2 else 3_000,
                        "stream": bool(j % 2),
                        "source": "estimated" if (i + j) % 2 else "reported",
                        "completion": 50,
                    },
                )
            )
    post(session, calls)
    for by in ((), ("day",), ("day", "account", "model"), ("model", "account")):
        _assert_same(session, ReportSpec(since, until, by))


def test_the_cheaper_anomaly_statement_is_picked(session: Session) -> None:
    prefix = uuid.uuid4().hex[:10]
    at = datetime(2035, 6, 1, 12, tzinfo=UTC)
    post(
        session,
        [  # three calls charged above the hold at one instant, and four an hour apart after it
            _call(prefix, i, {"account": 0, "model": "m-one", "reserved": 1_000, "charge": 5_000,
                              "created_at": at + timedelta(hours=max(0, i - 2)),
                              "outcome": ("settled", None, None), "exposure": None,
                              "stream": True, "source": "reported", "completion": 10})
            for i in range(7)
        ],
    )  # fmt: skip
    conn = session.connection()
    everything = ReportSpec(datetime(1970, 1, 1, tzinfo=UTC), datetime(2200, 1, 1, tzinfo=UTC), ())
    narrow = ReportSpec(at, at + timedelta(microseconds=1), ())
    assert fewer_outside(conn, everything, inside=1)  # nothing lies outside every time
    assert not fewer_outside(conn, narrow, inside=3)  # the rest of the database lies outside
    assert not fewer_outside(conn, everything, inside=0)
    assert anomaly_counts(conn, narrow, inside=3) == {"charge_above_hold": 3}
    assert anomaly_counts(conn, narrow) == anomaly_counts(conn, narrow, inside=3)
