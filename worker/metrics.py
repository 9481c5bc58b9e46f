"""Prometheus metrics of the worker: what each batch and sweep did, and alert deliveries.

Multiprocess contract: Celery's prefork pool runs tasks in forked children, each with its own memory,
so counters live in memory-mapped files under ``PROMETHEUS_MULTIPROC_DIR`` when it is set, and
``billing metrics serve`` adds up the files of every process. The variable must name an empty
directory when the first process starts and must be set before this module is imported (``billing
worker`` sets ``./var/prometheus`` and empties it). Files are named after ``<host>-<pid>``, not the pid
alone, so worker containers of one host can share the directory without two pid 7s writing one file.

Without the variable the metrics live in this process's memory (tests, one-off commands).

The backlog gauges (lag, pending, dead letters) are not recorded here: the exporter reads them from
Redis at every scrape (``BacklogCollector``), so they stay true when every worker is down.

Every function here is cheap (a few memory writes) and never raises into the caller.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, values
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from worker.consumer.backlog import (
    dead_letter_count,
    dead_letters_added,
    read_backlog,
    recheck_count,
)
from worker.contract.keys import Keys
from worker.core.anomalies import AnomalyKind
from worker.core.result import Reason

log = logging.getLogger(__name__)

_HOST = socket.gethostname().replace("_", "-")


def process_identifier() -> str:
    """Unique among the processes sharing a metrics directory, even across containers."""
    return f"{_HOST}-{os.getpid()}"


if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    # prometheus_client picks its value class when it is first imported; choose it again here so the
    # order of imports does not matter and the file names carry the host. A missing directory would
    # fail every metric below at import, taking the worker down with it: create it instead.
    os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)
    values.ValueClass = values.MultiProcessValue(process_identifier)

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

CALLS = Counter(
    "billing_calls_total",
    "Calls finished by the consumer, by outcome (settled, void, unsettled) and unsettled reason.",
    ["outcome", "reason"],
)
HOLDS = Counter("billing_holds_total", "Reservations recorded from open notifications.")
DUPLICATES = Counter(
    "billing_duplicates_total", "Notifications for calls already handled (redelivery, repeats)."
)
DEAD_LETTERS = Counter(
    "billing_dead_letters_total",
    "Calls written to the dead-letter stream, by the step that gave up (consumer, sweep).",
    ["source"],
)
DEFERRED = Counter(
    "billing_deferred_total",
    "Calls left unacknowledged after a database error, to be claimed and redone.",
)
NOTIFICATIONS = Counter("billing_notifications_total", "Notifications read, by stream.", ["stream"])
ACKED = Counter(
    "billing_notifications_acked_total", "Notifications acknowledged, by stream.", ["stream"]
)
CHARGED = Counter("billing_charged_micros_total", "Money charged, in micro-USD.")
SETTLE_LATENCY = Histogram(
    "billing_settle_latency_seconds",
    "From the gateway's close notification to the ledger commit.",
    buckets=LATENCY_BUCKETS,
)
LAST_DRAIN = Gauge(
    "billing_last_drain_timestamp_seconds",
    "When a drain of this stream last finished (any process).",
    ["stream"],
    multiprocess_mode="mostrecent",
)
SWEEPS = Counter(
    "billing_sweep_total",
    "What the sweeper did: finalized, rechecked, settled_late, expired, resolved.",
    ["action"],
)
LAST_SWEEP = Gauge(
    "billing_last_sweep_timestamp_seconds",
    "When a sweep last finished (any process).",
    multiprocess_mode="mostrecent",
)
INTERRUPTED = Counter(
    "billing_task_interruptions_total",
    "Drain or sweep tasks cut short by a Redis or database connection error.",
    ["task"],
)
EXPIRED_TASKS = Counter(
    "billing_tasks_expired_total",
    "Billing tasks discarded unstarted because their expiry passed (a busy machine; beat sends"
    " the next one).",
    ["task"],
)
ALERT_DELIVERIES = Counter(
    "billing_alert_deliveries_total", "Alert deliveries, by result (ok, failed).", ["result"]
)
EXPOSURE = Gauge(
    "billing_alert_exposure_micros",
    "Exposure (micro-USD) of the last closed alert window, by alert kind (unsettled: what the held"
    " calls would cost).",
    ["kind"],
    multiprocess_mode="mostrecent",
)
ANOMALIES = Gauge(
    "billing_alert_anomalies",
    "Contract anomalies found in the last closed alert window, by kind (charge_above_hold: the"
    " calls charged beyond their hold, a true-up each).",
    ["kind"],
    multiprocess_mode="mostrecent",
)
DRIFT = Gauge(
    "billing_drift_median_ppm",
    "Median reported-vs-estimated completion-token drift (ppm) of the last closed drift window, by"
    " model.",
    ["model"],
    multiprocess_mode="mostrecent",
)

AUTH_CORRECTIONS = Counter(
    "billing_authorization_corrections_total",
    "Corrections the sync task made to the authorization store, by kind (a rebuild counts none).",
    ["kind"],
)
AUTH_CORRECTED = Counter(
    "billing_authorization_corrected_micros_total",
    "Micro-USD the sync task moved in the authorization store to match the ledger.",
)
AUTH_REBUILDS = Counter(
    "billing_authorization_rebuilds_total",
    "Times the authorization store was rebuilt from the ledger (its ready key was gone).",
)

SWEEP_ACTIONS = ("finalized", "rechecked", "settled_late", "expired", "resolved")
# The label values each labelled counter is exported with at zero from the start, so that a panel or
# a rule over them reads 0 rather than "No data" before the first event (Prometheus's advice for
# labelled metrics). ``task`` is ``worker.service.tasks``'s labels; ``kind`` the sync's corrections.
TASKS = ("drain", "sweep", "parity", "alerts", "authorization", "purge")
CORRECTION_KINDS = ("missed_release", "never_recorded", "unauthorized_hold", "unseen_charge")
# The billing tasks by name (``billing.<name>``, ``worker.service.tasks``): an expired one is counted
# under its name (``billing_tasks_expired_total``).
TASK_NAMES = (
    "drain", "drain_retired", "sweep", "parity", "alerts", "authorization_sync", "purge",
    "calibrate",
)  # fmt: skip


def _initialize_labels() -> None:
    CALLS.labels("settled", "")
    CALLS.labels("void", "")
    for reason in (*Reason, "unknown"):
        CALLS.labels("unsettled", str(reason))
    for source in ("consumer", "sweep"):
        DEAD_LETTERS.labels(source)
    for action in SWEEP_ACTIONS:
        SWEEPS.labels(action)
    for task in TASKS:
        INTERRUPTED.labels(task)
    for name in TASK_NAMES:
        EXPIRED_TASKS.labels(name)
    for result in ("ok", "failed"):
        ALERT_DELIVERIES.labels(result)
    for kind in CORRECTION_KINDS:
        AUTH_CORRECTIONS.labels(kind)
    for anomaly in AnomalyKind:
        ANOMALIES.labels(str(anomaly))


_initialize_labels()


def record_batch(stream: str, stats: Any) -> None:
    """Count what one drain (or poll) of ``stream`` did; ``stats`` is a ``BatchStats``."""
    try:
        if stats.read:
            NOTIFICATIONS.labels(stream).inc(stats.read)
        if stats.acked:
            ACKED.labels(stream).inc(stats.acked)
        if stats.settled:
            CALLS.labels("settled", "").inc(stats.settled)
        if stats.voided:
            CALLS.labels("void", "").inc(stats.voided)
        counted = 0
        for reason, count in stats.reasons.items():
            CALLS.labels("unsettled", reason).inc(count)
            counted += count
        if stats.unsettled > counted:
            CALLS.labels("unsettled", "unknown").inc(stats.unsettled - counted)
        if stats.held:
            HOLDS.inc(stats.held)
        if stats.duplicates:
            DUPLICATES.inc(stats.duplicates)
        if stats.dead:
            DEAD_LETTERS.labels("consumer").inc(stats.dead)
        if stats.deferred:
            DEFERRED.inc(stats.deferred)
        if stats.charged_micros:
            CHARGED.inc(stats.charged_micros)
        for latency_ms in stats.latencies_ms:
            SETTLE_LATENCY.observe(latency_ms / 1000)
        LAST_DRAIN.labels(stream).set(time.time())
    except Exception:  # metrics must never cost a batch
        log.exception("could not record batch metrics")


def record_sweep(stats: Any) -> None:
    """Count what one sweep did; ``stats`` is a ``SweepStats``."""
    try:
        for action in SWEEP_ACTIONS:
            count = getattr(stats, action)
            if count:
                SWEEPS.labels(action).inc(count)
        if stats.dead:
            DEAD_LETTERS.labels("sweep").inc(stats.dead)
        LAST_SWEEP.set(time.time())
    except Exception:
        log.exception("could not record sweep metrics")


def record_authorization_sync(stats: Any) -> None:
    """Count what one sync of the authorization store did; ``stats`` is a ``SyncStats``."""
    try:
        for correction in stats.corrections:
            AUTH_CORRECTIONS.labels(correction["kind"]).inc()
        if stats.corrections:
            AUTH_CORRECTED.inc(stats.corrected_micros())
        if stats.rebuilt:
            AUTH_REBUILDS.inc()
    except Exception:
        log.exception("could not record authorization metrics")


def interrupted(task: str) -> None:
    INTERRUPTED.labels(task).inc()


def alert_delivery(ok: bool) -> None:
    """For the alert senders: one call per delivery attempt that finished (ok) or gave up."""
    ALERT_DELIVERIES.labels("ok" if ok else "failed").inc()


def record_alert_window(
    exposure: dict[str, int], drift: dict[str, int], anomalies: dict[str, int] | None = None
) -> None:
    """For the alert aggregation: the last closed window's exposure per kind, its anomalies per
    kind (a kind absent: 0 in that window) and the last closed drift window's median per model."""
    try:
        for kind, micros in exposure.items():
            EXPOSURE.labels(kind).set(micros)
        for kind in AnomalyKind:
            ANOMALIES.labels(str(kind)).set((anomalies or {}).get(str(kind), 0))
        for model, ppm in drift.items():
            DRIFT.labels(model).set(ppm)
    except Exception:
        log.exception("could not record alert window metrics")


class BacklogCollector(Collector):
    """Reads lag, pending and dead letters from Redis at scrape time (for the exporter).

    A Redis error yields ``billing_backlog_up 0`` instead of failing the whole scrape.
    """

    def __init__(self, client: Any, keys: Keys) -> None:
        self.client = client
        self.keys = keys

    def collect(self) -> Iterable[GaugeMetricFamily]:
        up = GaugeMetricFamily("billing_backlog_up", "1 when Redis answered the backlog queries.")
        lag = GaugeMetricFamily(
            "billing_consumer_lag",
            "Notifications not yet delivered to any worker (NaN when Redis cannot tell).",
            labels=["stream"],
        )
        pending = GaugeMetricFamily(
            "billing_pending_entries",
            "Notifications delivered to a worker and not yet acknowledged.",
            labels=["stream"],
        )
        oldest = GaugeMetricFamily(
            "billing_oldest_pending_age_seconds",
            "Age of the oldest unacknowledged notification (0 when none).",
            labels=["stream"],
        )
        dead = GaugeMetricFamily(
            "billing_dead_letter_entries", "Entries in the dead-letter stream."
        )
        added = CounterMetricFamily(
            "billing_dead_letters_added",
            "Entries ever added to the dead-letter stream (keeps rising past its cap).",
        )
        recheck = GaugeMetricFamily(
            "billing_recheck_entries", "Unsettled calls kept for late data (recheck set)."
        )
        try:
            backlog = read_backlog(self.client, self.keys)
            dead_count = dead_letter_count(self.client, self.keys)
            dead_added = dead_letters_added(self.client, self.keys)
            recheck_size = recheck_count(self.client, self.keys)
        except Exception as exc:
            log.warning("backlog scrape failed: %s", type(exc).__name__)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        for item in backlog:
            lag.add_metric([item.stream], float("nan") if item.lag is None else item.lag)
            pending.add_metric([item.stream], item.pending)
            oldest.add_metric([item.stream], (item.oldest_pending_age_ms or 0) / 1000)
        dead.add_metric([], dead_count)
        added.add_metric([], dead_added)
        recheck.add_metric([], recheck_size)
        yield from (up, lag, pending, oldest, dead, added, recheck)


def exporter_registry(multiproc_dir: str | None, backlog: Collector | None) -> CollectorRegistry:
    """The registry ``billing metrics serve`` exposes: every worker process's files, or this
    process's own metrics when there is no directory, plus the backlog read from Redis."""
    if multiproc_dir:
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=multiproc_dir)
    else:
        from prometheus_client import REGISTRY

        registry = REGISTRY
    if backlog is not None:
        registry.register(backlog)
    return registry
