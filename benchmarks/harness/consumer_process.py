"""A consumer in its own process, driven over stdin/stdout by a benchmark (``ConsumerProcess``).

The child builds a ``Consumer`` the way the worker runtime does, loads what a worker loads once
(prices, vocabularies), prints ``ready``, waits for ``go`` on stdin, then calls ``Consumer.drain`` in
short windows — the code the Celery drain task runs — until stdin says ``stop`` or closes (with
``BENCH_TRACE=1``, row 4, ``Consumer.poll``: one batch at a time, each poll traced; with
``BENCH_POLL_SIZES=4,8,…``, row 12's phase B, polls of those sizes in turn, each timed:
``consumer.sized_polls``). It then prints one JSON line of totals (including every close → commit
latency; in the sized mode, the polls instead) and exits. Its RSS is read by the parent
from ``/proc/<pid>/status``.

    python -m benchmarks.harness.consumer_process PREFIX DATABASE_URL NAME
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from benchmarks.harness import services

ROOT = Path(__file__).resolve().parents[2]


def run_delay_ns() -> int:
    """Nanoseconds this process's main thread has waited for a CPU while runnable (schedstat)."""
    try:
        return int(Path("/proc/self/schedstat").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def settings_from_env() -> dict[str, int]:
    """The consumer settings a benchmark passes down: BILLING_BATCH_SIZE, BILLING_BLOCK_MS."""
    found = {}
    for name, key in (("batch_size", "BILLING_BATCH_SIZE"), ("block_ms", "BILLING_BLOCK_MS")):
        if os.environ.get(key):
            found[name] = int(os.environ[key])
    return found


def _serve(prefix: str, database_url: str, name: str) -> None:
    from benchmarks.harness.consumer import make_consumer, sized_polls, time_steps, warm
    from worker.consumer.calls import BatchStats

    logging.getLogger("worker").setLevel(logging.ERROR)
    client = services.redis_client(services.REDIS_URL)
    consumer, engine = make_consumer(client, database_url, prefix, name, **settings_from_env())
    warm(consumer)
    # Per poll: where the time went (the consumer's own steps, wrapped on this instance only).
    spent: dict[str, list[float]] = {}
    steps = ("read", "fetch", "reconcile", "ledger_batched", "transaction", "acknowledge")
    time_steps(consumer, steps, spent)
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    stop = threading.Event()

    def watch_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    sizes = tuple(int(size) for size in os.environ.get("BENCH_POLL_SIZES", "").split(",") if size)
    if sizes:
        polls_of_sizes = sized_polls(consumer, sizes, stop.is_set)
        print(json.dumps({"sized_polls": polls_of_sizes}), flush=True)
        engine.dispose()
        client.close()
        return
    total = BatchStats()
    polls = 0
    closes = 0
    # Off unless asked for (row 4): row 8 measures this process's RSS, and the trace would grow it.
    tracing = os.environ.get("BENCH_TRACE") == "1"
    trace: list[dict[str, Any]] = []
    block_ms = consumer.settings.block_ms
    started = time.perf_counter()
    cpu_started = time.process_time()
    while not stop.is_set():
        spent.clear()
        began, cpu, delay = time.perf_counter(), time.process_time(), run_delay_ns()
        # Row 4 traces one poll at a time (one batch, unpipelined); the others run what the Celery
        # task runs, drain, in short windows (a batch read ahead while the last is applied).
        if tracing:
            batch = consumer.poll(0, block_ms=block_ms)
        else:
            batch = consumer.drain(0, seconds=0.25, block_ms=block_ms)
        ended = time.perf_counter()
        closes += len(batch.latencies_ms)
        if not tracing:
            # Only row 4 reads the latencies. Kept for every close they would be this harness's own
            # growth (an int per close), which row 8 would count as the consumer's: the Celery task
            # hands its stats to the metrics and drops them.
            batch.latencies_ms = []
        total.add(batch)
        polls += 1
        if tracing and batch.read:
            # Polls that read something: wall, CPU and run-queue wait (starved) of the whole poll.
            trace.append(
                {
                    "t": began - started,
                    "ms": (ended - began) * 1000,
                    "cpu_ms": (time.process_time() - cpu) * 1000,
                    "starved_ms": (run_delay_ns() - delay) / 1e6,
                    "read": batch.read,
                    "closes": len(batch.latencies_ms),
                    "max_latency_ms": max(batch.latencies_ms, default=0),
                    **{f"{step}_ms": v[0] * 1000 for step, v in spent.items()},
                }
            )
    report = {
        "read": total.read,
        "acked": total.acked,
        "settled": total.settled,
        "unsettled": total.unsettled,
        "voided": total.voided,
        "held": total.held,
        "dead": total.dead,
        "deferred": total.deferred,
        "polls": polls,
        "seconds": time.perf_counter() - started,
        "cpu_seconds": time.process_time() - cpu_started,
        "closes": closes,
        "latencies_ms": total.latencies_ms,
        "batch_size": consumer.settings.batch_size,
        "block_ms": block_ms,
        "trace": trace,
    }
    print(json.dumps(report), flush=True)
    engine.dispose()
    client.close()


class ConsumerProcess:
    """The parent's handle on one consumer child."""

    def __init__(
        self, prefix: str, database_url: str, name: str, env: dict[str, str] | None = None
    ) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.harness.consumer_process",
                prefix,
                database_url,
                name,
            ],
            cwd=ROOT,
            env=None if env is None else {**os.environ, **env},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._expect("ready")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _stdin(self) -> IO[str]:
        assert self.proc.stdin is not None
        return self.proc.stdin

    def _expect(self, word: str) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line != word:
            self.kill()
            raise RuntimeError(f"consumer process said {line!r}, expected {word!r}")

    def go(self) -> None:
        self._stdin().write("go\n")
        self._stdin().flush()

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError(f"no VmRSS for {self.pid}")

    def stop(self, timeout: float = 30.0) -> dict[str, Any]:
        """Ask the child to stop; returns its totals."""
        assert self.proc.stdout is not None
        self._stdin().write("stop\n")
        self._stdin().flush()
        self._stdin().close()
        line = self.proc.stdout.readline()
        self.proc.wait(timeout)
        if not line:
            raise RuntimeError(f"consumer process exited with {self.proc.returncode} and no report")
        return json.loads(line)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def wait_drained(
    client: Any, stream: str, group: str, timeout: float, interval: float = 0.01
) -> float:
    """Wait until ``group`` has read and acknowledged everything on ``stream``; returns the time."""
    deadline = time.perf_counter() + timeout
    length = client.xlen(stream)
    while True:
        groups = {g["name"]: g for g in client.xinfo_groups(stream)}
        info = groups.get(group.encode()) or groups.get(group)
        if info is not None and info["pending"] == 0 and info.get("entries-read") == length:
            return time.perf_counter()
        if time.perf_counter() > deadline:
            raise TimeoutError(f"group {group} did not drain {stream} in {timeout:.0f} s: {info}")
        time.sleep(interval)


if __name__ == "__main__":
    _serve(*sys.argv[1:4])
    os._exit(0)
