"""Prometheus metrics of the gateway's tee (docs/metrics.md, *Gateway*).

They live in the gateway's process, on the default registry, beside the gateway's own metrics; with
``PROMETHEUS_MULTIPROC_DIR`` set (a gateway with several worker processes) the gauges are summed over
the live processes. Names follow ``worker.metrics``: ``billing_`` then what is counted.
"""

from __future__ import annotations

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
    "Batches written to the spool file (Redis unreachable, or the queue full).",
)
REPLAYED = Counter(
    "billing_gateway_replayed_total", "Batches replayed from a spool file into Redis."
)
SPOOL_BYTES = Gauge(
    "billing_gateway_spool_bytes",
    "Bytes of spool files not yet replayed (this process's and those it adopted).",
    multiprocess_mode="livesum",
)
TORN = Counter(
    "billing_gateway_torn_records_total",
    "Torn or damaged spool records skipped on replay (a crash mid-write, a full disk).",
)
DUPLICATES = Counter(
    "billing_gateway_duplicate_entries_total",
    "Call-stream entries Redis refused on replay because they were already written.",
)
REJECTED = Counter(
    "billing_gateway_rejected_total",
    "Redis commands refused for another reason (logged with the error; never retried).",
)
LOST = Counter(
    "billing_gateway_lost_total",
    "Batches neither written to Redis nor to the spool file (the spool could not be written).",
)
