"""Two consumer processes against one, in calls/s, with the servers' CPU share during each run.

In ``ROUNDS`` pairs, for each of 1 and 2 consumers: a fresh database and prefix, the same simulated
calls written first, then the consumer processes (``benchmarks.harness.consumer_process``, warmed
up) are told to go together and the run is timed until their group has read and acknowledged every
notification. CPU shares are
CPU seconds over wall seconds (1.0 = one core busy); the machine's core count bounds their sum, and
the machine's own busy CPUs (``/proc/stat``) over the run say how much other work took besides.
"""

from __future__ import annotations

import os
import time
from typing import Any

from benchmarks.harness import cpu, history, services, workload
from benchmarks.harness.consumer_process import ConsumerProcess, wait_drained
from worker.contract.keys import Keys


def _one(processes: int, count: int) -> dict[str, Any]:
    name = f"scale{processes}"
    with (
        services.redis_prefix(name) as (client, prefix),
        services.pg_database(name) as url,
        services.autovacuum(url),
    ):
        history.warm(url)
        keys = Keys(prefix)
        calls = workload.simulated_calls(count, run_id=prefix)
        shape = workload.measure(calls)
        workload.publish(calls, client, keys)
        children = [ConsumerProcess(prefix, url, f"{name}-{i}") for i in range(processes)]
        try:
            database = url.rsplit("/", 1)[1]
            redis_meter = cpu.CpuMeter(cpu.redis_pids(client))
            pg_meter = cpu.CpuMeter(cpu.postgres_pids(database))
            consumer_meter = cpu.CpuMeter(child.pid for child in children)
            for meter in (redis_meter, pg_meter, consumer_meter):
                meter.start()
            machine = cpu.busy_jiffies()
            started = time.perf_counter()
            for child in children:
                child.go()
            finished = wait_drained(client, keys.events(0), keys.group, timeout=900)
            seconds = finished - started
            machine_cpu = cpu.machine_busy(machine, os.cpu_count() or 1)
            redis_meter.stop()
            pg_meter.stop(cpu.postgres_pids(database))
            consumer_meter.stop()
            reports = [child.stop() for child in children]
        finally:
            for child in children:
                child.kill()
    return {
        "processes": processes,
        "calls": shape.calls,
        "closed_calls": shape.closed,
        "seconds": seconds,
        "calls_per_s": shape.closed / seconds,
        "redis_cpu": redis_meter.seconds / seconds,
        "postgres_cpu": pg_meter.seconds / seconds,
        "consumers_cpu": consumer_meter.seconds / seconds,
        "machine_cpu": machine_cpu,
        "settled": sum(r["settled"] for r in reports),
        "deferred": sum(r["deferred"] for r in reports),
    }


# Pairs of runs (one process, two processes), the order alternating from pair to pair: this machine's
# speed drifts within minutes, and a single pair measured the drift as often as the scaling (three
# pairs of one run: 1.13x, 1.42x and 1.83x). A pair takes some 20 s.
ROUNDS = 5


def run(smoke: bool = False) -> dict[str, Any]:
    """The median pair by its ratio (its runs are ``one`` and ``two``), with every pair's ratio."""
    count = 80 if smoke else 2000
    pairs = []
    for round_ in range(1 if smoke else ROUNDS):
        if round_ % 2 == 0:
            one = _one(1, count)
            two = _one(2, count)
        else:
            two = _one(2, count)
            one = _one(1, count)
        pairs.append((two["calls_per_s"] / one["calls_per_s"], one, two))
    pairs.sort(key=lambda pair: pair[0])
    ratio, one, two = pairs[len(pairs) // 2]
    return {
        "one": one,
        "two": two,
        "cores": os.cpu_count(),
        "ratio": ratio,
        "ratios": [pair[0] for pair in pairs],
    }


if __name__ == "__main__":
    import sys

    for name, value in run(smoke="--smoke" in sys.argv).items():
        print(f"{name}: {value}")
