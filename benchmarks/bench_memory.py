"""Worker memory: the RSS of one consumer process after 10x as many calls as at a first checkpoint.

As the brief asks, a full run checkpoints after 100,000 and 1,000,000 calls (about ten minutes on a
two-core machine); ``--smoke`` uses 300 and 1,500, and ``--memory-calls`` sets other sizes.

Tiny calls (open, four frame entries, close) are written in slices while a consumer process runs,
never more than ``BACKLOG`` notifications ahead of it. At each checkpoint the writer waits until the
consumer group has acknowledged everything, then reads the child's ``VmRSS`` from ``/proc``. A worker
that keeps per-call state (caches keyed by request or account, growing lists) shows up as a ratio
above 1. Redis ``used_memory`` is read at the same checkpoints: acknowledged notifications stay in the
notification stream until something trims it.
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks.harness import history, services, workload
from benchmarks.harness.consumer_process import ConsumerProcess, wait_drained
from worker.pipeline.keys import Keys

TARGET_RATIO = 1.2
BACKLOG = 20_000
SLICE = 5_000


def _lag(client: Any, stream: str, group: str) -> int:
    for info in client.xinfo_groups(stream):
        if info["name"] in (group, group.encode()):
            return client.xlen(stream) - (info.get("entries-read") or 0)
    return client.xlen(stream)


def run(smoke: bool = False, first: int | None = None, last: int | None = None) -> dict[str, Any]:
    first = first or (300 if smoke else 100_000)
    last = last or (1_500 if smoke else 1_000_000)
    checkpoints: dict[int, dict[str, float]] = {}
    with (
        services.redis_prefix("memory") as (client, prefix),
        services.pg_database("memory") as url,
        services.autovacuum(url),
    ):
        history.warm(url)
        keys = Keys(prefix)
        stream = keys.events(0)
        child = ConsumerProcess(prefix, url, "memory")
        try:
            rss_start = child.rss_bytes()
            child.go()
            started = time.perf_counter()
            written = 0
            publish_s = 0.0
            for checkpoint in (first, last):
                while written < checkpoint:
                    upto = min(checkpoint, written + SLICE)
                    publish_s += workload.publish_tiny(client, keys, prefix, written, upto)
                    written = upto
                    while _lag(client, stream, keys.group) > BACKLOG:
                        time.sleep(0.05)
                wait_drained(client, stream, keys.group, timeout=3600)
                time.sleep(0.5)  # let the last batch's garbage go
                checkpoints[checkpoint] = {
                    "rss": child.rss_bytes(),
                    "seconds": time.perf_counter() - started,
                    "redis_used_memory": client.info("memory")["used_memory"],
                }
            report = child.stop()
        finally:
            child.kill()
    a, b = checkpoints[first], checkpoints[last]
    ratio = b["rss"] / a["rss"]
    return {
        "first_calls": first,
        "last_calls": last,
        "rss_start": rss_start,
        "rss_first": a["rss"],
        "rss_last": b["rss"],
        "ratio": ratio,
        "seconds": b["seconds"],
        "publish_seconds": publish_s,
        "calls_per_s": last / b["seconds"],
        "redis_growth_per_call": (b["redis_used_memory"] - a["redis_used_memory"]) / (last - first),
        "settled": report["settled"],
        "deferred": report["deferred"],
        "target_ratio": TARGET_RATIO,
        "meets_target": ratio <= TARGET_RATIO,
    }


if __name__ == "__main__":
    import sys

    args = [int(a) for a in sys.argv[1:] if a.isdigit()]
    figures = run("--smoke" in sys.argv, *args)
    for name, value in figures.items():
        print(f"{name}: {value}")
