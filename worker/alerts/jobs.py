"""The periodic units of work behind the beat tasks and ``billing alerts``: pair twins; collect
alerts; deliver the outbox. Each owns its transactions (one per step) and returns counts.

Order of a run matters only for latency: the collect step commits before delivery starts, so an alert
aggregated in this run is sent in this run, and no transaction is open while the webhook is called.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from worker.alerts.collect import collect
from worker.alerts.config import AlertConfig
from worker.alerts.webhook import DeliveryStats, deliver
from worker.config import Settings
from worker.core.prices import PriceBook
from worker.ledger.findings import record_true_ups
from worker.ledger.parity_ops import pair_twins


def run_pairing(
    sessions: Callable[[], Session],
    settings: Settings,
    *,
    book: PriceBook | None = None,
    now: datetime | None = None,
) -> dict[str, int]:
    """One pairing pass in one transaction; returns the new pairs by verdict."""
    now = now or datetime.now(UTC)
    with sessions() as session, session.begin():
        return pair_twins(
            session,
            window=timedelta(seconds=settings.parity_window_seconds),
            now=now,
            book=book,
        )


@dataclass
class AlertRun:
    queued: int = 0
    delivery: DeliveryStats = field(default_factory=DeliveryStats)


def run_alerts(
    sessions: Callable[[], Session],
    config: AlertConfig,
    *,
    now: datetime | None = None,
    send: bool = True,
) -> AlertRun:
    """Record missed true-up anomalies, aggregate closed windows into the outbox (one transaction),
    then deliver what is due (short transactions around each request)."""
    run = AlertRun()
    now = now or datetime.now(UTC)
    with sessions() as session, session.begin():
        record_true_ups(session, now - config.window * (config.lookback_windows + 1))
        run.queued = collect(session, config, now)
    if send:
        run.delivery = deliver(sessions, config)
    return run
