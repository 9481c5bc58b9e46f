"""Calls/s of the naive design — one Celery task per frame — on a sample of simulated calls.

The sample is the first calls of the simulated workload (default fault mix) that the naive design
can express: an open, entries, a close (calls with notifications the publisher never writes, a
crash or frames after the close are skipped). Every task of the sample is enqueued first, on a
queue the worker does not read yet, as row 2 writes its calls first; then a real ``celery worker``
(prefork, ``benchmarks.naive_app``), already started and warmed up, is told to consume that queue,
and the run is timed until the last call is settled in PostgreSQL. ``processes`` is its pool size:
one for the row (row 2 is one worker process), and the suite also runs one process per core.
The broker is the same Redis server on database index ``BENCH_NAIVE_REDIS_DB`` (13).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from typing import Any

import redis
from celery import Celery

from benchmarks.harness import history, services, workload
from benchmarks.harness.consumer_process import ROOT
from worker.simulation import SimCall
from worker.simulation.wire import Close, Frames, Open, Response

BINDINGS = ("_kombu.binding.", "_kombu.binding_permanent.")
REDIS_DB = int(os.environ.get("BENCH_NAIVE_REDIS_DB", "13"))


def expressible(call: SimCall) -> bool:
    kinds = [type(op) for op in call.ops]
    allowed = all(kind in (Open, Frames, Response, Close) for kind in kinds)
    return allowed and kinds.count(Open) == 1 and kinds.count(Close) == 1


def sample(count: int, run_id: str) -> list[SimCall]:
    calls = workload.simulated_calls(count * 2 + 20, run_id=run_id)
    chosen = [call for call in calls if expressible(call)][:count]
    if len(chosen) < count:
        raise AssertionError(f"only {len(chosen)} expressible calls")
    return chosen


def enqueue(app: Celery, queue: str, call: SimCall) -> int:
    """Send one call's tasks as the naive gateway would; returns how many tasks."""
    rid = call.request_id
    meta = next(op.body for op in call.ops if isinstance(op, Open)).decode()
    sent = 0
    entries = 0
    for op in call.ops:
        if isinstance(op, Open):
            app.send_task("naive.open", args=[meta], queue=queue)
        elif isinstance(op, Frames):
            for body in op.entries:
                app.send_task("naive.frame", args=[rid, entries, body], queue=queue)
                entries += 1
                sent += 1
        elif isinstance(op, Response):
            app.send_task("naive.response", args=[rid, op.status, op.body.decode()], queue=queue)
            entries += 1
        elif isinstance(op, Close):
            app.send_task("naive.settle", args=[rid, meta, entries], queue=queue)
        sent += not isinstance(op, Frames)
    return sent


def _wait_for(client: redis.Redis, key: str, value: int, timeout: float, worker: Any) -> float:
    deadline = time.perf_counter() + timeout
    while int(client.get(key) or 0) < value:
        if worker.poll() is not None:
            raise RuntimeError(f"celery worker exited with {worker.returncode}")
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{key} did not reach {value} in {timeout:.0f} s")
        time.sleep(0.005)
    return time.perf_counter()


def run(smoke: bool = False, processes: int = 1) -> dict[str, Any]:
    count = 5 if smoke else 30
    broker = services.redis_url(REDIS_DB)
    prefix = f"bench-naive-{os.getpid()}"
    warm_queue, queue = f"{prefix}-warm", prefix
    client = redis.Redis.from_url(broker)
    services.delete_prefix(client, prefix)
    calls = sample(count, run_id=prefix)
    shape = workload.measure(calls)
    app = Celery("naive-gateway", broker=broker)
    app.conf.broker_connection_retry_on_startup = True
    worker = None
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in the finally below
    try:
        with services.pg_database("naive") as url:
            history.warm(url)
            env = {
                **os.environ,
                "BENCH_NAIVE_BROKER": broker,
                "BENCH_NAIVE_REDIS": broker,
                "BENCH_NAIVE_PREFIX": prefix,
                "BENCH_NAIVE_DATABASE_URL": url,
            }
            node = f"{prefix}@bench"
            worker = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "benchmarks.naive_app", "worker",
                 "-c", str(processes), "-Q", warm_queue, "-n", node, "-l", "ERROR",
                 "--without-gossip", "--without-mingle", "--without-heartbeat"],
                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log,
            )  # fmt: skip
            for _ in range(8):
                app.send_task("naive.ping", queue=warm_queue)
            _wait_for(client, f"{prefix}:ping", 8, 120, worker)

            tasks = sum(enqueue(app, queue, call) for call in calls)
            started = time.perf_counter()
            app.control.add_consumer(queue, destination=[node], reply=True, timeout=10)
            finished = _wait_for(client, f"{prefix}:settled", count, 900, worker)
            seconds = finished - started
    finally:
        if worker is not None:
            worker.terminate()
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        services.delete_prefix(client, prefix)
        client.delete(*(f"{name}{q}" for q in (queue, warm_queue) for name in ("", *BINDINGS)))
        client.close()
        log.seek(0)
        errors = [
            line for line in log.read().decode(errors="replace").splitlines() if "Error" in line
        ]
        log.close()
        if errors:
            print("\n".join(errors[-20:]), file=sys.stderr)
    return {
        "calls": count,
        "processes": processes,
        "tasks": tasks,
        "frames": shape.frames,
        "seconds": seconds,
        "calls_per_s": count / seconds,
        "tasks_per_s": tasks / seconds,
    }


if __name__ == "__main__":
    for name, value in run(smoke="--smoke" in sys.argv).items():
        print(f"{name}: {value}")
