"""Run the real consumer in a process of its own until the notification stream is drained, and
report its peak memory above the warmed-up baseline (``ru_maxrss`` against ``/proc/self/statm``).

Usage: ``python consumer_probe.py`` with the worker's environment (REDIS_URL, DATABASE_URL,
BILLING_PREFIX, ...); prints one JSON line.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sqlalchemy import text

from tests.chaos.fuzzing import meta, streamed_entries
from worker.pipeline.backlog import stream_backlog
from worker.pipeline.consumer import BatchStats, reconcile_record
from worker.pipeline.runtime import Runtime


def rss_kb() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


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
    baseline = rss_kb()
    total = BatchStats()
    started = time.monotonic()
    while time.monotonic() - started < 300:
        total.add(consumer.poll(block_ms=50))
        info = stream_backlog(rt.client, consumer.keys.events(), consumer.keys.group)
        if info.lag == 0 and info.pending == 0:
            break
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
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
