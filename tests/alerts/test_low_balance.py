"""The low-balance alert: the pure state rules, then end to end through the outbox on both
engines (a funded account spends its way below the threshold, then below zero)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import orjson
from freezegun import freeze_time
from ledger.factories import make_meta
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from models import AlertKind, OutboxAlert
from worker.alerts.config import AlertConfig
from worker.alerts.jobs import run_alerts
from worker.alerts.low_balance import EXHAUSTED, LOW, low_balance_findings, state
from worker.core.money import Micros
from worker.ledger.credits import credit, reverse, set_limit
from worker.ledger.funds import Level
from worker.ledger.operations import hold

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
    found = [(f.account_id, f.reason, f.at) for f in low_balance_findings(
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
    found = low_balance_findings(series, MOMENTS[:2], threshold=Micros(0))
    assert [f.kind for f in found] == [AlertKind.LOW_BALANCE] * 2
    assert "-0.000002 USD is negative" in found[0].note
    assert "past its credit limit of 3.000000 USD" in found[1].note
    assert found[1].facts["spendable_micros"] == -1


def _funded_account_spends(sessions: sessionmaker[Session], account: str, at: datetime) -> None:
    with sessions() as s, s.begin():
        credit(
            s,
            account,
            Micros(12_000_000),
            key=f"{account}-1",
            note="t",
            who="t",
            now=at,
            new_account=True,
        )
        hold(s, make_meta(f"{account}-r1", account_id=account, reserved=5_000_000,
                          created_at=at), now=at + timedelta(minutes=6))  # fmt: skip
        hold(s, make_meta(f"{account}-r2", account_id=account, reserved=8_000_000,
                          created_at=at), now=at + timedelta(minutes=11))  # fmt: skip


def _crossings(sessions: sessionmaker[Session]) -> list[tuple[str, str, int, str]]:
    """Every (account, reason, count, window start) the low-balance digests carry, per window."""
    with sessions() as s:
        rows = s.scalars(select(OutboxAlert).where(OutboxAlert.kind == "low_balance")).all()
        found = [
            (group["account_id"], group["reason"], group["count"], window["window_start"])
            for row in rows
            if row.reason == "digest"
            for window in orjson.loads(row.payload)["windows"]
            for group in window["groups"]
        ]
        return sorted(found, key=lambda crossing: crossing[3])


def _texts(sessions: sessionmaker[Session]) -> str:
    with sessions() as s:
        rows = s.scalars(select(OutboxAlert).where(OutboxAlert.kind == "low_balance")).all()
        return "\n".join(row.text for row in rows)


def test_collect_finds_each_crossing_once(sessions: sessionmaker[Session]) -> None:
    at = START + timedelta(hours=uuid.uuid4().int % 100_000)
    account = f"acct-{uuid.uuid4().hex[:8]}"
    _funded_account_spends(sessions, account, at)
    # One digest per 5-minute window, so each crossing's window is digested on its own.
    config = AlertConfig(low_balance_micros=10_000_000, digest_window=timedelta(minutes=5))
    with freeze_time(at + timedelta(minutes=16)):
        run_alerts(sessions, config, send=False)
        run_alerts(sessions, config, send=False)  # once: the dedupe keys hold
    mine = [c for c in _crossings(sessions) if c[0] == account]
    assert mine == [
        (account, LOW, 1, (at + timedelta(minutes=5)).isoformat()),
        (account, EXHAUSTED, 1, (at + timedelta(minutes=10)).isoformat()),
    ]
    assert "-1.000000 USD is negative" in _texts(sessions)
    # A credit limit and a top-up bring it back; a reversal sends it below zero again.
    with sessions() as s, s.begin():
        later = at + timedelta(minutes=21)
        set_limit(s, account, Micros(2_000_000), note="t", who="t", now=later)
        credit(s, account, Micros(20_000_000), key=f"{account}-2", note="t", who="t", now=later)
        reverse(s, f"{account}-2", note="bounced", who="t", now=later + timedelta(minutes=5))
    with freeze_time(at + timedelta(minutes=31)):
        run_alerts(sessions, config, send=False)
    mine = [c for c in _crossings(sessions) if c[0] == account]
    assert [reason for _, reason, _, _ in mine] == [LOW, EXHAUSTED, LOW]
    assert "1.000000 USD is below the 10.000000 USD threshold" in _texts(sessions)
