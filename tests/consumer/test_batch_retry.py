"""A transient database error reruns the whole batch transaction at once; nothing is deferred.

Real Redis, real PostgreSQL. The consumer's connections run with a short ``lock_timeout``; a second
transaction holds one call's reservation row while the consumer applies a batch that needs it, and
lets go only once the consumer has rolled its batch back. Before the retry, that call was deferred
(left pending, redone ``claim_idle_ms`` later, a dead letter after five such deliveries).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest
import redis
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from models.reservations import Reservation
from worker.config import Settings
from worker.consumer.calls import BatchStats
from worker.consumer.consumer import Consumer
from worker.contract.keys import Keys
from worker.contract.publisher import Publisher
from worker.ledger.database import make_engine

from .test_consumer import KEY, meta

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


@pytest.fixture
def impatient(pg_url: str) -> Iterator[Engine]:
    """The consumer's engine: a lock wait longer than 300 ms fails (SQLSTATE 55P03, transient)."""
    engine = make_engine(pg_url, connect_args={"options": "-c lock_timeout=300"})
    yield engine
    engine.dispose()


def test_a_lock_timeout_reruns_the_batch_instead_of_deferring_a_call(
    impatient: Engine,
    pg_engine: Engine,
    redis_client: redis.Redis,
    prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = Settings(
        prefix=prefix, batch_size=50, claim_idle_ms=60_000, sweep_idle_ms=0, hash_salt=KEY
    )
    consumer = Consumer(redis_client, sessionmaker(impatient), settings, name="c1")
    publisher = Publisher(redis_client, Keys(prefix))
    blocked, fresh = meta("acct-retry", stream=False), meta("acct-retry")
    publisher.open(blocked)
    assert consumer.poll(block_ms=None).held == 1
    # The batch: a fresh call's hold (batched path) and the blocked call's void (per-call path).
    with publisher.batch():
        publisher.open(fresh)
        publisher.response(blocked["request_id"], 429, b'{"error": {"message": "rate limited"}}')
        publisher.close(blocked["request_id"], "upstream_error")

    stats: list[BatchStats] = []
    caplog.set_level(logging.WARNING, logger="worker.consumer.consumer")
    with Session(pg_engine) as other, other.begin():
        other.execute(
            select(Reservation.id)
            .where(Reservation.request_id == blocked["request_id"])
            .with_for_update()
        )
        worker = threading.Thread(target=lambda: stats.append(consumer.poll(block_ms=None)))
        worker.start()
        for _ in range(400):  # hold the row until the consumer has rolled its batch back
            if any("rolled back" in record.getMessage() for record in caplog.records):
                break
            time.sleep(0.025)
    worker.join(timeout=60)

    [batch] = stats
    assert (batch.deferred, batch.voided, batch.held) == (0, 1, 1)
    assert batch.retries >= 1
    with Session(pg_engine) as session:
        found = dict(
            session.execute(
                select(Reservation.request_id, Reservation.status).where(
                    Reservation.request_id.in_([blocked["request_id"], fresh["request_id"]])
                )
            ).all()
        )
    assert found == {blocked["request_id"]: "voided", fresh["request_id"]: "held"}
