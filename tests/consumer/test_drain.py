"""``Consumer.drain``: the next batch is read while the last is applied, and nothing it read is lost.

Real Redis and both databases. Batches of five notifications, so one drain pipelines many batches.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest
import redis
from sqlalchemy.orm import Session, sessionmaker

from models.reservations import Status
from worker.config import Settings
from worker.consumer.consumer import Consumer
from worker.contract.keys import Keys
from worker.contract.publisher import Publisher
from worker.ledger.balances import balance

from .test_consumer import frames, meta, play, status


@pytest.fixture
def settings(prefix: str) -> Settings:
    return Settings(
        prefix=prefix,
        batch_size=5,
        claim_idle_ms=60_000,
        grace_seconds=3600,
        hash_salt="test-fingerprint-key",
    )


@pytest.fixture
def keys(settings: Settings) -> Keys:
    return Keys(settings.prefix)


def consumer_of(client: redis.Redis, sessions, settings: Settings, name: str) -> Consumer:
    return Consumer(client, sessions, settings, name=name, recheck_seconds=0)


def publish(client: redis.Redis, keys: Keys, account: str, count: int) -> list[str]:
    publisher = Publisher(client, keys)
    ids = []
    for _ in range(count):
        m = meta(account)
        play(publisher, m, frames())
        ids.append(m["request_id"])
    return ids


def pending(client: redis.Redis, keys: Keys) -> int:
    return client.xpending(keys.events(0), keys.group)["pending"]


def test_drain_applies_every_batch_it_read_and_acks_them(
    redis_client: redis.Redis, sessions: sessionmaker[Session], settings: Settings, keys: Keys
) -> None:
    account = f"acct-{uuid.uuid4().hex[:8]}"
    ids = publish(redis_client, keys, account, 23)  # 46 notifications: ten batches
    consumer = consumer_of(redis_client, sessions, settings, "c1")
    stats = consumer.drain(0, seconds=60, block_ms=None, until_idle=True)
    assert stats.read == 46
    assert stats.acked == 46
    assert stats.settled == 23
    assert pending(redis_client, keys) == 0
    assert {status(sessions, rid) for rid in ids} == {Status.SETTLED}
    with sessions() as session:
        # Every hold charged once: nothing still held, and a second drain changes nothing.
        assert balance(session, account).held == 0
    again = consumer.drain(0, seconds=60, block_ms=None, until_idle=True)
    assert again.read == 0


def test_a_failed_apply_loses_nothing_the_drain_had_read(
    redis_client: redis.Redis, sessions: sessionmaker[Session], settings: Settings, keys: Keys
) -> None:
    account = f"acct-{uuid.uuid4().hex[:8]}"
    ids = publish(redis_client, keys, account, 10)  # 20 notifications: four batches
    consumer = consumer_of(redis_client, sessions, settings, "c1")
    applied = []

    def apply_once_then_fail(apply, batch):
        if applied:
            raise ConnectionError("database went away")
        apply(batch)
        applied.append(batch.stats)

    consumer.wrap_step("apply", apply_once_then_fail)
    with pytest.raises(ConnectionError):
        consumer.drain(0, seconds=60, block_ms=None)
    # The first batch was committed and acknowledged; the one that failed and the one read ahead
    # of it stay pending, to be claimed.
    assert applied[0].acked == 5
    assert pending(redis_client, keys) == 10
    claimer = consumer_of(redis_client, sessions, replace(settings, claim_idle_ms=0), "c2")
    claimer.drain(0, seconds=60, block_ms=None, until_idle=True)
    assert pending(redis_client, keys) == 0
    assert {status(sessions, rid) for rid in ids} == {Status.SETTLED}
    with sessions() as session:
        assert balance(session, account).held == 0
