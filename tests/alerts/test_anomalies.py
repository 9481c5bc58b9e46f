"""Contract anomalies and alert events through the real consumer and sweeper (Redis, SQLite and
PostgreSQL): flagged and counted once, never blocking settlement."""

from __future__ import annotations

import uuid

import orjson
import pytest
import redis
from parity.calls import sse_body, usage
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from models import AlertEvent, Anomaly, Reservation
from worker.config import Settings
from worker.consumer.consumer import Consumer
from worker.consumer.sweeper import Sweeper
from worker.contract.keys import Keys
from worker.contract.publisher import Publisher


@pytest.fixture
def settings(prefix: str) -> Settings:
    return Settings(
        prefix=prefix,
        batch_size=50,
        sweep_idle_ms=0,
        grace_seconds=3600,
        hash_salt="s",
        non_streamable_models=("o1-pro", "gpt-4o-realtime"),
    )


@pytest.fixture
def consumer(redis_client: redis.Redis, sessions: sessionmaker[Session], settings: Settings):
    return Consumer(redis_client, sessions, settings, name="c1", recheck_seconds=0)


@pytest.fixture
def publisher(redis_client: redis.Redis, settings: Settings) -> Publisher:
    return Publisher(redis_client, Keys(settings.prefix))


def meta(stream: bool = True, reserved: int = 1000, **extra) -> dict:  # type: ignore[no-untyped-def]
    return {
        "request_id": f"req-{uuid.uuid4().hex[:12]}",
        "account_id": f"acct-{uuid.uuid4().hex[:8]}",
        "model": "gpt-4o",
        "stream": stream,
        "reserved_micros": reserved,
        "created_at": "2026-11-30T00:00:00Z",
        "messages": [{"role": "user", "content": "Say hello."}],
        "temperature": 0,
        **extra,
    }


def drain(consumer: Consumer) -> None:
    for _ in range(5):
        if not consumer.poll(block_ms=None).read:
            return


def play(publisher: Publisher, m: dict, events: list, close: bool = True) -> None:
    with publisher.batch():
        publisher.open(m)
        publisher.frames(m["request_id"], events)
        if close:
            publisher.close(m["request_id"])


def found(sessions: sessionmaker[Session], request_id: str) -> dict[str, str | None]:
    with sessions() as s:
        rows = s.execute(
            select(Anomaly.kind, Anomaly.detail)
            .join(Reservation, Reservation.id == Anomaly.reservation_id)
            .where(Reservation.request_id == request_id)
        ).all()
    return dict(rows)


def status(sessions: sessionmaker[Session], request_id: str) -> str | None:
    with sessions() as s:
        return s.scalar(select(Reservation.status).where(Reservation.request_id == request_id))


def frames(**kw) -> list[bytes]:  # type: ignore[no-untyped-def]
    return sse_body("Hello there.", usage(), **kw)


def test_idempotency_key_on_a_stream_is_flagged_once_and_still_settles(
    consumer, publisher, sessions
) -> None:
    m = meta(idempotency_key="idem-1")
    play(publisher, m, frames())
    drain(consumer)
    publisher.close(m["request_id"])  # a redelivered close
    drain(consumer)
    assert status(sessions, m["request_id"]) == "settled"
    assert list(found(sessions, m["request_id"])) == ["idempotency_key_on_stream"]


def test_a_streamed_non_streamable_model_is_flagged(consumer, publisher, sessions) -> None:
    m = meta(model="o1-pro-2025")
    play(publisher, m, frames(model="o1-pro-2025"))
    drain(consumer)
    assert "non_streamable_stream" in found(sessions, m["request_id"])


def test_close_before_open_is_flagged_and_the_fingerprint_is_stored(
    consumer, publisher, sessions, redis_client
) -> None:
    m = meta()
    rid = m["request_id"]
    keys = consumer.keys
    redis_client.xadd(keys.request(rid), {"kind": "request", "body": orjson.dumps(m)})
    for event in frames():
        redis_client.xadd(keys.request(rid), {"kind": "frame", "body": event})
    publisher.close(rid)
    drain(consumer)
    assert status(sessions, rid) == "settled"
    assert "no_open" in found(sessions, rid)
    with sessions() as s:
        assert s.scalar(select(Reservation.fingerprint).where(Reservation.request_id == rid))
    # the open arriving late completes the pair: the suspicion is withdrawn
    redis_client.xadd(keys.events(), {"kind": "open", "request_id": rid, "ts": 1})
    drain(consumer)
    assert list(found(sessions, rid)) == []


def test_open_and_close_in_one_batch_is_not_an_anomaly(consumer, publisher, sessions) -> None:
    m = meta()
    play(publisher, m, frames())
    drain(consumer)
    assert found(sessions, m["request_id"]) == {}


def test_a_hold_finalized_by_the_sweeper_has_no_close(consumer, publisher, sessions) -> None:
    m = meta()
    play(publisher, m, frames(), close=False)
    drain(consumer)
    zero = meta(reserved=0)
    play(publisher, zero, frames(), close=False)
    drain(consumer)
    Sweeper(consumer).run()
    assert status(sessions, m["request_id"]) == "settled"
    assert "no_close" in found(sessions, m["request_id"])
    assert "no_close" not in found(sessions, zero["request_id"])  # nothing was at stake


def test_foreign_chunks_and_mixed_ids(consumer, publisher, sessions) -> None:
    m = meta()
    events = frames()
    foreign = orjson.dumps({"id": "chatcmpl-OTHER", "object": "chat.completion", "choices": []})
    events.insert(2, b"data: " + foreign + b"\n\n")
    play(publisher, m, events)
    drain(consumer)
    kinds = found(sessions, m["request_id"])
    assert {"foreign_chunks", "mixed_ids"} <= set(kinds)
    assert kinds["mixed_ids"] == "1 chunk with a completion id other than the first"


def test_a_charge_above_the_hold_is_flagged(consumer, publisher, sessions) -> None:
    m = meta(reserved=5)
    play(publisher, m, frames())
    drain(consumer)
    assert status(sessions, m["request_id"]) == "settled"
    assert found(sessions, m["request_id"])["charge_above_hold"] == (
        "charge 58 micros above the hold of 5"
    )


def test_every_unsettled_call_has_one_alert_event(consumer, publisher, sessions) -> None:
    m = meta()
    play(publisher, m, sse_body("Hello", None, finish="error"))
    drain(consumer)
    publisher.close(m["request_id"])
    drain(consumer)
    assert status(sessions, m["request_id"]) == "unsettled"
    with sessions() as s:
        rows = s.execute(
            select(AlertEvent.reason, AlertEvent.stream, AlertEvent.account_id)
            .join(Reservation, Reservation.id == AlertEvent.reservation_id)
            .where(Reservation.request_id == m["request_id"])
        ).all()
    assert rows == [("error_finish", True, m["account_id"])]
