"""Settle latency, close notification → ledger commit, at half the measured maximum load.

A consumer process (``benchmarks.consumer_process``) runs while this process writes simulated calls
at a fixed rate, each whole call at its scheduled instant (its ``close`` carries the time it was
written). The consumer's ``BatchStats.latencies_ms`` holds commit time - close ``ts`` per reconciled
call; p50 and p99 are taken over all of them. The rate is half of the end-to-end maximum measured in
the same run (row 2). The publisher shares the machine with the consumer, as a gateway would not;
that makes the figure pessimistic, not optimistic.
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks import services, workload
from benchmarks.consumer_process import ConsumerProcess, wait_drained
from worker.pipeline.keys import Keys
from worker.pipeline.publisher import Publisher

TARGET_P99_MS = 1000


def percentile(values: list[int], fraction: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return float(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))])


def run(max_calls_per_s: float, smoke: bool = False) -> dict[str, Any]:
    rate = max_calls_per_s / 2
    seconds = 4.0 if smoke else 30.0
    count = max(20, int(rate * seconds))
    with (
        services.redis_prefix("latency") as (client, prefix),
        services.pg_database("latency") as url,
        services.autovacuum(url),
    ):
        keys = Keys(prefix)
        calls = workload.simulated_calls(count, run_id=prefix)
        publisher = Publisher(client, keys)
        child = ConsumerProcess(prefix, url, "latency")
        try:
            child.go()
            started = time.perf_counter()
            behind = 0.0
            for number, call in enumerate(calls):
                due = started + number / rate
                wait = due - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                else:
                    behind = max(behind, -wait)
                workload.write_call(client, publisher, keys, call)
            published = time.perf_counter() - started
            wait_drained(client, keys.events(0), keys.group, timeout=300)
            report = child.stop()
        finally:
            child.kill()
    latencies = report["latencies_ms"]
    p99 = percentile(latencies, 0.99)
    return {
        "rate": rate,
        "max_rate": max_calls_per_s,
        "calls": count,
        "published_seconds": published,
        "achieved_rate": count / published,
        "publisher_behind_ms": behind * 1000,
        "samples": len(latencies),
        "p50_ms": percentile(latencies, 0.5),
        "p99_ms": p99,
        "max_ms": max(latencies) if latencies else float("nan"),
        "target_p99_ms": TARGET_P99_MS,
        "meets_target": p99 < TARGET_P99_MS,
    }


if __name__ == "__main__":
    import sys

    for name, value in run(float(sys.argv[1]), smoke="--smoke" in sys.argv).items():
        print(f"{name}: {value}")
