"""Bad field values are refused at the boundary, in one delivery, through the real consumer on both
engines: a dead letter with a reason, no traceback, and no retry that the database would refuse
(or, on SQLite, store what PostgreSQL refuses). The refused call is still recorded (issue 35's
conservation): unsettled ``unreadable`` from the money facts that pass the metadata's rules, with
stand-ins for the others, never a hold of a bad value."""

from __future__ import annotations

import json
import logging
import uuid

import orjson
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from models import Anomaly, Failure
from models.reservations import Reservation
from worker.config import Settings
from worker.ledger.balances import balance

from .test_consumer import KEY as FINGERPRINT_KEY
from .test_consumer import frames, meta, play, status

# Each bad value, the field the reason must name, and the text a log line must not carry.
BAD = {
    "nul_in_request_id": ({"request_id": "req-\x00-nul"}, "request_id", "-nul"),
    "nul_in_account_id": ({"account_id": "acct\x00nul"}, "account_id", "nul"),
    "nul_in_model": ({"model": "gpt-4o\x00nul"}, "model", "nul"),
    "long_request_id": ({"request_id": "r" * 201}, "request_id", "r" * 201),
    "long_account_id": ({"account_id": "a" * 201}, "account_id", "a" * 201),
    "long_model": ({"model": "m" * 201}, "model", "m" * 201),
    "reserved_2^63-1": ({"reserved_micros": 2**63 - 1}, "reserved_micros", str(2**63 - 1)),
    "reserved_2^64-1": ({"reserved_micros": 2**64 - 1}, "reserved_micros", str(2**64 - 1)),
    "reserved_negative": ({"reserved_micros": -5}, "reserved_micros", ": -5"),
    "reserved_fractional": ({"reserved_micros": 1000.5}, "reserved_micros", "1000.5"),
    "reserved_text": ({"reserved_micros": "1000"}, "reserved_micros", "'1000'"),
    "created_at_year_1": ({"created_at": "0001-01-01T00:00:00+01:00"}, "created_at", "Traceback"),
    "created_at_1970": ({"created_at": "1970-01-01T00:00:00Z"}, "created_at", "Traceback"),
    "n_huge": ({"n": 2**63}, "n", str(2**63)),
    "seed_beyond_int64": ({"seed": -(2**63) - 1}, "seed", str(-(2**63) - 1)),
}


@pytest.fixture
def settings(prefix: str) -> Settings:
    return Settings(
        hash_salt=FINGERPRINT_KEY,
        prefix=prefix,
        batch_size=50,
        claim_idle_ms=60_000,
        sweep_idle_ms=0,
        grace_seconds=3600,
    )


def _held(sessions: sessionmaker[Session], account: str, request_id: str) -> int:
    """Reservations recorded for the bad call: looked up by its account when its request id is the
    bad value (PostgreSQL would refuse the query itself), else by its request id."""
    where = (
        Reservation.account_id == account
        if "\x00" in request_id or len(request_id) > 200
        else Reservation.request_id == request_id
    )
    with sessions() as s:
        return s.scalar(select(func.count()).where(where))


def _assert_recorded_unreadable(
    sessions: sessionmaker[Session], request_id: str, sent: dict, field: str
) -> None:
    """The refused call's reservation: the fields that pass the rules as sent, stand-ins for the
    bad one (the account ``unattributed``, the model ``unknown``, a hold of 0), unsettled
    ``unreadable`` with the hold as exposure and an anomaly naming the bad field."""
    with sessions() as s:
        row = s.execute(
            select(Reservation.account_id, Reservation.model, Reservation.reserved_micros,
                   Reservation.status, Failure.reason, Failure.exposure_micros)
            .join(Failure, Failure.reservation_id == Reservation.id)
            .where(Reservation.request_id == request_id)
        ).one()  # fmt: skip
        detail = s.scalar(
            select(Anomaly.detail)
            .join(Reservation, Reservation.id == Anomaly.reservation_id)
            .where(Reservation.request_id == request_id, Anomaly.kind == "unreadable")
        )
    account = "unattributed" if field == "account_id" else sent["account_id"]
    model = "unknown" if field == "model" else sent["model"]
    reserved = 0 if field == "reserved_micros" else sent["reserved_micros"]
    assert (row.account_id, row.model, row.reserved_micros) == (account, model, reserved)
    assert (row.status, row.reason, row.exposure_micros) == ("unsettled", "unreadable", reserved)
    assert detail is not None and field in detail


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_value_is_dead_lettered_in_one_delivery(
    case, consumer, publisher, sessions, redis_client, account, caplog
) -> None:
    change, field, secret = BAD[case]
    bad = {**meta(account), **change}
    if "request_id" in change:
        bad["request_id"] = uuid.uuid4().hex[:6] + change["request_id"]
    rid = bad["request_id"]
    body = json.dumps(bad).encode()  # orjson refuses integers beyond 64 bits; a gateway may not
    caplog.set_level(logging.DEBUG)
    with publisher.batch():
        publisher.open(body, rid)
        publisher.frames(rid, frames())
        publisher.close(rid)

    stats = consumer.poll(block_ms=None)  # ONE delivery

    keys = consumer.keys
    letters = [fields for _, fields in redis_client.xrange(keys.dead)]
    assert (stats.read, stats.acked) == (2, 2)
    assert len(letters) == 2, letters  # the open and the close, each with a reason
    for fields in letters:
        assert field in fields[b"reason"].decode(), fields[b"reason"]
    assert redis_client.xpending(keys.events(), keys.group)["pending"] == 0
    if field == "request_id":
        # The notification itself names an id no call can have: there is no call to record.
        assert _held(sessions, account, rid) == 0
    else:
        _assert_recorded_unreadable(sessions, rid, bad, field)
        assert not redis_client.exists(keys.request(rid)), "the refused prompt is kept"
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert secret not in caplog.text

    # The account, day and model are not poisoned: the next good call settles at once.
    good = meta(account)
    play(publisher, good, frames())
    consumer.poll(block_ms=None)
    assert status(sessions, good["request_id"]) == "settled"
    with sessions() as s:
        assert balance(s, account).charged == 58


def test_an_open_whose_metadata_names_another_request_never_holds_that_one(
    consumer, publisher, sessions, redis_client, account
) -> None:
    other = meta(account)
    stream_id = f"req-{uuid.uuid4().hex[:12]}"
    publisher.open(orjson.dumps(other), stream_id)  # stream A, metadata says B

    consumer.poll(block_ms=None)

    reasons = [f[b"reason"].decode() for _, f in redis_client.xrange(consumer.keys.dead)]
    assert reasons == [
        f"request entry names {other['request_id']!r}, not the stream's {stream_id!r}"
    ]
    assert status(sessions, other["request_id"]) is None
    # The stream's own call is recorded, unsettled ``unreadable``, for someone to look at.
    assert status(sessions, stream_id) == "unsettled"


def test_digits_that_int_refuses_neither_crash_nor_retry(
    consumer, publisher, sessions, redis_client, account
) -> None:
    """'²' is a digit to ``str.isdigit`` and not to ``int``: a ``ts`` of it is dropped, a response
    status of it is refused; neither may crash the batch or be retried."""
    good, plain = meta(account), meta(account, stream=False)
    keys = consumer.keys
    publisher.open(good)
    publisher.frames(good["request_id"], frames())
    redis_client.xadd(keys.events(), {"kind": "close", "request_id": good["request_id"], "ts": "²"})
    publisher.open(plain)
    redis_client.xadd(
        keys.request(plain["request_id"]), {"kind": "response", "status": "²", "body": "{}"}
    )
    publisher.close(plain["request_id"])

    consumer.poll(block_ms=None)

    assert status(sessions, good["request_id"]) == "settled"
    reasons = [f[b"reason"].decode() for _, f in redis_client.xrange(keys.dead)]
    assert reasons and all("response entry with bad status '²'" in r for r in reasons)
    assert redis_client.xpending(keys.events(), keys.group)["pending"] == 0
