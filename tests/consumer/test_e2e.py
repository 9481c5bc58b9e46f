"""End to end: real Celery worker and beat processes, real Redis, real PostgreSQL.

Calls of every shape are published the way a gateway would; the test waits until the ledger has
decided every one of them and checks each outcome, the money, and that nothing was acknowledged
without being committed. A second test kills the worker with SIGKILL mid-run and starts another.
"""

from __future__ import annotations

import random
import time
import uuid
from pathlib import Path

import pytest
import redis
from chaos.fleet import Worker
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from models.reservations import Reservation
from worker.contract.keys import Keys
from worker.contract.publisher import Publisher
from worker.ledger.balances import ledger_is_balanced
from worker.ledger.database import make_engine

from .test_consumer import frames, meta
from .waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

SHAPES = {
    "settled": (frames(), "settled"),
    "error": (frames(finish="error"), "unsettled"),
    "dropped": (frames(finish=None, usage=False), "unsettled"),
    "missing": (frames(usage=False), "unsettled"),
}


@pytest.fixture
def env(pg_url: str, prefix: str, worker_id: str, tmp_path: Path) -> dict[str, str]:
    broker_db = 1 + (int(worker_id[2:]) if worker_id.startswith("gw") else 0)
    broker = f"redis://127.0.0.1:6379/{broker_db}"
    redis.Redis.from_url(broker).flushdb()
    return {
        "REDIS_URL": "redis://127.0.0.1:6379/0",
        "CELERY_BROKER_URL": broker,
        "DATABASE_URL": pg_url,
        "BILLING_PREFIX": prefix,
        "BILLING_DRAIN_MS": "1000",
        "BILLING_BLOCK_MS": "100",
        "BILLING_CLAIM_IDLE_MS": "3000",
        "BILLING_SWEEP_IDLE_MS": "3000",
        "BILLING_SWEEP_INTERVAL_SECONDS": "1",
        "BILLING_RECHECK_SECONDS": "1",
    }


def publish(client: redis.Redis, prefix: str, count: int, seed: int) -> dict[str, str]:
    """Publish ``count`` calls of random shapes; returns request id → expected status."""
    rng = random.Random(seed)
    publisher = Publisher(client, Keys(prefix))
    expected: dict[str, str] = {}
    account = f"acct-{uuid.uuid4().hex[:6]}"
    for _ in range(count):
        shape = rng.choice(list(SHAPES))
        events, status = SHAPES[shape]
        m = meta(account)
        with publisher.batch():
            publisher.open(m)
            publisher.frames(m["request_id"], events)
            if rng.random() < 0.9:  # the rest: gateway crash, the sweeper must finish them
                publisher.close(m["request_id"])
        expected[m["request_id"]] = status
    return expected


def decided(sessions: sessionmaker[Session], ids: list[str]) -> dict[str, str]:
    with sessions() as s:
        rows = s.execute(
            select(Reservation.request_id, Reservation.status).where(
                Reservation.request_id.in_(ids)
            )
        ).all()
    return {rid: status for rid, status in rows if status != "held"}


def check(sessions: sessionmaker[Session], expected: dict[str, str]) -> None:
    assert decided(sessions, list(expected)) == expected
    with sessions() as s:
        assert ledger_is_balanced(s)
        charges = s.scalar(
            select(func.count())
            .select_from(Reservation)
            .where(Reservation.request_id.in_(list(expected)))
        )
    assert charges == len(expected)


def test_worker_processes_settle_every_call(env, pg_url, redis_client, prefix, tmp_path) -> None:
    worker = Worker(env, tmp_path, "e2e")
    engine = make_engine(pg_url)
    sessions = sessionmaker(engine)
    try:
        worker.start()
        expected = publish(redis_client, prefix, 120, seed=1)
        wait_for(
            lambda: len(decided(sessions, list(expected))) == len(expected),
            90, "every call decided", lambda: worker.log_text()[-4000:],
        )  # fmt: skip
        check(sessions, expected)
        keys = Keys(prefix)
        assert redis_client.xpending(keys.events(), keys.group)["pending"] == 0
        settled = [rid for rid, status in expected.items() if status == "settled"]
        assert not any(redis_client.exists(keys.request(rid)) for rid in settled)
    finally:
        worker.stop()
        engine.dispose()


def test_kill_9_mid_run_loses_nothing_and_charges_nothing_twice(
    env, pg_url, redis_client, prefix, tmp_path
) -> None:
    worker = Worker(env, tmp_path, "e2e")
    engine = make_engine(pg_url)
    sessions = sessionmaker(engine)
    try:
        worker.start()
        expected = publish(redis_client, prefix, 150, seed=2)
        wait_for(
            lambda: len(decided(sessions, list(expected))) > 10,
            60,
            "the run to start",
            lambda: worker.log_text()[-4000:],
        )
        worker.kill()
        more = publish(redis_client, prefix, 100, seed=3)
        expected.update(more)
        time.sleep(0.5)
        worker.start()
        wait_for(
            lambda: len(decided(sessions, list(expected))) == len(expected),
            120, "every call decided after the restart", lambda: worker.log_text()[-4000:],
        )  # fmt: skip
        check(sessions, expected)
    finally:
        worker.stop()
        engine.dispose()
