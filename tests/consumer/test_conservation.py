"""Conservation (issue 35): a call the worker refuses is a ledger record, never a disappearance.

Through the real consumer and sweeper on both engines: a refused call ends unsettled
``unreadable`` under the account that made it (or ``unattributed`` when its own id is unusable),
with its hold as exposure, an ``unreadable`` anomaly saying why, its alert event, a dead letter,
and its stream (the prompt) deleted. Each case was a dead letter only before (nothing in the
ledger), so each assertion on the reservation fails on the code before this change.
"""

from __future__ import annotations

import orjson
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from models import AlertEvent, Anomaly, Failure, Reservation
from worker.consumer.sweeper import Sweeper
from worker.contract.entries import MAX_ENTRY_BYTES
from worker.ledger.balances import balance

from .test_consumer import drain, frames, meta, settings  # noqa: F401 (the fixture)


def _recorded(sessions: sessionmaker[Session], request_id: str) -> dict:
    with sessions() as s:
        row = s.execute(
            select(Reservation.id, Reservation.account_id, Reservation.model,
                   Reservation.reserved_micros, Reservation.status, Failure.reason,
                   Failure.exposure_micros)
            .join(Failure, Failure.reservation_id == Reservation.id)
            .where(Reservation.request_id == request_id)
        ).one()  # fmt: skip
        anomalies = s.scalars(
            select(Anomaly.detail).where(
                Anomaly.reservation_id == row.id, Anomaly.kind == "unreadable"
            )
        ).all()
        alerted = s.scalar(select(AlertEvent.id).where(AlertEvent.reservation_id == row.id))
    return {**row._asdict(), "anomalies": anomalies, "alerted": alerted is not None}


def _publish_raw(redis_client, keys, request_id: str, body: bytes, extra: list[bytes]) -> None:
    """What a gateway outside the contract writes (another language, an old release): the
    request entry as given, frames, and both notifications."""
    key = keys.request(request_id)
    redis_client.xadd(key, {"kind": "request", "body": body})
    redis_client.xadd(keys.events_for(request_id), {"kind": "open", "request_id": request_id})
    for frame in extra:
        redis_client.xadd(key, {"kind": "frame", "body": frame})
    redis_client.xadd(keys.events_for(request_id), {"kind": "close", "request_id": request_id})


def test_a_request_entry_past_the_limit_is_recorded_with_its_money_facts(
    consumer, sessions, redis_client, account
) -> None:
    """A vision call's metadata of 1.5 MiB (the worker refuses entries past 1 MiB): held for its
    account at its hold and unsettled ``unreadable``; the prompt leaves Redis."""
    m = meta(account, reserved=25_000)
    m["messages"] = [{"role": "user", "content": "x" * (MAX_ENTRY_BYTES + MAX_ENTRY_BYTES // 2)}]
    rid = m["request_id"]
    _publish_raw(redis_client, consumer.keys, rid, orjson.dumps(m), [f.encode() for f in frames()])
    drain(consumer)
    found = _recorded(sessions, rid)
    assert (found["account_id"], found["model"], found["reserved_micros"]) == (
        account, "gpt-4o", 25_000,
    )  # fmt: skip
    assert (found["status"], found["reason"], found["exposure_micros"]) == (
        "unsettled", "unreadable", 25_000,
    )  # fmt: skip
    assert found["alerted"]
    [detail] = found["anomalies"]
    assert "larger than" in detail and "x" * 20 not in detail  # why, and nothing of the prompt
    assert redis_client.xlen(consumer.keys.dead) == 2  # the open's and the close's letters stay
    assert not redis_client.exists(consumer.keys.request(rid))
    with sessions() as s:
        assert balance(s, account).held == 25_000


def test_metadata_that_is_not_json_is_recorded_unattributed(
    consumer, sessions, redis_client
) -> None:
    """Nothing readable but the request id: recorded under ``unattributed``, model ``unknown``,
    no hold (nothing says how much), so an operator sees the call exists."""
    rid = "req-not-json-" + consumer.keys.prefix
    _publish_raw(redis_client, consumer.keys, rid, b"\xff\xfe not json", [])
    drain(consumer)
    found = _recorded(sessions, rid)
    assert (found["account_id"], found["model"], found["reserved_micros"]) == (
        "unattributed", "unknown", 0,
    )  # fmt: skip
    assert (found["status"], found["reason"]) == ("unsettled", "unreadable")
    [detail] = found["anomalies"]
    assert "not a JSON object" in detail and "account_id" in detail


def test_a_redelivered_refusal_records_the_call_once(consumer, sessions, redis_client, account):
    """The same refused call notified twice (at-least-once delivery): one reservation, one hold."""
    m = meta(account, reserved=7_000)
    m["created_at"] = "1970-01-01T00:00:00Z"  # outside the century: refused
    rid = m["request_id"]
    _publish_raw(redis_client, consumer.keys, rid, orjson.dumps(m), [])
    drain(consumer)
    events = consumer.keys.events_for(rid)
    redis_client.xadd(events, {"kind": "open", "request_id": rid})
    redis_client.xadd(events, {"kind": "close", "request_id": rid})
    drain(consumer)
    found = _recorded(sessions, rid)
    assert (found["reserved_micros"], found["exposure_micros"]) == (7_000, 7_000)
    with sessions() as s:
        assert balance(s, account).held == 7_000
        count = s.scalar(
            select(func.count()).select_from(Reservation).where(Reservation.request_id == rid)
        )
    assert count == 1


def test_a_held_call_whose_close_was_refused_is_unreadable_at_its_hold(
    consumer, publisher, sessions, redis_client, account
) -> None:
    """Its open held it; its close's stream is past the limits (a frame of 1 MiB written by a
    gateway outside the contract). The sweeper finalizes it ``unreadable`` with the hold as
    exposure (was ``incomplete`` priced at the estimate of nothing: a few micro-USD)."""
    m = meta(account, reserved=40_000)
    rid = m["request_id"]
    with publisher.batch():
        publisher.open(m)
    drain(consumer)
    redis_client.xadd(
        consumer.keys.request(rid), {"kind": "frame", "body": "data: " + "x" * MAX_ENTRY_BYTES}
    )
    publisher.close(rid)
    drain(consumer)
    Sweeper(consumer).run()
    found = _recorded(sessions, rid)
    assert (found["status"], found["reason"], found["exposure_micros"]) == (
        "unsettled", "unreadable", 40_000,
    )  # fmt: skip
    assert len(found["anomalies"]) == 1


def test_a_call_billed_to_the_fallback_account_says_why(
    consumer, publisher, sessions, account
) -> None:
    """The gateway billed a call whose payer id was unusable to its fallback account, and said
    why in ``account_fallback``: the call settles there and carries the anomaly with the reason
    (control characters in the note are made harmless, never stored)."""
    from .test_consumer import play, status

    m = {**meta(account), "account_fallback": "user: holds a control character\x1b[2J"}
    play(publisher, m, frames())
    drain(consumer)
    assert status(sessions, m["request_id"]) == "settled"
    with sessions() as s:
        [detail] = s.scalars(
            select(Anomaly.detail)
            .join(Reservation, Reservation.id == Anomaly.reservation_id)
            .where(Reservation.request_id == m["request_id"], Anomaly.kind == "account_fallback")
        ).all()
    assert "control character" in detail and "\x1b" not in detail
