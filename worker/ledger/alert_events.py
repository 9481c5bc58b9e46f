"""The alert events: the ledger's record of each unsettled call, copied from its failure row in the
transaction that marked it, for the alerts to aggregate (``worker.alerts``).

Contract. Functions take a ``Session`` and never commit. Idempotent: an alert event is unique per
reservation, so a redelivered call changes nothing.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from models import AlertEvent, Failure, Reservation
from worker.db.dialect import insert_ignore

alert_events = AlertEvent.__table__
reservations = Reservation.__table__
failures = Failure.__table__

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


def correct_unsettled_event(
    session: Session, reservation_id: int, *, reason: str, exposure: int | None
) -> None:
    """The alert event of a call whose failure's reason was corrected (``reclassified``) takes
    the failure's new reason and exposure; a call without an event yet gets none here (the
    backfill copies the corrected failure)."""
    session.execute(
        update(alert_events)
        .where(alert_events.c.reservation_id == reservation_id)
        .values(reason=reason, exposure_micros=exposure)
    )


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
