"""The consumer as a benchmark builds and watches it: built as the worker's runtime builds one, warmed
as a worker process is, with its steps optionally timed on the instance (``Consumer.wrap_step``,
by the step names of ``worker.consumer.consumer``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import redis
from sqlalchemy import Engine

from benchmarks.harness import services
from worker.config import Settings
from worker.consumer.consumer import Consumer
from worker.core.estimate import estimate
from worker.fingerprint_key import with_key
from worker.ledger.database import make_engine, session_factory
from worker.service.runtime import tune_gc


def make_consumer(
    client: redis.Redis, database_url: str, prefix: str, name: str, **settings: Any
) -> tuple[Consumer, Engine]:
    """A consumer as ``worker.service.runtime`` builds one, on the benchmark's prefix and database,
    in a process tuned as the runtime tunes a worker's (``tune_gc``; the transport pass, which runs
    in the same process, is measured so tuned too)."""
    tune_gc()
    config = Settings(
        redis_url=services.REDIS_URL, database_url=database_url, prefix=prefix, **settings
    )
    engine = make_engine(database_url)
    config = with_key(config, engine)
    consumer = Consumer(client, session_factory(engine), config, name=name)
    return consumer, engine


def warm(consumer: Consumer) -> None:
    """Load what a worker loads once per process: the price book and both vocabularies."""
    consumer.prices.current()
    for model in ("gpt-4o", "gpt-4"):
        estimate(model, [{"role": "user", "content": "warm"}], [], [])
    for stream in consumer.keys.all_events():
        consumer.intake.ensure_group(stream)


def sized_polls(
    consumer: Consumer, sizes: tuple[int, ...], stop: Callable[[], bool]
) -> list[tuple[int, float]]:
    """What ``Consumer.poll`` does (read, then process), at batch sizes taken in turn from
    ``sizes``, until ``stop()``; each poll's (entries read, wall seconds), but for the polls that
    found fewer entries than their size (a backlog's last few: a size of their own)."""
    stream = consumer.keys.events(0)
    polls: list[tuple[int, float]] = []
    turn = 0
    while not stop():
        began = time.perf_counter()
        size = sizes[turn % len(sizes)]
        entries = consumer.read(stream, None, count=size)
        if not entries:
            time.sleep(0.001)
            continue
        turn += 1
        stats = consumer.process(stream, entries)
        if stats.read == size:
            polls.append((stats.read, time.perf_counter() - began))
    return polls


def time_steps(
    consumer: Consumer, names: Iterable[str], spent: dict[str, list[float]]
) -> Callable[[], None]:
    """Time each of the consumer's steps ``names`` (``consumer.steps``: ``read``, ``prepare``,
    ``gather``, ``fetch``, ``reconcile``, ``apply``, ``transaction``, ``ledger_batched``,
    ``ledger_per_call``, ``acknowledge``, …) so that each run of one adds to ``spent[name]``:
    [wall s, the calling thread's CPU s, runs]. Returns the function that puts them back."""
    undo = []
    for name in names:

        def timed(work: Callable[[Any], None], batch: Any, _name: str = name) -> None:
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                work(batch)
            finally:
                found = spent.setdefault(_name, [0.0, 0.0, 0])
                found[0] += time.perf_counter() - wall
                found[1] += time.thread_time() - cpu
                found[2] += 1

        undo.append(consumer.wrap_step(name, timed))

    def restore() -> None:
        for step in reversed(undo):
            step()

    return restore
