"""Per-process resources of a worker: Redis client, database engine, consumer and sweeper.

Built lazily on first use and rebuilt after a fork (Celery's prefork pool forks after import, and
neither a Redis connection pool nor a database pool may be shared across processes).
"""

from __future__ import annotations

import gc
import os
import socket
from dataclasses import dataclass

import redis
from redis.cluster import RedisCluster
from sqlalchemy import Engine

from worker.config import Settings
from worker.consumer.consumer import Consumer
from worker.consumer.pricing import PriceSource
from worker.consumer.sweeper import Sweeper
from worker.fingerprint_key import with_key
from worker.ledger.database import make_engine, session_factory

# CPython collects cyclic garbage every 700 net allocations by default. A batch allocates a few
# hundred thousand short-lived objects (the entries of 200 calls' streams as Redis replies become
# Python objects, the decoded frames) and holds them until it is applied, so the default collector
# scans them, and every module object besides, many times per batch. Nearly nothing here is cyclic
# (reference counting frees it at once), so these thresholds collect far less often without
# growing memory (rows 2 and 8 of BENCHMARKS.md measure the worker so tuned).
GC_THRESHOLDS = (50_000, 20, 20)


def tune_gc() -> None:
    """Freeze what is alive now (modules, settings: never scanned again) and raise the thresholds;
    once per worker process, after start-up."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def redis_client(url: str, *, cluster: bool | None = None) -> redis.Redis | RedisCluster:
    """A client for the event streams; bytes in and out (frames need not be UTF-8).

    With ``cluster`` (default: ``REDIS_CLUSTER`` from the environment) the client is a
    ``RedisCluster`` that discovers the other masters from the node in ``url`` and routes each key
    to its slot; every command the consumer, sweeper and publisher send touches one key, and their
    non-transactional pipelines are split per node by the client, so they run unchanged.
    """
    if cluster is None:
        cluster = Settings.from_env().redis_cluster
    if cluster:
        return RedisCluster.from_url(url, socket_timeout=10, socket_connect_timeout=5)
    return redis.Redis.from_url(
        url, socket_timeout=10, socket_connect_timeout=5, health_check_interval=30
    )


@dataclass
class Runtime:
    pid: int
    settings: Settings
    client: redis.Redis
    engine: Engine
    consumer: Consumer
    sweeper: Sweeper

    @classmethod
    def build(cls, settings: Settings | None = None) -> Runtime:
        settings = settings or Settings.from_env()
        tune_gc()
        engine = make_engine(settings.database_url)
        try:
            settings = with_key(settings, engine)  # no fingerprint without the deployment's key
        except BaseException:
            engine.dispose()
            raise
        client = redis_client(settings.redis_url)
        name = f"{socket.gethostname()}-{os.getpid()}"
        consumer = Consumer(
            client,
            session_factory(engine),
            settings,
            name=name,
            prices=PriceSource(session_factory(engine, readonly=True), settings.price_book),
            recheck_seconds=settings.recheck_seconds,
        )
        return cls(os.getpid(), settings, client, engine, consumer, Sweeper(consumer))

    def close(self) -> None:
        self.client.close()
        self.engine.dispose()


_current: Runtime | None = None


def current() -> Runtime:
    global _current
    if _current is None or _current.pid != os.getpid():
        _current = Runtime.build()
    return _current
