"""Shared database fixtures: the same tests run on SQLite and on PostgreSQL.

* ``sqlite_url`` / ``pg_url`` (session): a migrated database per xdist worker; PostgreSQL gets a
  uniquely named database ``billing_test_<worker_id>``, created at the start and dropped at the end.
  Without a reachable server the PostgreSQL variants fail: a skipped engine would hide a gap.
* ``engine`` (session, parameterised ``sqlite`` / ``postgresql``): an engine on that database;
  ``pg_engine`` is the PostgreSQL one alone.
* ``session`` (function): a Session inside an outer transaction that is rolled back after the test;
  ``session.commit()`` only releases a SAVEPOINT. On PostgreSQL the deferred constraint triggers
  (every ledger transaction balances) are checked before the rollback, so each test is audited.
* ``redis_client`` / ``prefix`` (function): the real Redis and a key prefix cleaned after the test.
* ``sessions`` (function): a sessionmaker whose commits are real, for tests that need several
  connections; use unique request and account ids there (``unique_id``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
import redis
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from devtools.localservers.databases import create_database, drop_database
from worker.ledger.database import make_engine, upgrade

REDIS_URL = os.environ.get("BILLING_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
PG_ADMIN_URL = os.environ.get(
    "BILLING_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def create_pg_database(name: str) -> str:
    """Create (or re-create) an empty PostgreSQL database; returns its URL."""
    try:
        return create_database(PG_ADMIN_URL, name)
    except OperationalError as exc:
        pytest.fail(f"PostgreSQL not available: {str(exc.orig).splitlines()[0]}")


def drop_pg_database(name: str) -> None:
    drop_database(PG_ADMIN_URL, name)


@pytest.fixture(scope="session")
def pg_database_name(worker_id: str, testrun_uid: str) -> str:
    """A database name of this run and this xdist worker: two test runs on one server (a developer's
    and CI's, or two clones) never drop each other's database."""
    return f"billing_test_{testrun_uid[:10]}_{worker_id}"


@pytest.fixture(scope="session")
def pg_url(pg_database_name: str) -> Iterator[str]:
    name = pg_database_name
    url = create_pg_database(name)
    upgrade(url)
    yield url
    drop_pg_database(name)


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'billing.db'}"
    upgrade(url)
    return url


@pytest.fixture(
    scope="session",
    params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)],
)
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    url = request.getfixturevalue("pg_url" if request.param == "postgresql" else "sqlite_url")
    engine = make_engine(url)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def pg_engine(pg_url: str) -> Iterator[Engine]:
    """PostgreSQL only, for what SQLite cannot do (constraint triggers, row locks)."""
    engine = make_engine(pg_url)
    yield engine
    engine.dispose()


@pytest.fixture
def session(engine: Engine) -> Iterator[Session]:
    with engine.connect() as conn:
        outer = conn.begin()
        session = Session(bind=conn, join_transaction_mode="create_savepoint")
        try:
            yield session
            if engine.dialect.name == "postgresql" and outer.is_active:
                session.close()
                try:
                    conn.exec_driver_sql("SET CONSTRAINTS ALL IMMEDIATE")
                except DBAPIError as exc:
                    if "current transaction is aborted" not in str(exc.orig):
                        raise
        finally:
            session.close()
            outer.rollback()


@pytest.fixture
def sessions(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@pytest.fixture
def unique_id() -> str:
    return uuid.uuid4().hex[:12]


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    """The real Redis of the machine (``BILLING_TEST_REDIS_URL``); a missing server fails the test."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError:
        pytest.fail(f"Redis not reachable at {REDIS_URL}")
    yield client
    client.close()


@pytest.fixture
def prefix(redis_client: redis.Redis) -> Iterator[str]:
    """A key prefix of this test's own; every key under it is deleted afterwards."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    yield name
    keys = list(redis_client.scan_iter(match=f"{name}:*", count=1000))
    if keys:
        redis_client.delete(*keys)
