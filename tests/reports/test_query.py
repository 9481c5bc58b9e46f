"""The report's numbers against an independent computation, on SQLite and PostgreSQL."""

from __future__ import annotations

import itertools
import uuid
from datetime import timedelta

import pytest
from sqlalchemy.orm import Session

from reports.book import (
    SINCE,
    UNTIL,
    drift_percentile,
    expected,
    expected_drift,
    in_window,
    post,
    scenario,
)
from worker.alerts.sources import drift_medians
from worker.ledger.balances import balance
from worker.reports.model import MONEY_FIELDS, Tally
from worker.reports.query import build_report
from worker.reports.spec import KEYS, ReportSpec

GROUPINGS = [
    combo for n in range(len(KEYS) + 1) for combo in itertools.permutations(KEYS, n)
]  # every subset in every order: 16 groupings


@pytest.fixture
def book(session: Session) -> tuple[list, str]:
    prefix = uuid.uuid4().hex[:8]
    calls = scenario(prefix)
    post(session, calls)
    return calls, prefix


def _only(report_groups, calls, by) -> dict:
    """The report's rows for this test's accounts (the database may hold other tests' calls)."""
    accounts = {c.account for c in calls}
    models = {c.model for c in calls}
    return {row.key: row.tally for row in report_groups if _ours(row.key, by, accounts, models)}


def _ours(key, by, accounts, models) -> bool:
    values = dict(zip(by, key, strict=True))
    return (
        values.get("account", next(iter(accounts))) in accounts
        and values.get("model", next(iter(models))) in models
    )


@pytest.mark.parametrize("by", GROUPINGS, ids=lambda by: ",".join(by) or "totals")
def test_every_number_matches_an_independent_computation(
    session: Session, book: tuple[list, str], by: tuple[str, ...]
) -> None:
    calls, _ = book
    # Group by account too, so other tests' calls in the same window cannot blur the comparison.
    grouped = by if "account" in by else (*by, "account")
    report = build_report(session.connection(), ReportSpec(SINCE, UNTIL, grouped))
    got = _only(report.groups, calls, grouped)
    want = expected(calls, grouped)
    assert set(got) == set(want)
    for key, tally in want.items():
        assert dict(got[key].counts) == dict(tally.counts), key
        assert dict(got[key].money) == dict(tally.money), key
        assert got[key].ties_out


def test_totals_days_and_tie_out(session: Session, book: tuple[list, str]) -> None:
    calls, prefix = book
    report = build_report(session.connection(), ReportSpec(SINCE, UNTIL, ("account",)))
    ours = [row.tally for row in report.groups if prefix in row.key[0]]
    want = expected(calls, ())[()]
    total = ours[0] + ours[1]
    assert dict(total.counts) == dict(want.counts)
    assert dict(total.money) == dict(want.money)
    # The hand-checked figures, so the independent computation is itself pinned down.
    assert total.counts["calls"] == 12 and total.counts["pending"] == 1
    assert total.money["held"] == 10_000 * 9 + 1_000 + 7_000 + 0
    assert total.money["true_ups"] == 1_500 + 5_000 + 500
    assert total.money["charged"] == 4_000 + 3_000 + 2_500 + 3_000 + 15_000 + 6_000 + 500
    assert total.money["still_held"] == 10_000 + 10_000 + 7_000
    assert total.money["exposure"] == 3_000
    assert total.ties_out and report.ties_out
    # The overall total and the per-day series are sums of the same rows.
    assert report.total == sum((row.tally for row in report.groups), Tally())
    assert report.total == sum((row.tally for row in report.days), Tally())
    assert [row.key[0] for row in report.days][:2] == ["2033-05-01", "2033-05-02"]
    # And the ledger's own balances agree on what each account was charged.
    for account in {c.account for c in calls}:
        row = next(r for r in report.groups if r.key == (account,))
        outside = sum(1 for c in calls if c.account == account and c.kind == "settled"
                      and not SINCE <= c.created_at < UNTIL) * 4_000  # fmt: skip
        assert int(balance(session, account).charged) == row.tally.money["charged"] + outside


def test_a_difference_is_shown_not_hidden() -> None:
    tally = Tally.of({}, {"held": 10, "charged": 4, "released": 5})
    assert not tally.ties_out
    assert tally.tie_out_difference == 1
    assert set(MONEY_FIELDS) == set(tally.money)


def test_drift_percentiles_per_model(session: Session, book: tuple[list, str]) -> None:
    calls, _ = book
    report = build_report(session.connection(), ReportSpec(SINCE, UNTIL, ()))
    got = {d.model: d for d in report.drift}
    want = expected_drift(calls)
    # Only streamed calls with reported usage: the estimated, the non-streamed and the unsettled
    # calls of the book have no drift; the reasoning call counts its visible tokens only.
    assert sorted(len(v) for v in want.values()) == [3]
    assert want["m-one"] == [-38461, -100000, -111111]
    for model, values in want.items():
        drift = got[model]
        assert drift.calls == len(values), "only this book's calls are in the window"
        for name, fraction in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            assert getattr(drift, name) == drift_percentile(values, fraction)


def test_report_and_alert_read_the_same_drift(session: Session) -> None:
    """The drift alert's median and the report's p50 are one number for an odd sample."""
    prefix = uuid.uuid4().hex[:8]
    model = f"drift-agree-{prefix}"
    calls = [
        c.__class__(**{**c.__dict__, "model": model})
        for c in in_window(scenario(prefix))  # the alert windows settlement, the report creation
        if c.model == "m-one"
    ]
    post(session, calls)
    values = expected_drift(calls)[model]
    assert len(values) % 2 == 1
    report = build_report(session.connection(), ReportSpec(SINCE, UNTIL, ()))
    (drift,) = [d for d in report.drift if d.model == model]
    medians = drift_medians(session, SINCE, UNTIL + timedelta(minutes=1))
    median, samples = medians[model]
    assert samples == drift.calls == len(values)
    assert drift.p50 == median / 1_000_000 == drift_percentile(values, 0.5)


def test_empty_window(session: Session) -> None:
    spec = ReportSpec(SINCE.replace(year=1999), UNTIL.replace(year=1999), ("day", "model"))
    report = build_report(session.connection(), spec)
    assert report.groups == () and report.days == () and report.drift == ()
    assert report.total == Tally() and report.ties_out
