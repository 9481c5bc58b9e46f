"""Prometheus metrics of the gateway's tee (docs/metrics.md, *Gateway*).

They live in the gateway's process, on the default registry, beside the gateway's own metrics; with
``PROMETHEUS_MULTIPROC_DIR`` set (a gateway with several worker processes) the byte gauges are
summed over the live processes, the spool's age is their largest and its writability their least.
Names follow ``worker.metrics``: ``billing_`` then what is counted.
"""

from __future__ import annotations

import threading
import time

from prometheus_client import Counter, Gauge

QUEUED = Counter(
    "billing_gateway_queued_total",
    "Batches of writes the tee queued in memory (one per call event).",
)
QUEUE_BYTES = Gauge(
    "billing_gateway_queue_bytes",
    "Bytes of writes queued in memory, not yet sent to Redis.",
    multiprocess_mode="livesum",
)
PUBLISHED = Counter(
    "billing_gateway_published_total", "Redis commands the tee wrote (queued or replayed)."
)
SPOOLED = Counter(
    "billing_gateway_spooled_total",
    "Batches written to the spool file (Redis unreachable or refusing writes, or the queue full).",
)
REPLAYED = Counter(
    "billing_gateway_replayed_total", "Batches replayed from a spool file into Redis."
)
SPOOL_BYTES = Gauge(
    "billing_gateway_spool_bytes",
    "Bytes of spool files not yet replayed (this process's and those it adopted).",
    multiprocess_mode="livesum",
)
SPOOL_AGE = Gauge(
    "billing_gateway_spool_age_seconds",
    "Age of the oldest spooled write not yet replayed (0 when none is waiting).",
    multiprocess_mode="livemax",
)
SPOOL_WRITABLE = Gauge(
    "billing_gateway_spool_writable",
    "1 when the spool directory could be written at the last try (start-up, or a spill), else 0.",
    multiprocess_mode="livemin",
)
TORN = Counter(
    "billing_gateway_torn_records_total",
    "Torn or damaged spool records skipped on replay (a crash mid-write, a full disk).",
)
DUPLICATES = Counter(
    "billing_gateway_duplicate_entries_total",
    "Call-stream entries Redis refused on replay because they were already written.",
)
REFUSED = Counter(
    "billing_gateway_refused_total",
    "Batches Redis refused for a state it leaves by itself or by an operator's hand (out of"
    " memory, a read-only replica, loading...): nothing of them written; spooled and retried.",
    ["error"],
)
QUARANTINED = Counter(
    "billing_gateway_quarantined_total",
    "Redis commands refused for good (a wrong type...): kept in the quarantine file, not retried.",
)
LOST = Counter(
    "billing_gateway_lost_total",
    "Batches neither written to Redis nor to a spool or quarantine file (the disk refused them).",
)


class _Oldest:
    """``SPOOL_AGE`` over every tee of the process: each reports when its oldest write not yet
    replayed was spooled (None: nothing waits), and the gauge is the age of the oldest."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: dict[int, float] = {}

    def report(self, owner: int, since: float | None) -> None:
        with self._lock:
            if since is None:
                self._since.pop(owner, None)
            else:
                self._since[owner] = since
            oldest = min(self._since.values(), default=None)
        SPOOL_AGE.set(0.0 if oldest is None else max(0.0, time.time() - oldest))


SPOOL_OLDEST = _Oldest()
