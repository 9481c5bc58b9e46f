"""``unbilled`` notifications (a request served under ``BILLING_UNBILLED_ROUTES=pass``): each is
recorded as its own call, voided at 0, with the anomaly ``unbilled_route``, and acknowledged after
the commit; a redelivery changes nothing; a malformed one or one naming a billed call's id is a
dead letter. Through the real consumer, real Redis, SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
import redis
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from models.anomalies import Anomaly
from models.reservations import Reservation
from worker.config import Settings
from worker.consumer.consumer import Consumer
from worker.contract.keys import Keys
from worker.contract.publisher import Publisher

from .test_consumer import KEY, drain, frames, meta, play, status


@pytest.fixture
def settings(prefix: str) -> Settings:
    return Settings(hash_salt=KEY, prefix=prefix, batch_size=50, claim_idle_ms=0)


def anomalies(sessions: sessionmaker[Session], request_id: str) -> list[tuple[str, str]]:
    with sessions() as s:
        rows = s.execute(
            select(Anomaly.kind, Anomaly.detail)
            .join(Reservation, Reservation.id == Anomaly.reservation_id)
            .where(Reservation.request_id == request_id)
        )
        return [(kind, detail) for kind, detail in rows]


def pending(redis_client: redis.Redis, keys: Keys) -> int:
    return int(redis_client.xpending(keys.events(), keys.group)["pending"])


def test_an_unbilled_request_is_a_voided_call_with_its_anomaly(
    consumer: Consumer, publisher: Publisher, sessions, redis_client, account, prefix
) -> None:
    publisher.unbilled("req_unbilled_1", "POST /v1/embeddings", account)
    publisher.unbilled("req_unbilled_2", "WEBSOCKET /v1/realtime")
    drain(consumer)
    assert status(sessions, "req_unbilled_1") == "voided"
    with sessions() as s:
        first = s.scalars(select(Reservation).where(Reservation.request_id == "req_unbilled_1"))
        row = first.one()
        assert (row.account_id, row.model, row.reserved_micros) == (account, "unbilled", 0)
        second = s.scalars(select(Reservation).where(Reservation.request_id == "req_unbilled_2"))
        assert second.one().account_id == "unattributed"
    assert anomalies(sessions, "req_unbilled_1") == [
        ("unbilled_route", "served unbilled: POST /v1/embeddings (BILLING_UNBILLED_ROUTES=pass)")
    ]
    assert pending(redis_client, Keys(prefix)) == 0  # acknowledged after the commit

    publisher.unbilled("req_unbilled_1", "POST /v1/embeddings", account)  # redelivered
    drain(consumer)
    with sessions() as s:
        count = s.scalar(select(func.count()).where(Reservation.request_id.in_(["req_unbilled_1"])))
    assert count == 1 and len(anomalies(sessions, "req_unbilled_1")) == 1


def test_a_malformed_or_foreign_unbilled_notification_is_a_dead_letter(
    consumer: Consumer, publisher: Publisher, sessions, redis_client, account, prefix
) -> None:
    keys = Keys(prefix)
    billed = meta(account)
    play(publisher, billed, frames())
    drain(consumer)
    assert status(sessions, billed["request_id"]) == "settled"
    publisher.unbilled(billed["request_id"], "POST /v1/embeddings", account)
    redis_client.xadd(keys.events(), {"kind": "unbilled", "request_id": "req_x"})  # no route
    drain(consumer)
    reasons = [f[b"reason"].decode() for _id, f in redis_client.xrange(keys.dead)]
    assert any("a billed call's id" in r for r in reasons), reasons
    assert any("without a route" in r for r in reasons), reasons
    assert status(sessions, billed["request_id"]) == "settled"  # untouched
    assert anomalies(sessions, billed["request_id"]) == []
    assert status(sessions, "req_x") is None
    assert pending(redis_client, keys) == 0
