"""Celery tasks: thin shells over the consumer and the sweeper.

Every task is declared with ``billing_task``, the one guard: a task that meets a broken Redis or
database connection (``worker.db.transient``) counts it (``billing_task_interruptions``), logs its
cause (the driver's message, no secret) at most once a minute per cause, and returns; the next beat
tick tries again. Nothing is acknowledged that was not committed (see
``Consumer``), so giving up is always safe. Any other exception propagates, as Celery reports it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from worker import metrics
from worker.alerts.config import AlertConfig
from worker.alerts.jobs import run_alerts, run_pairing
from worker.consumer import backlog
from worker.contract.authorization import AuthorizationStore
from worker.core.calibration import format_factor
from worker.db.transient import is_transient
from worker.ledger.calibration import learn as learn_calibration
from worker.service import runtime
from worker.service.app import RETIRED_INTERVAL_SECONDS, app
from worker.service.authorization import SyncPolicy
from worker.service.authorization import sync as sync_authorizations
from worker.service.logs import Limiter, cause
from worker.service.retention import purge as purge_retained

log = logging.getLogger("worker.consumer")

# A retired stream's drain is sent again at the next look if it expired unstarted.
RETIRED_DRAIN_EXPIRES = 2 * RETIRED_INTERVAL_SECONDS


# What is wrong, once a minute per cause in each process (``worker.service.logs``).
_limiter = Limiter(seconds=60.0)


def _interrupted(label: str, what: str, exc: Exception) -> None:
    if not is_transient(exc):
        raise exc
    metrics.interrupted(label)
    found = cause(exc)
    held = _limiter.admit(found)  # per cause, whichever task met it
    if held is None:
        return
    more = f" ({held} more times since the last line of this cause)" if held else ""
    log.warning("%s: %s%s", what, found, more)


def billing_task(name: str, label: str) -> Callable[[Callable[..., None]], Any]:
    """Declare the Celery task ``name`` whose body takes this process's runtime first, then the
    task's own arguments. The runtime is built on first use (it reads the fingerprint key from the
    database); a transient error building it or running the body is logged and counted under
    ``label``, and the task returns."""

    def declare(body: Callable[..., None]) -> Any:
        def run(*args: Any, **kwargs: Any) -> None:
            try:
                rt = runtime.current()
            except Exception as exc:
                _interrupted(label, f"{label} not started", exc)
                return
            try:
                body(rt, *args, **kwargs)
            except Exception as exc:
                _interrupted(label, f"{name} interrupted", exc)

        run.__name__ = run.__qualname__ = body.__name__
        run.__doc__ = body.__doc__
        run.__module__ = body.__module__
        return app.task(name=name)(run)

    return declare


@billing_task("billing.drain", "drain")
def drain(rt: runtime.Runtime, partition: int = 0, stream: str | None = None) -> None:
    """Drain a partition for ``BILLING_DRAIN_MS``. Given ``stream`` (a retired one, sent by
    ``drain_retired``): that stream, for as long at most, ending at the first read that finds
    nothing."""
    name = stream or rt.consumer.keys.events(partition)
    stats = rt.consumer.drain(
        partition,
        seconds=rt.settings.drain_ms / 1000,
        block_ms=rt.settings.block_ms,
        until_idle=stream is not None,
        stream=stream,
    )
    metrics.record_batch(name, stats)
    if stats.read:
        log.info(
            "%s: read=%d held=%d settled=%d unsettled=%d void=%d dup=%d dead=%d deferred=%d",
            name, stats.read, stats.held, stats.settled, stats.unsettled, stats.voided,
            stats.duplicates, stats.dead, stats.deferred,
        )  # fmt: skip


@billing_task("billing.drain_retired", "drain")
def drain_retired(rt: runtime.Runtime) -> None:
    """Find the notification streams the configured partitions do not name (``partitions``): send
    a drain for each with work waiting, delete each that is drained and quiet."""
    for stream in backlog.to_drain(rt.client, rt.consumer.keys):
        drain.apply_async(kwargs={"stream": stream}, expires=RETIRED_DRAIN_EXPIRES)


@billing_task("billing.sweep", "sweep")
def sweep(rt: runtime.Runtime) -> None:
    stats = rt.sweeper.run()
    metrics.record_sweep(stats)
    if stats.finalized or stats.rechecked or stats.resolved or stats.dead:
        log.info("sweep: %s", stats)


@billing_task("billing.parity", "parity")
def parity(rt: runtime.Runtime) -> None:
    book = rt.consumer.prices.current()  # before the transaction (SQLite: one writer)
    counts = run_pairing(rt.consumer.sessions, rt.settings, book=book)
    if any(counts.values()):
        log.info("parity: %s", counts)


@billing_task("billing.alerts", "alerts")
def alerts(rt: runtime.Runtime) -> None:
    run = run_alerts(rt.consumer.sessions, AlertConfig.from_settings(rt.settings))
    if run.queued or run.delivery.delivered or run.delivery.failed or run.delivery.logged:
        log.info("alerts: queued=%d %s", run.queued, run.delivery)


@billing_task("billing.authorization_sync", "authorization")
def authorization_sync(rt: runtime.Runtime) -> None:
    """Recompute the authorization store from the ledger (``worker.service.authorization``)."""
    if not rt.settings.authorize:
        return
    stats = sync_authorizations(
        rt.consumer.sessions,
        AuthorizationStore(rt.client, rt.settings.prefix),
        SyncPolicy.from_settings(rt.settings),
        events=(rt.client, rt.consumer.keys),
        book=rt.consumer.prices.current(),
    )
    metrics.record_authorization_sync(stats)
    if stats.rebuilt:
        log.warning("authorization store rebuilt from the ledger: %d accounts", stats.accounts)


@billing_task("billing.purge", "purge")
def purge(rt: runtime.Runtime) -> None:
    stats = purge_retained(rt.consumer.sessions, rt.client, rt.settings)
    if any(vars(stats).values()):
        log.info("purge: %s", stats)


@billing_task("billing.calibrate", "calibrate")
def calibrate(rt: runtime.Runtime) -> None:
    """Learn the estimates' calibration factors in one transaction (``worker.ledger.calibration``);
    the consumer's book picks a new version up at its next price refresh."""
    with rt.consumer.sessions() as session, session.begin():
        learnt = learn_calibration(session, datetime.now(UTC))
    for item in learnt:
        if item.new_version:
            log.info(
                "calibration: %s/%s v%d prompt %s completion %s (%s)",
                item.provider or "-", item.model, item.version,
                format_factor(item.prompt.factor_ppm), format_factor(item.completion.factor_ppm),
                item.cause,
            )  # fmt: skip
