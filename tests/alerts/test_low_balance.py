"""The low-balance alert: the pure state rules, then end to end through the outbox on both
engines (a funded account spends its way below the threshold, then below zero)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from freezegun import freeze_time
from ledger.factories import make_meta
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from models import AlertKind, OutboxAlert
from worker.alerts.config import AlertConfig
from worker.alerts.jobs import run_alerts
from worker.alerts.low_balance import EXHAUSTED, LOW, low_balance_alerts, state
from worker.ledger.credits import credit, reverse, set_limit
from worker.ledger.funds import Level
from worker.ledger.operations import hold
from worker.money import Micros

START = datetime(2031, 5, 1, tzinfo=UTC)
MOMENTS = [START + timedelta(minutes=5 * i) for i in range(4)]
THRESHOLD = Micros(10_000_000)


def level(available: int, limit: int = 0) -> Level:
    return Level(Micros(available), Micros(limit))


def test_states() -> None:
    assert state(None, THRESHOLD) == "ok"
    assert state(level(10_000_000), THRESHOLD) == "ok"
    assert state(level(9_999_999), THRESHOLD) == LOW
    assert state(level(-1), THRESHOLD) == EXHAUSTED
    assert state(level(-1, limit=1), THRESHOLD) == LOW
    assert state(level(-1, limit=1), Micros(0)) == "ok"  # no threshold: only below zero alerts


def test_an_alert_for_each_window_that_made_it_worse() -> None:
    series = {
        "a": [level(20_000_000), level(5_000_000), level(4_000_000), level(-3)],
        "b": [None, level(1), level(20_000_000), level(1)],  # funded low, topped up, low again
        "c": [level(-5), level(-6), level(-7), level(-8)],  # was already exhausted: nothing new
    }
    found = [(a.account_id, a.reason, a.window_start) for a in low_balance_alerts(
        series, MOMENTS, threshold=THRESHOLD
    )]  # fmt: skip
    assert found == [
        ("a", LOW, MOMENTS[0]),
        ("a", EXHAUSTED, MOMENTS[2]),
        ("b", LOW, MOMENTS[0]),
        ("b", LOW, MOMENTS[2]),
    ]


def test_texts_say_negative_or_past_the_limit() -> None:
    series = {"x": [level(1), level(-2)], "y": [level(1), level(-3_000_001, limit=3_000_000)]}
    alerts = low_balance_alerts(series, MOMENTS[:2], threshold=Micros(0))
    assert [a.kind for a in alerts] == [AlertKind.LOW_BALANCE] * 2
    assert "-0.000002 USD is negative" in alerts[0].text
    assert "past its credit limit of 3.000000 USD" in alerts[1].text
    assert alerts[1].fields["spendable_micros"] == -1


def _funded_account_spends(sessions: sessionmaker[Session], account: str, at: datetime) -> None:
    with sessions() as s, s.begin():
        credit(s, account, Micros(12_000_000), key=f"{account}-1", note="t", who="t", now=at)
        hold(s, make_meta(f"{account}-r1", account_id=account, reserved=5_000_000,
                          created_at=at), now=at + timedelta(minutes=6))  # fmt: skip
        hold(s, make_meta(f"{account}-r2", account_id=account, reserved=8_000_000,
                          created_at=at), now=at + timedelta(minutes=11))  # fmt: skip


def _alerts(sessions: sessionmaker[Session], account: str) -> list[OutboxAlert]:
    with sessions() as s:
        return list(
            s.scalars(
                select(OutboxAlert)
                .where(OutboxAlert.account_id == account, OutboxAlert.kind == "low_balance")
                .order_by(OutboxAlert.window_start)
            )
        )


def test_collect_alerts_once_per_crossing(sessions: sessionmaker[Session]) -> None:
    at = START + timedelta(hours=uuid.uuid4().int % 100_000)
    account = f"acct-{uuid.uuid4().hex[:8]}"
    _funded_account_spends(sessions, account, at)
    config = AlertConfig(low_balance_micros=10_000_000)
    with freeze_time(at + timedelta(minutes=16)):
        run_alerts(sessions, config, send=False)
        run_alerts(sessions, config, send=False)
    found = _alerts(sessions, account)
    assert [(row.reason, row.window_start - at) for row in found] == [
        (LOW, timedelta(minutes=5)),
        (EXHAUSTED, timedelta(minutes=10)),
    ]
    assert "-1.000000 USD is negative" in found[1].text
    # A credit limit and a top-up bring it back; a reversal sends it below zero again.
    with sessions() as s, s.begin():
        later = at + timedelta(minutes=21)
        set_limit(s, account, Micros(2_000_000), note="t", who="t", now=later)
        credit(s, account, Micros(20_000_000), key=f"{account}-2", note="t", who="t", now=later)
        reverse(s, f"{account}-2", note="bounced", who="t", now=later + timedelta(minutes=5))
    with freeze_time(at + timedelta(minutes=31)):
        run_alerts(sessions, config, send=False)
    found = _alerts(sessions, account)
    assert [row.reason for row in found] == [LOW, EXHAUSTED, LOW]
    assert "1.000000 USD is below the 10.000000 USD threshold" in found[2].text
