"""Celery tasks: thin shells over the consumer and the sweeper.

A task that meets a broken Redis or database connection logs it and returns; the next beat tick tries
again. Nothing is acknowledged that was not committed (see ``Consumer``), so giving up is always safe.
"""

from __future__ import annotations

import logging

from worker import metrics
from worker.alerts.config import AlertConfig
from worker.alerts.jobs import run_alerts, run_pairing
from worker.consumer import partitions
from worker.db.transient import is_transient
from worker.service import runtime
from worker.service.app import RETIRED_INTERVAL_SECONDS, app
from worker.service.retention import purge as purge_retained

log = logging.getLogger("worker.consumer")

# A retired stream's drain is sent again at the next look if it expired unstarted.
RETIRED_DRAIN_EXPIRES = 2 * RETIRED_INTERVAL_SECONDS


def _runtime(task: str) -> runtime.Runtime | None:
    """This process's runtime, built on first use (it reads the fingerprint key from the database):
    None, with the usual warning, when the database or Redis is down; beat sends the task again."""
    try:
        return runtime.current()
    except Exception as exc:
        if not is_transient(exc):
            raise
        log.warning("%s not started: %s", task, type(exc).__name__)
        metrics.interrupted(task)
        return None


@app.task(name="billing.drain")
def drain(partition: int = 0, stream: str | None = None) -> None:
    """Drain a partition for ``BILLING_DRAIN_MS``. Given ``stream`` (a retired one, sent by
    ``drain_retired``): that stream, for as long at most, ending at the first read that finds
    nothing."""
    rt = _runtime("drain")
    if rt is None:
        return
    name = stream or rt.consumer.keys.events(partition)
    try:
        stats = rt.consumer.drain(
            partition,
            seconds=rt.settings.drain_ms / 1000,
            block_ms=rt.settings.block_ms,
            until_idle=stream is not None,
            stream=stream,
        )
    except Exception as exc:
        if not is_transient(exc):
            raise
        log.warning("drain of %s interrupted: %s", name, type(exc).__name__)
        metrics.interrupted("drain")
        return
    metrics.record_batch(name, stats)
    if stats.read:
        log.info(
            "%s: read=%d held=%d settled=%d unsettled=%d void=%d dup=%d dead=%d deferred=%d",
            name, stats.read, stats.held, stats.settled, stats.unsettled, stats.voided,
            stats.duplicates, stats.dead, stats.deferred,
        )  # fmt: skip


@app.task(name="billing.drain_retired")
def drain_retired() -> None:
    """Find the notification streams the configured partitions do not name (``partitions``): send
    a drain for each with work waiting, delete each that is drained and quiet."""
    rt = _runtime("drain_retired")
    if rt is None:
        return
    try:
        for stream in partitions.to_drain(rt.client, rt.consumer.keys):
            drain.apply_async(kwargs={"stream": stream}, expires=RETIRED_DRAIN_EXPIRES)
    except Exception as exc:
        if not is_transient(exc):
            raise
        log.warning("retired streams interrupted: %s", type(exc).__name__)
        metrics.interrupted("drain")


@app.task(name="billing.sweep")
def sweep() -> None:
    rt = _runtime("sweep")
    if rt is None:
        return
    try:
        stats = rt.sweeper.run()
    except Exception as exc:
        if not is_transient(exc):
            raise
        log.warning("sweep interrupted: %s", type(exc).__name__)
        metrics.interrupted("sweep")
        return
    metrics.record_sweep(stats)
    if stats.finalized or stats.rechecked or stats.resolved or stats.dead:
        log.info("sweep: %s", stats)


@app.task(name="billing.parity")
def parity() -> None:
    rt = _runtime("parity")
    if rt is None:
        return
    try:
        book = rt.consumer.prices.current()  # before the transaction (SQLite: one writer)
        counts = run_pairing(rt.consumer.sessions, rt.settings, book=book)
    except Exception as exc:
        if not is_transient(exc):
            raise
        log.warning("parity pairing interrupted: %s", type(exc).__name__)
        metrics.interrupted("parity")
        return
    if any(counts.values()):
        log.info("parity: %s", counts)


@app.task(name="billing.alerts")
def alerts() -> None:
    rt = _runtime("alerts")
    if rt is None:
        return
    try:
        run = run_alerts(rt.consumer.sessions, AlertConfig.from_settings(rt.settings))
    except Exception as exc:
        if not is_transient(exc):
            raise
        log.warning("alerts interrupted: %s", type(exc).__name__)
        metrics.interrupted("alerts")
        return
    if run.queued or run.delivery.delivered or run.delivery.failed or run.delivery.logged:
        log.info("alerts: queued=%d %s", run.queued, run.delivery)


@app.task(name="billing.purge")
def purge() -> None:
    rt = _runtime("purge")
    if rt is None:
        return
    try:
        stats = purge_retained(rt.consumer.sessions, rt.client, rt.settings)
    except Exception as exc:
        if not is_transient(exc):
            raise
        log.warning("purge interrupted: %s", type(exc).__name__)
        metrics.interrupted("purge")
        return
    if any(vars(stats).values()):
        log.info("purge: %s", stats)
