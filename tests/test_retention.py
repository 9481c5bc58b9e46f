"""Retention (``worker.service.retention``) on SQLite and PostgreSQL with real Redis: rows past their retention
go in bounded batches, recent ones and the ledger stay, 0 days keeps everything, and the quarantine
keeps only requests whose reservation is still held."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from ledger.factories import make_meta
from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session, sessionmaker

from models import AnomalyKind, Reservation
from models.alerts import AlertEvent, AlertKind, OutboxAlert
from models.anomalies import Anomaly
from worker.alerts.aggregation import Alert
from worker.alerts.outbox import enqueue
from worker.config import Settings
from worker.contract.keys import Keys
from worker.ledger.findings import record_anomalies
from worker.ledger.operations import hold
from worker.service import retention
from worker.service.app import app

NOW = datetime.now(UTC)
OLD = NOW - timedelta(days=120)
RECENT = NOW - timedelta(days=1)


def reservation(sessions: sessionmaker[Session]) -> tuple[int, str]:
    request_id = f"req-ret-{uuid.uuid4().hex[:10]}"
    with sessions() as s, s.begin():
        hold(s, make_meta(request_id, account_id="acct-ret"), now=NOW)
        return s.scalar(select(Reservation.id).where(Reservation.request_id == request_id)), (
            request_id
        )


def findings_at(sessions: sessionmaker[Session], reservation_id: int, at: datetime) -> None:
    """An anomaly, an alert event and an outbox row of ``at``."""
    with sessions() as s, s.begin():
        record_anomalies(s, reservation_id, {AnomalyKind.MIXED_IDS: "2 chunks"}, at)
        s.execute(
            insert(AlertEvent).values(
                reservation_id=reservation_id, account_id="acct-ret", model="gpt-4o",
                reason="incomplete", stream=True, exposure_micros=1, detected_at=at,
            )
        )  # fmt: skip
        enqueue(s, [alert_of(reservation_id)], at)


def alert_of(reservation_id: int) -> Alert:
    start = datetime(2030, 1, 1, tzinfo=UTC)
    return Alert(
        AlertKind.ANOMALY, "acct-ret", "gpt-4o", "mixed_ids", start, start + timedelta(minutes=5),
        "1 contract anomaly", subject=str(reservation_id),
    )  # fmt: skip


def left(sessions: sessionmaker[Session], ids: list[int]) -> dict[str, int]:
    with sessions() as s:
        return {
            "anomalies": s.scalar(select(func.count()).where(Anomaly.reservation_id.in_(ids))),
            "events": s.scalar(select(func.count()).where(AlertEvent.reservation_id.in_(ids))),
            "outbox": s.scalar(
                select(func.count()).where(
                    OutboxAlert.dedupe_key.in_([alert_of(i).dedupe_key for i in ids])
                )
            ),
        }


@pytest.fixture
def settings(prefix: str) -> Settings:
    return Settings(prefix=prefix, alert_retention_days=30, anomaly_retention_days=90)


def test_rows_past_retention_go_and_recent_ones_stay(sessions, redis_client, settings) -> None:
    old = [reservation(sessions)[0] for _ in range(3)]
    recent = [reservation(sessions)[0] for _ in range(2)]
    for reservation_id in old:
        findings_at(sessions, reservation_id, OLD)
    for reservation_id in recent:
        findings_at(sessions, reservation_id, RECENT)
    stats = retention.purge(sessions, redis_client, settings, now=NOW)
    assert stats.anomalies >= 3 and stats.alert_events >= 3 and stats.alert_outbox >= 3
    assert stats.undelivered >= 3  # they were never delivered: counted, and logged
    assert left(sessions, old) == {"anomalies": 0, "events": 0, "outbox": 0}
    assert left(sessions, recent) == {"anomalies": 2, "events": 2, "outbox": 2}
    with sessions() as s:  # the ledger is never touched
        assert s.scalar(select(func.count()).where(Reservation.id.in_(old))) == 3


def test_each_setting_rules_its_own_tables_and_zero_keeps_for_ever(
    sessions, redis_client, prefix
) -> None:
    ids = [reservation(sessions)[0] for _ in range(2)]
    for reservation_id in ids:
        findings_at(sessions, reservation_id, OLD)
    forever = Settings(prefix=prefix, alert_retention_days=0, anomaly_retention_days=0)
    retention.purge(sessions, redis_client, forever, now=NOW)
    assert left(sessions, ids) == {"anomalies": 2, "events": 2, "outbox": 2}
    anomalies_only = Settings(prefix=prefix, alert_retention_days=0, anomaly_retention_days=30)
    retention.purge(sessions, redis_client, anomalies_only, now=NOW)
    assert left(sessions, ids) == {"anomalies": 0, "events": 2, "outbox": 2}


def test_a_purge_deletes_in_bounded_batches(sessions, redis_client, settings, monkeypatch) -> None:
    ids = [reservation(sessions)[0] for _ in range(5)]
    for reservation_id in ids:
        findings_at(sessions, reservation_id, OLD)
    monkeypatch.setattr(retention, "BATCH", 2)
    monkeypatch.setattr(retention, "MAX_BATCHES", 1)
    stats = retention.purge(sessions, redis_client, settings, now=NOW)
    assert (stats.anomalies, stats.alert_events, stats.alert_outbox) == (2, 2, 2)
    for _run in range(20):
        if left(sessions, ids) == {"anomalies": 0, "events": 0, "outbox": 0}:
            break
        retention.purge(sessions, redis_client, settings, now=NOW)
    assert left(sessions, ids) == {"anomalies": 0, "events": 0, "outbox": 0}


def test_alert_rows_the_alert_job_still_reads_are_kept(sessions, redis_client, prefix) -> None:
    (reservation_id, _rid) = reservation(sessions)
    settings = Settings(prefix=prefix, alert_retention_days=1, alert_window_seconds=86_400)
    findings_at(sessions, reservation_id, NOW - timedelta(days=3))
    retention.purge(sessions, redis_client, settings, now=NOW)
    # twelve one-day windows are looked at again on every run: dropping them would re-send them
    assert left(sessions, [reservation_id])["outbox"] == 1


def test_the_quarantine_keeps_only_held_reservations(sessions, redis_client, settings) -> None:
    _held_id, held = reservation(sessions)
    keys = Keys(settings.prefix)
    redis_client.sadd(keys.quarantine, held, "req-without-reservation")
    stats = retention.purge(sessions, redis_client, settings, now=NOW)
    assert stats.quarantine == 1
    assert redis_client.smembers(keys.quarantine) == {held.encode()}


def test_beat_runs_the_purge() -> None:
    import worker.service.tasks  # noqa: F401  (registers the tasks)

    schedule = app.conf.beat_schedule
    assert schedule["purge"]["task"] == "billing.purge"
    assert "billing.purge" in app.tasks
