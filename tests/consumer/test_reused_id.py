"""A request id used by two calls: the second is dead-lettered with its stream kept and the first
call's charge unchanged; a redelivery of the first (the same request entry) stays a duplicate.
Through the real consumer, real Redis, SQLite and PostgreSQL."""

from __future__ import annotations

import orjson
import pytest
import redis
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from models.anomalies import Anomaly
from models.reservations import Reservation
from worker.config import Settings
from worker.consumer.consumer import Consumer
from worker.core.request import parse_request
from worker.ledger.balances import balance

from .test_consumer import CHUNK, drain, frames, meta, play, status
from .test_consumer import KEY as FINGERPRINT_KEY

REASON = "request_id reused by a different call"
BIG_USAGE = {"prompt_tokens": 100_000, "completion_tokens": 50_000, "total_tokens": 150_000}


@pytest.fixture
def settings(prefix: str) -> Settings:
    return Settings(
        hash_salt=FINGERPRINT_KEY,
        prefix=prefix,
        batch_size=50,
        claim_idle_ms=0,
        sweep_idle_ms=0,
        grace_seconds=3600,
    )


def big_frames() -> list[str]:
    usage = "data: " + orjson.dumps({**CHUNK, "choices": [], "usage": BIG_USAGE}).decode()
    return [*frames(usage=False)[:-1], usage + "\n\n", "data: [DONE]\n\n"]


def reservation(sessions: sessionmaker[Session], request_id: str) -> Reservation:
    with sessions() as s:
        return s.scalars(select(Reservation).where(Reservation.request_id == request_id)).one()


@pytest.mark.parametrize("metadata", ["byte_identical", "another_prompt"])
def test_a_second_call_under_a_settled_id_is_dead_lettered_and_its_stream_kept(
    metadata, consumer, publisher, sessions, redis_client, account
) -> None:
    first = meta(account)
    rid = first["request_id"]
    play(publisher, first, frames())
    drain(consumer)
    assert status(sessions, rid) == "settled"
    with sessions() as s:
        assert balance(s, account).charged == 58
    second = dict(first)
    if metadata == "another_prompt":
        second["messages"] = [{"role": "user", "content": "Write a novel."}]
        second["created_at"] = "2026-11-30T00:05:00Z"

    play(publisher, second, big_frames())
    drain(consumer)

    keys = consumer.keys
    letters = [fields for _, fields in redis_client.xrange(keys.dead)]
    assert [f[b"reason"].decode() for f in letters] == [REASON, REASON]  # its open and its close
    assert {f[b"orig.kind"] for f in letters} == {b"open", b"close"}
    assert redis_client.exists(keys.request(rid)), "the second call's stream was deleted"
    assert redis_client.xpending(keys.events(), keys.group)["pending"] == 0
    with sessions() as s:
        assert balance(s, account).charged == 58  # the first charge, unchanged
        assert balance(s, account).held == 0
        kinds = s.execute(
            select(Anomaly.kind, Anomaly.detail)
            .join(Reservation)
            .where(Reservation.request_id == rid)
        ).all()
    assert [kind for kind, _ in kinds] == ["request_id_reused"]
    assert "dead-lettered unbilled" in kinds[0][1]
    assert status(sessions, rid) == "settled"


def test_a_second_call_under_an_unsettled_id_leaves_the_first_unsettled(
    consumer, publisher, sessions, redis_client, account
) -> None:
    first = meta(account)
    rid = first["request_id"]
    play(publisher, first, frames(usage=False))  # unsettled: hold kept, stream kept for grace
    drain(consumer)
    consumer.client.delete(consumer.keys.request(rid))  # the gateway's TTL ran out early
    play(publisher, {**first, "messages": []}, big_frames())
    drain(consumer)
    reasons = [f[b"reason"].decode() for _, f in redis_client.xrange(consumer.keys.dead)]
    assert reasons == [REASON, REASON]
    assert status(sessions, rid) == "unsettled"
    with sessions() as s:
        assert (balance(s, account).held, balance(s, account).charged) == (1000, 0)


class LoseAckOnce:
    """A Redis client whose first pipeline carrying an XACK fails, as if Redis went away after the
    batch committed: the batch is delivered again with the call's stream still there."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.armed = True

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self.client, name)

    def pipeline(self, transaction: bool = False):  # type: ignore[no-untyped-def]
        pipe = self.client.pipeline(transaction=transaction)
        outer = self

        class Pipe:
            def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
                return getattr(pipe, name)

            def execute(self):  # type: ignore[no-untyped-def]
                if outer.armed and any(c[0][0] == "XACK" for c in pipe.command_stack):
                    outer.armed = False
                    pipe.reset()
                    raise redis.ConnectionError("Redis went away (simulated)")
                return pipe.execute()

        return Pipe()


def test_a_redelivery_of_the_same_call_stays_a_harmless_duplicate(
    publisher, sessions, redis_client, settings, account
) -> None:
    consumer = Consumer(LoseAckOnce(redis_client), sessions, settings, name="c1")
    first = meta(account)
    rid = first["request_id"]
    play(publisher, first, frames())
    with pytest.raises(redis.ConnectionError):
        consumer.poll(block_ms=None)  # committed; the ack and the stream's delete are lost
    assert redis_client.exists(consumer.keys.request(rid))

    stats = consumer.poll(block_ms=None)  # the same entries again, the same request entry

    assert stats.duplicates == 1 and stats.dead == 0
    assert not redis_client.xrange(consumer.keys.dead)
    assert not redis_client.exists(consumer.keys.request(rid))  # the delete was redone
    with sessions() as s:
        assert balance(s, account).charged == 58


@pytest.mark.parametrize("order", ["open_first", "close_first", "close_first_zero_hold"])
def test_every_hold_records_the_digest_of_its_request_entry(
    order, consumer, publisher, sessions, redis_client, account
) -> None:
    m = meta(account, reserved=0 if order.endswith("zero_hold") else 1000)
    rid = m["request_id"]
    if order == "open_first":
        play(publisher, m, frames(), close=False)
        drain(consumer)
    else:  # the close overtakes the open: the hold is recorded by the close
        redis_client.xadd(consumer.keys.request(rid), {"kind": "request", "body": orjson.dumps(m)})
    entry_id = redis_client.xrange(consumer.keys.request(rid), count=1)[0][0]
    publisher.frames(rid, frames())
    publisher.close(rid)
    drain(consumer)
    expected = parse_request(orjson.dumps(m), entry_id).digest
    assert reservation(sessions, rid).request_digest == expected
    assert status(sessions, rid) == "settled"
