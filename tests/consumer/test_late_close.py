"""A close that comes after the sweeper finalized its call still decides it (real Redis, SQLite and
PostgreSQL): the sweeper's finalization without a close is provisional, the close is the gateway's
word on how the call ended. A busy gateway can pause longer than ``BILLING_SWEEP_IDLE_MS`` between
a call's frames; the sweeper then reads a stream cut short (``incomplete``), and the rest of the
stream and its close come after."""

from __future__ import annotations

from dataclasses import replace

import orjson
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from models import AlertEvent, Failure, Reservation, Transaction
from worker.consumer.consumer import Consumer
from worker.consumer.sweeper import Sweeper
from worker.ledger.balances import balance
from worker.reports.query import verify_calls

from .test_consumer import drain, frames, meta, play, status
from .test_no_close import kinds, settings  # noqa: F401 (settings: the same fixture)
from .test_no_close import unfinished as cut


@pytest.fixture(autouse=True)
def rollup_ties_out(sessions: sessionmaker[Session], account: str):
    """After every correction, ``calls_daily`` still counts each of the account's calls in the row
    of its state (reason, action, exposure): the rollup the report reads moved with the call."""
    yield
    with sessions() as session:
        _, differences = verify_calls(session.connection())
    assert [d for d in differences if account in d.key] == []


def failure(sessions: sessionmaker[Session], request_id: str) -> tuple[str, str | None]:
    """The failure's reason and the alert event's (which copies it)."""
    with sessions() as s:
        reason = s.scalar(
            select(Failure.reason)
            .join(Reservation, Reservation.id == Failure.reservation_id)
            .where(Reservation.request_id == request_id)
        )
        event = s.scalar(
            select(AlertEvent.reason)
            .join(Reservation, Reservation.id == AlertEvent.reservation_id)
            .where(Reservation.request_id == request_id)
        )
    return reason, event


def transactions(sessions: sessionmaker[Session], request_id: str) -> list[str]:
    with sessions() as s:
        return sorted(
            s.scalars(
                select(Transaction.kind)
                .join(Reservation, Reservation.id == Transaction.reservation_id)
                .where(Reservation.request_id == request_id)
            )
        )


def rest(usage: bool) -> list[str]:
    """What the gateway wrote after its pause: the finish, the usage (or none), ``[DONE]``."""
    return [f for f in frames(usage=usage) if f not in cut()]


def swept_then_closed(consumer, publisher, sessions, account: str, *, usage: bool) -> str:
    m = meta(account)
    play(publisher, m, cut(), close=False)
    drain(consumer)  # the hold
    Sweeper(consumer).run()  # the gateway paused past the idle time: finalized from the stream
    assert status(sessions, m["request_id"]) == "unsettled"
    assert failure(sessions, m["request_id"]) == ("incomplete", "incomplete")
    publisher.frames(m["request_id"], rest(usage))
    publisher.close(m["request_id"])
    drain(consumer)
    return m["request_id"]


def test_a_close_after_the_sweep_corrects_the_reason_to_missing_usage(
    consumer, publisher, sessions, account
) -> None:
    request_id = swept_then_closed(consumer, publisher, sessions, account, usage=False)
    assert status(sessions, request_id) == "unsettled"
    assert failure(sessions, request_id) == ("missing_usage", "missing_usage")
    assert "no_close" not in kinds(sessions, request_id)  # its close came
    with sessions() as s:
        b = balance(s, account)
    assert (b.held, b.charged) == (1000, 0)  # the hold is kept, nothing charged
    assert transactions(sessions, request_id) == ["hold"]  # no money moved by the correction


def test_a_close_after_the_sweep_with_usage_settles_it_late(
    consumer, publisher, sessions, account
) -> None:
    request_id = swept_then_closed(consumer, publisher, sessions, account, usage=True)
    assert status(sessions, request_id) == "settled"
    with sessions() as s:
        b = balance(s, account)
        action = s.scalar(
            select(Failure.action)
            .join(Reservation, Reservation.id == Failure.reservation_id)
            .where(Reservation.request_id == request_id)
        )
    assert (b.held, b.charged) == (0, 58)  # the same charge the close alone would have posted
    assert action == "settled_late"
    assert "no_close" not in kinds(sessions, request_id)


def test_the_correction_is_idempotent_in_any_order(consumer, publisher, sessions, account) -> None:
    request_id = swept_then_closed(consumer, publisher, sessions, account, usage=False)
    sweeper = Sweeper(consumer)
    sweeper.run()  # the sweep again (and the recheck): the reservation is no longer held
    publisher.close(request_id)  # the same close again
    drain(consumer)
    sweeper.run()
    assert failure(sessions, request_id) == ("missing_usage", "missing_usage")
    with sessions() as s:
        b = balance(s, account)
    assert (b.held, b.charged) == (1000, 0)
    assert transactions(sessions, request_id) == ["hold"]


def test_the_sweeper_never_overrides_a_close(consumer, publisher, sessions, account) -> None:
    """The other order: the close decided first; a sweep that read the stream short before it
    (or reads it again) changes nothing."""
    m = meta(account)
    play(publisher, m, cut(), close=False)
    drain(consumer)
    publisher.frames(m["request_id"], rest(usage=False))
    publisher.close(m["request_id"])
    drain(consumer)
    assert failure(sessions, m["request_id"]) == ("missing_usage", "missing_usage")
    Sweeper(consumer).run()
    assert failure(sessions, m["request_id"]) == ("missing_usage", "missing_usage")


def test_a_close_after_grace_leaves_the_reason(consumer, publisher, sessions, account) -> None:
    """Past grace the failure is the resolve policy's: a close that late changes nothing, as a
    usage frame that late is ``final``."""
    no_grace = replace(consumer.settings, grace_seconds=0)
    consumer = Consumer(consumer.client, sessions, no_grace, name="c1", recheck_seconds=0)
    m = meta(account)
    play(publisher, m, cut(), close=False)
    drain(consumer)
    Sweeper(consumer).run()
    publisher.frames(m["request_id"], rest(usage=False))
    publisher.close(m["request_id"])
    drain(consumer)
    assert failure(sessions, m["request_id"])[0] == "incomplete"


ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "gpt-4o",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hello there."},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
}


@pytest.mark.parametrize(
    ("code", "body", "want", "money"),
    [
        (200, orjson.dumps(ANSWER), "settled", (0, 58)),
        (429, b'{"error": {"message": "rate limited"}}', "voided", (0, 0)),
    ],
)
def test_a_non_streamed_call_swept_before_its_answer_is_decided_by_its_close(
    consumer, publisher, sessions, account, code, body, want, money
) -> None:
    m = meta(account, stream=False)
    publisher.open(m)
    drain(consumer)
    sweeper = Sweeper(consumer)
    sweeper.run()  # no answer yet, quiet past the idle time
    assert failure(sessions, m["request_id"]) == ("incomplete", "incomplete")
    publisher.response(m["request_id"], code, body)
    publisher.close(m["request_id"], "done" if code == 200 else "upstream_error")
    drain(consumer)
    publisher.close(m["request_id"])  # the close again, then a sweep: nothing changes
    drain(consumer)
    sweeper.run()
    assert status(sessions, m["request_id"]) == want
    with sessions() as s:
        b = balance(s, account)
        action = s.scalar(
            select(Failure.action)
            .join(Reservation, Reservation.id == Failure.reservation_id)
            .where(Reservation.request_id == m["request_id"])
        )
    assert (b.held, b.charged) == money
    assert action == ("settled_late" if want == "settled" else "release")
    if want == "voided":
        assert transactions(sessions, m["request_id"]) == ["hold", "release"]
