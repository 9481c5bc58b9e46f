"""A poll's cost by its size, measured beside row 4's publisher load: the input of row 4's model.

Calls of the workload's mix are written whole (as row 4's publisher writes them), then a consumer
process of their own (``consumer_process`` with ``BENCH_POLL_SIZES``) polls them at ``SIZES``
entries in turn, each poll timed, while another process writes yet other calls at row 4's rate (its
own seed and prefix, which no consumer reads). ``twin`` does that on its own prefix and database,
just after a round of row 4, so that the costs carry the machine's speed of that round's minutes
(a shared machine's speed drifts by a quarter within one ``make bench``, and row 4's queue, close
to its poller's capacity, amplifies a poll's cost several times over in its latency).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import time
from collections.abc import Iterator
from typing import Any

import redis

from benchmarks.harness import history, services, speed, workload
from benchmarks.harness.consumer_process import ConsumerProcess, wait_drained
from worker.contract.keys import Keys
from worker.contract.publisher import Publisher

# The poll sizes, taken in turn: around row 4's polls (a few to a few tens of entries).
SIZES = (4, 8, 16, 32, 64)
SEED_LOAD = workload.SEED + 100  # the publisher load's calls: never a measured call
LOAD_SECONDS = 60.0  # at most; the load stops once the polls are done
TWIN_LOAD_SECONDS = 20.0  # a twin's polls take a few seconds once its consumer has started


def whole_calls(client: Any, keys: Keys, calls: list[Any]) -> None:
    """Write ``calls`` as row 4's publisher does, each whole at once."""
    publisher = Publisher(client, keys)
    for call in calls:
        workload.write_call(client, publisher, keys, call)


@contextlib.contextmanager
def publishing(rate: float, seconds: float = LOAD_SECONDS) -> Iterator[None]:
    """Row 4's publisher beside the block: other calls of the same mix (their own seed and prefix,
    which no consumer reads) written whole at ``rate`` calls/s by another process, as row 4's
    benchmark process writes its calls, for at most ``seconds``."""
    with services.redis_prefix("poll-load") as (_client, prefix):
        calls = workload.simulated_calls(max(1, int(rate * seconds)), prefix, seed=SEED_LOAD)
        spawn = multiprocessing.get_context("spawn")  # the caller may have threads: no fork
        ready, stop = spawn.Event(), spawn.Event()
        child = spawn.Process(
            target=_publish_at, args=(calls, rate, prefix, ready, stop), daemon=True
        )
        child.start()
        try:
            if not ready.wait(120):
                raise RuntimeError("the load's publisher did not start")
            yield
        finally:
            stop.set()
            child.join(10)
            if child.is_alive():
                child.kill()


def _publish_at(calls: list[Any], rate: float, prefix: str, ready: Any, stop: Any) -> None:
    client = redis.Redis.from_url(services.REDIS_URL)
    keys = Keys(prefix)
    publisher = Publisher(client, keys)
    ready.set()
    started = time.perf_counter()
    for number, call in enumerate(calls):
        if stop.is_set():
            return
        wait = started + number / rate - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        workload.write_call(client, publisher, keys, call)


def sized_polls(
    client: Any,
    keys: Keys,
    prefix: str,
    url: str,
    name: str,
    calls: list[Any],
    load_rate: float,
    load_seconds: float = LOAD_SECONDS,
) -> list[tuple[int, float]]:
    """``calls`` written whole, then polled at ``SIZES`` in turn by a consumer process beside the
    publisher load at ``load_rate`` calls/s: every full poll's (entries, wall seconds)."""
    whole_calls(client, keys, calls)
    sizes = ",".join(map(str, SIZES))
    child = ConsumerProcess(prefix, url, name, env={"BENCH_POLL_SIZES": sizes})
    try:
        with publishing(load_rate, load_seconds):
            child.go()
            wait_drained(client, keys.events(0), keys.group, timeout=600)
            return [(int(n), float(w)) for n, w in child.stop()["sized_polls"]]
    finally:
        child.kill()


def twin(count: int, seed: int, load_rate: float) -> dict[str, Any]:
    """``count`` calls of the mix (``seed``) polled as ``sized_polls`` does, on a prefix and database
    of their own: the polls and the speed probe's reading around them."""
    with (
        services.redis_prefix("poll-twin") as (client, prefix),
        services.pg_database("poll_twin") as url,
        services.autovacuum(url),
    ):
        history.warm(url)
        calls = workload.simulated_calls(count, run_id=prefix, seed=seed)
        before = speed.probe()
        polls = sized_polls(
            client, Keys(prefix), prefix, url, "poll-twin", calls, load_rate, TWIN_LOAD_SECONDS
        )
        return {"polls": polls, "calls": count, "speed_s": (before + speed.probe()) / 2}
