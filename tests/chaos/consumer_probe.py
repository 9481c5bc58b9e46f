"""Run the real consumer in a process of its own until the notification stream is drained, and
report its peak memory above the warmed-up baseline.

The peak is ``VmHWM`` from ``/proc/self/status``, reset to the current RSS after warming up (writing
5 to ``/proc/self/clear_refs``). Not ``ru_maxrss``: Linux carries it across ``execve``, so a probe
started by a large pytest process would report its parent's size.

Usage: ``python consumer_probe.py`` with the worker's environment (REDIS_URL, DATABASE_URL,
BILLING_PREFIX, ...); prints one JSON line.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sqlalchemy import text

from tests.chaos.fuzzing import meta, streamed_entries
from worker.consumer.backlog import stream_backlog
from worker.consumer.calls import BatchStats
from worker.consumer.reconciling import reconcile_record
from worker.service.runtime import Runtime


def status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")


def main() -> None:
    rt = Runtime.build()
    consumer = rt.consumer
    # Warm up without touching the stream under test: connections, the price book, and the
    # estimator's vocabularies (loaded on first use), so the baseline holds all of them.
    rt.client.ping()
    with consumer.sessions() as session:
        session.execute(text("SELECT 1"))
    book = consumer.prices.current()
    frames = [b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}']
    for model in ("gpt-4o", "gpt-4", "gpt-3.5-turbo"):
        request = meta("warm", model=model, include_usage=False)
        reconcile_record(streamed_entries(frames, request), "warm", book)
    reset_peak()
    baseline = status_kb("VmRSS")
    total = BatchStats()
    started = time.monotonic()
    while time.monotonic() - started < 300:
        total.add(consumer.drain(seconds=1.0, block_ms=50))
        info = stream_backlog(rt.client, consumer.keys.events(), consumer.keys.group)
        if info.lag == 0 and info.pending == 0:
            break
    peak = status_kb("VmHWM")
    print(
        json.dumps(
            {
                "baseline_mb": round(baseline / 1024, 1),
                "peak_delta_mb": round((peak - baseline) / 1024, 1),
                "seconds": round(time.monotonic() - started, 1),
                "dead": total.dead,
                "held": total.held,
                "settled": total.settled,
                "unsettled": total.unsettled,
                "voided": total.voided,
            }
        )
    )
    rt.close()


if __name__ == "__main__":
    main()
