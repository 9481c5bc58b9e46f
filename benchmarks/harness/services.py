"""The servers a benchmark runs against, each benchmark in its own corner of them.

Every benchmark gets its own Redis key prefix (``bench-<name>-<pid>``) and its own PostgreSQL database
(``billing_bench_<name>_<pid>``, migrated to head), and removes both when it ends, however it ends.
The pid keeps two engineers' runs on the same servers apart. Other people's keys and databases are
never touched: keys are deleted by prefix, databases by their exact name.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import redis
from sqlalchemy import text

from devtools.localservers.databases import create_database, drop_database
from worker.ledger.database import make_engine, upgrade
from worker.service.runtime import redis_client

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
PG_ADMIN_URL = os.environ.get(
    "BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def redis_url(db: int | None = None) -> str:
    """The benchmark Redis URL, optionally on another database index."""
    if db is None:
        return REDIS_URL
    return REDIS_URL.rsplit("/", 1)[0] + f"/{db}"


def delete_prefix(client: redis.Redis, prefix: str) -> int:
    """Delete every key under ``prefix:``; returns how many."""
    deleted = 0
    batch: list[bytes] = []
    for key in client.scan_iter(match=f"{prefix}:*", count=5000):
        batch.append(key)
        if len(batch) >= 5000:
            deleted += client.unlink(*batch)
            batch.clear()
    if batch:
        deleted += client.unlink(*batch)
    return deleted


@contextmanager
def redis_prefix(name: str) -> Iterator[tuple[redis.Redis, str]]:
    """A client and a fresh key prefix, whose keys are all deleted at the end."""
    client = redis_client(REDIS_URL)
    prefix = f"bench-{name}-{os.getpid()}"
    delete_prefix(client, prefix)
    try:
        yield client, prefix
    finally:
        delete_prefix(client, prefix)
        client.close()


@contextmanager
def pg_database(name: str, *, migrate: bool = True) -> Iterator[str]:
    """A new PostgreSQL database migrated to head; yields its URL and drops it at the end."""
    database = f"billing_bench_{name}_{os.getpid()}"
    url = create_database(PG_ADMIN_URL, database)
    try:
        if migrate:
            upgrade(url)
        yield url
    finally:
        drop_database(PG_ADMIN_URL, database)


@contextmanager
def autovacuum(
    url: str, every: float = 5.0, log: list[tuple[float, float]] | None = None
) -> Iterator[None]:
    """``VACUUM ANALYZE`` the database every ``every`` seconds while the block runs.

    This server runs with ``autovacuum = off`` (its CI configuration), so tables that grow from empty
    during a benchmark are never analyzed: PostgreSQL keeps planning them as empty (the foreign-key
    checks of the ledger inserts included), and a consumer slows down the longer it runs.
    Production runs autovacuum; this stands in for it, and its cost lands in the run.
    ``log`` gets the (start, end) ``time.perf_counter()`` of each run.
    """
    stop = threading.Event()
    engine = make_engine(url, isolation_level="AUTOCOMMIT")

    def loop() -> None:
        with engine.connect() as conn:
            while not stop.wait(every):
                started = time.perf_counter()
                conn.execute(text("VACUUM ANALYZE"))
                if log is not None:
                    log.append((started, time.perf_counter()))

    thread = threading.Thread(target=loop, name="autovacuum", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        engine.dispose()


def server_versions() -> dict[str, str]:
    """Redis (INFO server) and PostgreSQL (SELECT version()) versions, as the servers report them."""
    client = redis_client(REDIS_URL)
    try:
        info = client.info("server")
        redis_version = f"Redis {info.get('redis_version', '?')}"
    finally:
        client.close()
    admin = make_engine(PG_ADMIN_URL)
    try:
        with admin.connect() as conn:
            pg_version = str(conn.execute(text("SELECT version()")).scalar_one())
    finally:
        admin.dispose()
    return {"redis": redis_version, "postgresql": pg_version.split(" on ")[0]}
