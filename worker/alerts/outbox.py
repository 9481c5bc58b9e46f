"""The alert outbox and the alert events, in the database.

Contract. Functions take a ``Session`` and never commit, except ``claim_one`` and ``finish``, which the
sender calls in short transactions of their own around the HTTP request (no transaction is ever held
open across network IO). Writers are idempotent: an alert event is unique per reservation, an outbox
row per dedupe key, so a redelivered call or a second collector changes nothing.

Claiming (two senders must never send one row twice): on PostgreSQL the candidate row is read
``FOR UPDATE SKIP LOCKED`` and moved to ``sending`` in the same transaction; on SQLite every write
transaction begins ``IMMEDIATE`` and so runs alone. The UPDATE repeats the claimable condition, so a
row claimed meanwhile is not taken. A claim is a lease: a sender that dies mid-send leaves the row
``sending`` until ``claimed_until``, and then it is retried (at least once, never lost).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.orm import Session

from models import (
    AlertEvent,
    Anomaly,
    Failure,
    OutboxAlert,
    OutboxStatus,
    Reservation,
    UsageRecord,
)
from worker.alerts.aggregation import (
    Alert,
    AnomalyEvent,
    UnsettledEvent,
    anomaly_alerts,
    closed_windows,
    drift_alerts,
    median,
    rate_alert,
    unsettled_alerts,
    window_start,
)
from worker.alerts.config import AlertConfig
from worker.alerts.low_balance import low_balance_alerts
from worker.ledger.funds import levels_at
from worker.ledger.postings import insert_ignore
from worker.money import Micros

log = logging.getLogger(__name__)

alert_events = AlertEvent.__table__
outbox = OutboxAlert.__table__
anomalies = Anomaly.__table__
reservations = Reservation.__table__
failures = Failure.__table__
usage_records = UsageRecord.__table__


# --- alert events -----------------------------------------------------------------------------------

_EVENT_COLUMNS = (
    "reservation_id",
    "account_id",
    "model",
    "reason",
    "stream",
    "exposure_micros",
    "detected_at",
)
_EVENT_SOURCE = select(
    reservations.c.id,
    reservations.c.account_id,
    reservations.c.model,
    failures.c.reason,
    reservations.c.stream,
    failures.c.exposure_micros,
    failures.c.detected_at,
).select_from(failures.join(reservations, reservations.c.id == failures.c.reservation_id))


def record_unsettled_event(session: Session, reservation_id: int) -> None:
    """The alert event of an unsettled call, copied from its failure row; call it in the
    transaction that marked the call unsettled. Idempotent per reservation."""
    source = _EVENT_SOURCE.where(reservations.c.id == reservation_id)
    session.execute(insert_ignore(session, alert_events).from_select(_EVENT_COLUMNS, source))


def record_unsettled_events(session: Session, reservation_ids: list[int]) -> None:
    """``record_unsettled_event`` for many reservations in one statement."""
    if reservation_ids:
        source = _EVENT_SOURCE.where(reservations.c.id.in_(reservation_ids))
        session.execute(insert_ignore(session, alert_events).from_select(_EVENT_COLUMNS, source))


def backfill_unsettled_events(session: Session, since: datetime) -> int:
    """Events for failures detected since ``since`` that have none (a path that marked a call
    unsettled without recording its event); the safety net run before each aggregation."""
    source = _EVENT_SOURCE.where(
        failures.c.detected_at >= since,
        ~select(alert_events.c.id)
        .where(alert_events.c.reservation_id == failures.c.reservation_id)
        .exists(),
    )
    result = session.execute(
        insert_ignore(session, alert_events).from_select(_EVENT_COLUMNS, source)
    )
    return max(result.rowcount or 0, 0)


# --- the outbox -------------------------------------------------------------------------------------


def enqueue(session: Session, alerts: list[Alert], now: datetime) -> int:
    """Queue alerts for delivery; an alert whose dedupe key is queued already is skipped."""
    if not alerts:
        return 0
    rows = [
        {
            "dedupe_key": alert.dedupe_key,
            "kind": str(alert.kind),
            "account_id": alert.account_id,
            "model": alert.model,
            "reason": alert.reason,
            "window_start": alert.window_start,
            "window_end": alert.window_end,
            "text": alert.text,
            "payload": orjson.dumps(alert.payload()).decode(),
            "status": str(OutboxStatus.PENDING),
            "attempts": 0,
            "next_attempt_at": now,
            "created_at": now,
        }
        for alert in alerts
    ]
    statement = insert_ignore(session, outbox).returning(outbox.c.id)
    added = 0
    for row in rows:  # one by one: RETURNING says which were new; rowcount is not portable here
        added += session.execute(statement, row).scalar_one_or_none() is not None
    return added


def _unsettled_events(session: Session, start: datetime, end: datetime) -> list[Any]:
    return session.execute(
        select(
            alert_events.c.detected_at,
            reservations.c.request_id,
            alert_events.c.account_id,
            alert_events.c.model,
            alert_events.c.reason,
            alert_events.c.stream,
            alert_events.c.exposure_micros,
        )
        .select_from(
            alert_events.join(reservations, reservations.c.id == alert_events.c.reservation_id)
        )
        .where(alert_events.c.detected_at >= start, alert_events.c.detected_at < end)
    ).all()


def _anomaly_events(session: Session, start: datetime, end: datetime) -> list[Any]:
    return session.execute(
        select(
            anomalies.c.detected_at,
            reservations.c.request_id,
            reservations.c.account_id,
            reservations.c.model,
            anomalies.c.kind,
        )
        .select_from(anomalies.join(reservations, reservations.c.id == anomalies.c.reservation_id))
        .where(anomalies.c.detected_at >= start, anomalies.c.detected_at < end)
    ).all()


def _settled_streams(session: Session, start: datetime, end: datetime) -> int:
    return session.scalar(
        select(func.count())
        .select_from(
            usage_records.join(reservations, reservations.c.id == usage_records.c.reservation_id)
        )
        .where(
            reservations.c.stream.is_(True),
            usage_records.c.created_at >= start,
            usage_records.c.created_at < end,
        )
    )


def drift_medians(session: Session, start: datetime, end: datetime) -> dict[str, tuple[int, int]]:
    """Per model: (low median of ``drift_ppm``, samples) of streamed calls settled in the window."""
    where = (
        reservations.c.stream.is_(True),
        usage_records.c.drift_ppm.is_not(None),
        usage_records.c.created_at >= start,
        usage_records.c.created_at < end,
    )
    joined = usage_records.join(reservations, reservations.c.id == usage_records.c.reservation_id)
    if session.get_bind().dialect.name == "postgresql":
        rows = session.execute(
            select(
                reservations.c.model,
                func.percentile_disc(0.5).within_group(usage_records.c.drift_ppm),
                func.count(),
            )
            .select_from(joined)
            .where(*where)
            .group_by(reservations.c.model)
        ).all()
        return {model: (int(middle), count) for model, middle, count in rows}
    samples: dict[str, list[int]] = defaultdict(list)
    for model, drift in session.execute(
        select(reservations.c.model, usage_records.c.drift_ppm).select_from(joined).where(*where)
    ):
        samples[model].append(drift)
    return {model: (median(values), len(values)) for model, values in samples.items()}


def collect(session: Session, config: AlertConfig, now: datetime) -> int:
    """Aggregate every closed window of the lookback into outbox rows; returns how many are new.

    Unsettled calls per (account, model, reason), the unsettled rate of streams, contract anomalies
    per (account, model, kind) over the alert window; funded accounts whose balance got worse
    (``low_balance``); median drift per model over the drift window.
    """
    windows = closed_windows(now, config.window, config.settle_slack, config.lookback_windows)
    first, last = windows[0][0], windows[-1][1]
    backfill_unsettled_events(session, first)
    by_window: dict[datetime, list[UnsettledEvent]] = defaultdict(list)
    for row in _unsettled_events(session, first, last):
        by_window[window_start(row.detected_at, config.window)].append(
            UnsettledEvent(
                row.request_id, row.account_id, row.model, row.reason, row.stream,
                row.exposure_micros,
            )
        )  # fmt: skip
    anomalies_by_window: dict[datetime, list[AnomalyEvent]] = defaultdict(list)
    for row in _anomaly_events(session, first, last):
        anomalies_by_window[window_start(row.detected_at, config.window)].append(
            AnomalyEvent(row.request_id, row.account_id, row.model, row.kind)
        )
    alerts: list[Alert] = []
    for start, end in windows:
        events = by_window.get(start, [])
        alerts += unsettled_alerts(events, start, end, shown=config.request_ids_shown)
        alerts += anomaly_alerts(
            anomalies_by_window.get(start, []), start, end, shown=config.request_ids_shown
        )
        unsettled_streams = sum(1 for event in events if event.stream)
        if unsettled_streams:
            streams = unsettled_streams + _settled_streams(session, start, end)
            rate = rate_alert(
                unsettled_streams,
                streams,
                start,
                end,
                threshold_pct=config.unsettled_rate_pct,
                min_streams=config.rate_min_streams,
            )
            if rate is not None:
                alerts.append(rate)
    moments = [start for start, _ in windows] + [last]
    alerts += low_balance_alerts(
        levels_at(session, moments), moments, threshold=Micros(config.low_balance_micros)
    )
    for start, end in closed_windows(now, config.drift_window, config.settle_slack, 2):
        alerts += drift_alerts(
            drift_medians(session, start, end),
            start,
            end,
            threshold_pct=config.drift_alert_pct,
            min_samples=config.drift_min_samples,
        )
    return enqueue(session, alerts, now)


# --- claiming and finishing (the sender's short transactions) --------------------------------------


@dataclass(frozen=True, slots=True)
class Claimed:
    id: int
    kind: str
    text: str
    payload: str
    attempts: int


def _claimable(now: datetime) -> Any:
    return or_(
        and_(outbox.c.status == str(OutboxStatus.PENDING), outbox.c.next_attempt_at <= now),
        and_(outbox.c.status == str(OutboxStatus.SENDING), outbox.c.claimed_until < now),
    )


def claim_one(session: Session, config: AlertConfig, now: datetime) -> Claimed | None:
    """Take the oldest due row for sending (status ``sending``, attempts + 1, a lease); None when
    nothing is due. Commits: the claim must be visible before the HTTP request starts."""
    with session.begin():
        row = session.execute(
            select(outbox.c.id)
            .where(_claimable(now))
            .order_by(outbox.c.next_attempt_at, outbox.c.id)
            .limit(1)
            .with_for_update(skip_locked=True)
        ).first()
        if row is None:
            return None
        claimed = session.execute(
            update(outbox)
            .where(outbox.c.id == row.id, _claimable(now))
            .values(
                status=str(OutboxStatus.SENDING),
                claimed_until=now + config.lease,
                attempts=outbox.c.attempts + 1,
            )
            .returning(
                outbox.c.id, outbox.c.kind, outbox.c.text, outbox.c.payload, outbox.c.attempts
            )
        ).first()
    return None if claimed is None else Claimed(*claimed)


def finish(
    session: Session,
    claimed: Claimed,
    config: AlertConfig,
    now: datetime,
    *,
    status: OutboxStatus,
    error: str | None = None,
) -> datetime | None:
    """Record the attempt: ``delivered``/``logged`` for good, or back to ``pending`` with the next
    try after an exponential backoff (returned). Commits."""
    next_at = None
    values: dict[str, Any] = {"claimed_until": None}
    if status is OutboxStatus.PENDING:
        next_at = now + config.backoff(claimed.attempts)
        values.update(status=str(status), next_attempt_at=next_at, last_error=error)
    else:
        values.update(status=str(status), delivered_at=now, last_error=None)
    with session.begin():
        session.execute(
            update(outbox)
            .where(outbox.c.id == claimed.id, outbox.c.status == str(OutboxStatus.SENDING))
            .values(**values)
        )
    return next_at


def listing(
    session: Session, *, status: str | None = None, limit: int = 100
) -> list[dict[str, Any]]:
    """Outbox rows, newest first, for ``billing alerts list``."""
    query = select(outbox).order_by(outbox.c.id.desc()).limit(limit)
    if status is not None:
        query = query.where(outbox.c.status == status)
    rows = []
    for row in session.execute(query).mappings():
        item = dict(row)
        for key in ("window_start", "window_end", "next_attempt_at", "claimed_until",
                    "created_at", "delivered_at"):  # fmt: skip
            item[key] = None if item[key] is None else item[key].isoformat()
        item.pop("payload")
        rows.append(item)
    return rows


def due_count(session: Session, now: datetime) -> int:
    return session.scalar(select(func.count()).select_from(outbox).where(_claimable(now)))
