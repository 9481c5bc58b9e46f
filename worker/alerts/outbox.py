"""The alert outbox, in the database (the alert events it is built from are the ledger's:
``worker.ledger.alert_events``).

Contract. Functions take a ``Session`` and never commit, except ``claim_one`` and ``finish``, which the
sender calls in short transactions of their own around the HTTP request (no transaction is ever held
open across network IO). Writers are idempotent: an outbox row is unique per dedupe key, so a
second collector changes nothing.

Claiming (two senders must never send one row twice): on PostgreSQL the candidate row is read
``FOR UPDATE SKIP LOCKED`` and moved to ``sending`` in the same transaction; on SQLite every write
transaction begins ``IMMEDIATE`` and so runs alone. The UPDATE repeats the claimable condition, so a
row claimed meanwhile is not taken. A claim is a lease: a sender that dies mid-send leaves the row
``sending`` until ``claimed_until``, and then it is retried (at least once, never lost).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.orm import Session

from models import OutboxAlert, OutboxStatus
from worker.alerts.aggregation import Alert
from worker.alerts.config import AlertConfig
from worker.db.dialect import insert_ignore

log = logging.getLogger(__name__)

outbox = OutboxAlert.__table__


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
