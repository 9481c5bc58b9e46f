"""The consumer releases each call it settles or voids in the authorization store, after the
commit: the unspent part of the hold is spendable at once, before any sync; a redelivery changes
nothing. Real Redis, both databases, the real consumer."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
import redis
from consumer.test_consumer import frames, meta, play
from sqlalchemy.orm import Session, sessionmaker

from worker.config import Settings
from worker.consumer.consumer import Consumer
from worker.contract.authorization import AuthorizationStore
from worker.contract.keys import Keys
from worker.contract.publisher import Publisher
from worker.ledger.queries import show

pytestmark = pytest.mark.redis

HOLD = 50_000


def spendable(store: AuthorizationStore, account: str) -> int:
    f = store.figures(account)
    return int(f["funds"]) - int(f["charged"]) - int(f["held"])


def test_settled_and_voided_calls_give_back_their_unspent_hold(
    redis_client: redis.Redis, sessions: sessionmaker[Session], prefix: str
) -> None:
    account = f"acct-{uuid.uuid4().hex[:8]}"
    settings = Settings(prefix=prefix, claim_idle_ms=60_000, hash_salt="k" * 32, authorize=True)
    consumer = Consumer(redis_client, sessions, settings, name="c1", recheck_seconds=0)
    store = AuthorizationStore(redis_client, prefix)
    store.mark_ready()
    store.install(account, funds=3 * HOLD, charged=0, fields={})
    publisher = Publisher(redis_client, Keys(prefix))
    settled, unsettled = (meta(account, reserved=HOLD) for _ in range(2))
    voided = meta(account, stream=False, reserved=HOLD)
    for m in (settled, voided, unsettled):
        assert store.authorize(account, m["request_id"], HOLD, datetime.now(UTC), "gpt-4o").admitted
    assert spendable(store, account) == 0
    play(publisher, settled, frames())
    with publisher.batch():  # the upstream refused it: void
        publisher.open(voided)
        publisher.response(voided["request_id"], 429, b'{"error": {"message": "slow down"}}')
        publisher.close(voided["request_id"], "upstream_error")
    play(publisher, unsettled, frames(finish="error"))  # an error finish keeps its hold
    consumer.drain(0, seconds=10, block_ms=None, until_idle=True)
    with sessions() as session:
        charged = show(session, settled["request_id"])["charge_micros"]
        assert show(session, voided["request_id"])["status"] == "voided"
        assert show(session, unsettled["request_id"])["status"] == "unsettled"
    assert 0 < charged < HOLD
    calls = store.calls(account)
    assert (calls[settled["request_id"]]["s"], calls[settled["request_id"]]["c"]) == (
        "r", str(charged)
    )  # fmt: skip
    assert (calls[voided["request_id"]]["s"], calls[voided["request_id"]]["c"]) == ("r", "0")
    assert calls[unsettled["request_id"]]["s"] == "h"
    assert spendable(store, account) == 2 * HOLD - charged  # at once, no sync ran
    # A redelivered close is a duplicate: nothing is released twice.
    play(publisher, settled, frames())
    consumer.drain(0, seconds=10, block_ms=None, until_idle=True)
    assert spendable(store, account) == 2 * HOLD - charged
