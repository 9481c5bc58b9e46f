"""Retention: what the worker deletes once it has served, each rule in one place (docs/operations.md,
"Limits and retention"). Run by the ``billing.purge`` beat task.

* ``alert_events`` and ``alert_outbox`` rows older than ``BILLING_ALERT_RETENTION_DAYS``, and never
  one the alert job may still look at (its lookback of closed windows), so no alert is queued twice.
  Outbox rows are dropped whatever their status, undelivered ones too (counted apart and logged): a
  message weeks old that could not be delivered will not be.
* ``anomalies`` older than ``BILLING_ANOMALY_RETENTION_DAYS`` (reports over older periods then show
  fewer anomalies; the money is unaffected).
* Members of the quarantine set whose request has no ``held`` reservation: the set only tells the
  sweeper how to finalize a held call whose stream was refused; any other member would stay for ever.

A retention of 0 days keeps the rows for ever. Deletes go in batches of ``BATCH`` rows, each in its own
short transaction, at most ``MAX_BATCHES`` per table and run: a backlog is worked off over several
runs, never in one long lock. Retention never touches the ledger (reservations, transactions, usage).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from sqlalchemy import ColumnElement, Table, delete, func, select
from sqlalchemy.orm import Session

from models import Anomaly, Reservation
from models.alerts import AlertEvent, OutboxAlert, OutboxStatus
from models.reservations import Status
from worker.alerts.config import AlertConfig
from worker.config import Settings
from worker.contract.keys import Keys

log = logging.getLogger(__name__)

BATCH = 5_000
MAX_BATCHES = 20
UNDELIVERED = (str(OutboxStatus.PENDING), str(OutboxStatus.SENDING))


@dataclass
class PurgeStats:
    alert_events: int = 0
    alert_outbox: int = 0
    undelivered: int = 0  # of the outbox rows: never delivered
    anomalies: int = 0
    quarantine: int = 0


def alert_cutoff(settings: Settings, now: datetime) -> datetime | None:
    """Alert rows detected or created before this go; None keeps them."""
    if settings.alert_retention_days == 0:
        return None
    config = AlertConfig.from_settings(settings)
    looked_at = config.window * (config.lookback_windows + 2) + config.settle_slack
    windows = max(config.drift_window, config.digest_window) * 3 + config.settle_slack
    return now - max(timedelta(days=settings.alert_retention_days), looked_at, windows)


def anomaly_cutoff(settings: Settings, now: datetime) -> datetime | None:
    if settings.anomaly_retention_days == 0:
        return None
    return now - timedelta(days=settings.anomaly_retention_days)


def _purge_table(
    sessions: Callable[[], Session],
    table: Table,
    where: ColumnElement[bool],
    counted: ColumnElement[bool] | None = None,
) -> tuple[int, int]:
    """Delete the rows ``where`` selects, oldest ids first, in batches; returns how many, and how
    many of them matched ``counted``."""
    deleted = matched = 0
    for _batch in range(MAX_BATCHES):
        with sessions() as session, session.begin():
            ids = list(
                session.scalars(select(table.c.id).where(where).order_by(table.c.id).limit(BATCH))
            )
            if not ids:
                break
            if counted is not None:
                matched += (
                    session.scalar(
                        select(func.count()).select_from(table).where(table.c.id.in_(ids), counted)
                    )
                    or 0
                )
            session.execute(delete(table).where(table.c.id.in_(ids)))
        deleted += len(ids)
        if len(ids) < BATCH:
            break
    return deleted, matched


def purge_quarantine(
    client: redis.Redis, keys: Keys, sessions: Callable[[], Session], *, page: int = 1_000
) -> int:
    """Remove quarantine members without a held reservation; returns how many. One pass over the
    set (``SSCAN``), at most ``MAX_BATCHES`` pages of about ``page`` members."""
    removed = 0
    cursor: Any = 0
    for _page in range(MAX_BATCHES):
        cursor, members = client.sscan(keys.quarantine, cursor, count=page)
        ids = [m.decode() if isinstance(m, bytes) else m for m in members]
        if ids:
            with sessions() as session:
                held = set(
                    session.scalars(
                        select(Reservation.request_id).where(
                            Reservation.request_id.in_(ids), Reservation.status == str(Status.HELD)
                        )
                    )
                )
            stale = [request_id for request_id in ids if request_id not in held]
            if stale:
                removed += int(client.srem(keys.quarantine, *stale))
        if int(cursor) == 0:
            break
    return removed


def purge(
    sessions: Callable[[], Session],
    client: redis.Redis,
    settings: Settings,
    *,
    now: datetime | None = None,
) -> PurgeStats:
    """One retention run: every rule above, each table in its own bounded batches."""
    now = now or datetime.now(UTC)
    stats = PurgeStats()
    events, outbox, anomalies = AlertEvent.__table__, OutboxAlert.__table__, Anomaly.__table__
    cutoff = alert_cutoff(settings, now)
    if cutoff is not None:
        stats.alert_events, _ = _purge_table(sessions, events, events.c.detected_at < cutoff)
        stats.alert_outbox, stats.undelivered = _purge_table(
            sessions, outbox, outbox.c.created_at < cutoff, outbox.c.status.in_(UNDELIVERED)
        )
    cutoff = anomaly_cutoff(settings, now)
    if cutoff is not None:
        stats.anomalies, _ = _purge_table(sessions, anomalies, anomalies.c.detected_at < cutoff)
    keys = Keys(settings.prefix, settings.partitions)
    stats.quarantine = purge_quarantine(client, keys, sessions)
    if stats.undelivered:
        log.warning(
            "purged %d alert(s) never delivered, older than %d days",
            stats.undelivered,
            settings.alert_retention_days,
        )
    return stats
