"""The consumer and the sweeper against real Redis and a real database (SQLite and PostgreSQL)."""

from __future__ import annotations

import time
import uuid

import orjson
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from models.reservations import Reservation
from worker.config import Settings
from worker.consumer.consumer import Consumer
from worker.consumer.sweeper import Sweeper
from worker.contract.publisher import Publisher
from worker.ledger.balances import balance

CHUNK = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-4o"}
USAGE = {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}
# The fingerprint key (worker.fingerprint_key): every deployment has one.
KEY = "test-fingerprint-key"


def sse(obj: dict, model: str = CHUNK["model"]) -> str:
    return "data: " + orjson.dumps({**CHUNK, "model": model, **obj}).decode() + "\n\n"


def frames(
    finish: str | None = "stop", usage: bool = True, model: str = CHUNK["model"]
) -> list[str]:
    """A call's frames, served by ``model`` (the model billed: ``worker.core.substitution``)."""
    out = [
        sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}, model),
        sse({"choices": [{"index": 0, "delta": {"content": "Hello there."}}]}, model),
    ]
    if finish:
        out.append(sse({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}, model))
    if usage:
        out.append(sse({"choices": [], "usage": USAGE}, model))
    if finish:
        out.append("data: [DONE]\n\n")
    return out


def meta(account: str, stream: bool = True, reserved: int = 1000) -> dict:
    return {
        "request_id": f"req-{uuid.uuid4().hex[:12]}",
        "account_id": account,
        "model": "gpt-4o",
        "stream": stream,
        "reserved_micros": reserved,
        "created_at": "2026-11-30T00:00:00Z",
        "messages": [{"role": "user", "content": "Say hello."}],
    }


@pytest.fixture
def settings(prefix: str) -> Settings:
    return Settings(
        prefix=prefix,
        batch_size=50,
        claim_idle_ms=60_000,
        sweep_idle_ms=0,
        grace_seconds=3600,
        hash_salt=KEY,
    )


def status(sessions: sessionmaker[Session], request_id: str) -> str | None:
    with sessions() as s:
        return s.scalar(select(Reservation.status).where(Reservation.request_id == request_id))


def drain(consumer: Consumer) -> None:
    for _ in range(5):
        if not consumer.poll(block_ms=None).read:
            return


def play(publisher: Publisher, m: dict, events: list[str], close: bool = True) -> None:
    with publisher.batch():
        publisher.open(m)
        publisher.frames(m["request_id"], events)
        if close:
            publisher.close(m["request_id"])


def test_streamed_call_settles_acks_and_deletes_its_stream(
    consumer, publisher, sessions, redis_client, account
) -> None:
    m = meta(account)
    play(publisher, m, frames())
    drain(consumer)
    assert status(sessions, m["request_id"]) == "settled"
    with sessions() as s:
        b = balance(s, account)
    assert (b.held, b.charged) == (0, 58)
    assert not redis_client.exists(consumer.keys.request(m["request_id"]))
    pending = redis_client.xpending(consumer.keys.events(), consumer.keys.group)
    assert pending["pending"] == 0


def test_duplicates_and_reordering_charge_once(consumer, publisher, sessions, account) -> None:
    m = meta(account)
    rid = m["request_id"]
    # the gateway's stream is complete, but the close overtakes the open and both repeat
    keys = consumer.keys
    client = consumer.client
    client.xadd(keys.request(rid), {"kind": "request", "body": orjson.dumps(m)})
    for event in frames():
        client.xadd(keys.request(rid), {"kind": "frame", "body": event})
    publisher.close(rid)
    publisher.close(rid)
    client.xadd(keys.events(), {"kind": "open", "request_id": rid, "ts": 1})
    drain(consumer)
    publisher.close(rid)
    drain(consumer)
    with sessions() as s:
        assert balance(s, account).charged == 58
    assert status(sessions, rid) == "settled"


def test_redelivery_after_a_crash_before_ack_changes_nothing(
    consumer, publisher, sessions, redis_client, settings, account
) -> None:
    m = meta(account)
    play(publisher, m, frames(usage=False))  # unsettled: stream kept, so a redo re-reads it
    stream = consumer.keys.events()
    consumer.intake.ensure_group(stream)
    entries = consumer.read(stream, None)
    consumer.process(stream, entries)
    # the same entries delivered again, as if the first consumer died before XACK
    consumer.process(stream, entries)
    with sessions() as s:
        b = balance(s, account)
    assert (b.held, b.charged) == (1000, 0)
    assert status(sessions, m["request_id"]) == "unsettled"


def test_pending_entries_of_a_dead_consumer_are_claimed(
    redis_client, sessions, settings, publisher, account
) -> None:
    m = meta(account)
    play(publisher, m, frames())
    dead = Consumer(redis_client, sessions, settings, name="dead")
    stream = dead.keys.events()
    dead.intake.ensure_group(stream)
    assert len(dead.read(stream, None)) == 2  # read, never processed, never acked
    survivor = Consumer(
        redis_client,
        sessions,
        Settings(prefix=settings.prefix, claim_idle_ms=0, sweep_idle_ms=0, hash_salt=KEY),
        name="survivor",
    )
    drain(survivor)
    assert status(sessions, m["request_id"]) == "settled"


def test_void_non_streamed_error(consumer, publisher, sessions, account) -> None:
    m = meta(account, stream=False)
    with publisher.batch():
        publisher.open(m)
        publisher.response(m["request_id"], 429, b'{"error": {"message": "rate limited"}}')
        publisher.close(m["request_id"], "upstream_error")
    drain(consumer)
    assert status(sessions, m["request_id"]) == "voided"
    with sessions() as s:
        b = balance(s, account)
    assert (b.held, b.charged) == (0, 0)


@pytest.mark.parametrize(
    ("events", "reason"),
    [
        (frames(finish="error"), "error_finish"),
        (frames(finish=None, usage=False), "incomplete"),
        (frames(usage=False), "missing_usage"),
    ],
)
def test_unsettled_calls_keep_the_hold_and_are_scheduled_for_recheck(
    consumer, publisher, sessions, redis_client, account, events, reason
) -> None:
    from models.failures import Failure

    m = meta(account)
    play(publisher, m, events)
    drain(consumer)
    assert status(sessions, m["request_id"]) == "unsettled"
    with sessions() as s:
        failure = s.scalars(
            select(Failure)
            .join(Reservation, Failure.reservation_id == Reservation.id)
            .where(Reservation.request_id == m["request_id"])
        ).one()
        assert failure.reason == reason
        assert failure.exposure_micros and failure.exposure_micros > 0
        assert balance(s, account).held == 1000
    assert redis_client.zscore(consumer.keys.recheck, m["request_id"]) is not None


def test_late_usage_frame_settles_on_recheck(consumer, publisher, sessions, account) -> None:
    m = meta(account)
    play(publisher, m, frames(usage=False)[:-1])  # finish, no usage, no [DONE]
    drain(consumer)
    assert status(sessions, m["request_id"]) == "unsettled"
    publisher.frames(m["request_id"], [sse({"choices": [], "usage": USAGE}), "data: [DONE]\n\n"])
    stats = Sweeper(consumer).run()
    assert stats.settled_late == 1
    assert status(sessions, m["request_id"]) == "settled"
    with sessions() as s:
        assert balance(s, account).charged == 58


def test_sweeper_finalizes_calls_whose_close_never_came(
    consumer, publisher, sessions, account
) -> None:
    complete, cut = meta(account), meta(account)
    play(publisher, complete, frames(), close=False)
    play(publisher, cut, frames(finish=None, usage=False), close=False)
    drain(consumer)  # the opens: holds recorded
    assert status(sessions, complete["request_id"]) == "held"
    time.sleep(0.01)
    Sweeper(consumer).run()
    assert status(sessions, complete["request_id"]) == "settled"
    assert status(sessions, cut["request_id"]) == "unsettled"


def test_bad_input_becomes_dead_letters_and_never_stops_the_batch(
    consumer, publisher, sessions, redis_client, account
) -> None:
    keys = consumer.keys
    good = meta(account)
    redis_client.xadd(keys.events(), {"kind": "bogus", "request_id": "x"})
    redis_client.xadd(keys.events(), {"kind": "close", "request_id": "never-existed", "ts": 1})
    badmeta = f"badmeta-{uuid.uuid4().hex[:8]}"
    redis_client.xadd(keys.request(badmeta), {"kind": "request", "body": b"{not json"})
    redis_client.xadd(keys.events(), {"kind": "close", "request_id": badmeta, "ts": 1})
    play(publisher, good, frames())
    drain(consumer)
    assert status(sessions, good["request_id"]) == "settled"
    letters = redis_client.xrange(keys.dead)
    reasons = sorted(fields[b"reason"].decode() for _, fields in letters)
    assert len(reasons) == 3
    assert any("unknown notification kind" in r for r in reasons)
    assert any("close for a stream that does not exist" in r for r in reasons)
    assert any("unparsable metadata" in r for r in reasons)
    assert redis_client.xpending(keys.events(), keys.group)["pending"] == 0
    with sessions() as s:
        assert (
            s.scalar(
                select(func.count())
                .select_from(Reservation)
                .where(Reservation.request_id == badmeta)
            )
            == 1  # recorded, not only dead-lettered (tests/consumer/test_conservation.py)
        )
    assert status(sessions, badmeta) == "unsettled"


def test_unpriced_model_is_unsettled_not_free(
    consumer, publisher, sessions, redis_client, account
) -> None:
    m = {**meta(account), "model": "mystery-model-9"}
    play(publisher, m, frames(model="mystery-model-9"))
    stats = consumer.poll(block_ms=None)
    assert stats.reasons == {"unpriced": 1} and stats.charged_micros == 0
    assert status(sessions, m["request_id"]) == "unsettled"
    assert redis_client.exists(consumer.keys.request(m["request_id"]))


def test_late_usage_of_an_unpriced_model_turns_the_reason_to_unpriced(
    consumer, publisher, sessions, account
) -> None:
    from models import AlertEvent
    from models.failures import Failure

    m = {**meta(account), "model": "mystery-model-9"}
    play(publisher, m, frames(usage=False, model="mystery-model-9")[:-1])
    drain(consumer)
    late = sse({"choices": [], "usage": USAGE}, "mystery-model-9")
    publisher.frames(m["request_id"], [late, "data: [DONE]\n\n"])
    Sweeper(consumer).run()
    with sessions() as s:
        reason = s.scalar(
            select(Failure.reason)
            .join(Reservation, Failure.reservation_id == Reservation.id)
            .where(Reservation.request_id == m["request_id"])
        )
        event = s.scalar(
            select(AlertEvent.reason)
            .join(Reservation, AlertEvent.reservation_id == Reservation.id)
            .where(Reservation.request_id == m["request_id"])
        )
    assert reason == "unpriced"
    assert event == "unpriced"  # the alert event follows the failure
    assert status(sessions, m["request_id"]) == "unsettled"


def test_a_call_that_always_fails_is_dead_lettered_after_max_deliveries(
    redis_client, sessions, settings, publisher, account
) -> None:
    import worker.consumer.poison as poison_module
    from worker.consumer.reconciling import Reconcile, reconcile_call

    poison, good = meta(account), meta(account)

    def flaky(entries, request_id, book):
        if request_id == poison["request_id"]:
            raise RuntimeError("a bug")
        return reconcile_call(entries, request_id, book)

    eager = Consumer(
        redis_client,
        sessions,
        Settings(prefix=settings.prefix, claim_idle_ms=0, sweep_idle_ms=0, hash_salt=KEY),
        name="c2",
    )
    eager.replace_step("reconcile", Reconcile(per_call=flaky))
    play(publisher, poison, frames())
    play(publisher, good, frames())
    for _ in range(poison_module.MAX_DELIVERIES + 2):
        eager.poll(block_ms=None)
    assert status(sessions, good["request_id"]) == "settled"
    keys = eager.keys
    reasons = [fields[b"reason"].decode() for _, fields in redis_client.xrange(keys.dead)]
    # one dead letter per original notification (its open and its close)
    assert reasons == [f"gave up after {poison_module.MAX_DELIVERIES} deliveries: RuntimeError"] * 2
    assert redis_client.xpending(keys.events(), keys.group)["pending"] == 0


def test_a_reused_request_id_with_another_hold_is_refused_into_dead_letters(
    consumer, publisher, sessions, redis_client, account
) -> None:
    first = meta(account, reserved=1000)
    play(publisher, first, frames(usage=False))  # unsettled: its hold stays
    drain(consumer)
    again = {**first, "reserved_micros": 7}
    consumer.client.delete(consumer.keys.request(first["request_id"]))
    play(publisher, again, frames())
    drain(consumer)
    reasons = [f[b"reason"].decode() for _, f in redis_client.xrange(consumer.keys.dead)]
    assert len(reasons) == 2  # its open and its close
    assert reasons == ["request_id reused by a different call"] * 2
    with sessions() as s:
        assert balance(s, account).held == 1000


def test_sweeper_trims_notifications_every_consumer_is_done_with(
    consumer, publisher, sessions, redis_client, settings, account
) -> None:
    done, unread = meta(account), meta(account)
    play(publisher, done, frames())
    drain(consumer)
    stream = consumer.keys.events()
    # a second consumer takes an entry and dies before acknowledging it
    play(publisher, unread, frames())
    stuck = Consumer(redis_client, sessions, settings, name="stuck")
    taken = stuck.read(stream, None)
    assert len(taken) == 2
    # and one more notification has not been read by anyone yet
    publisher.close("req-not-read-yet")
    Sweeper(consumer).run()
    left = [entry_id for entry_id, _ in redis_client.xrange(stream)]
    # the two acknowledged notifications are gone; the pending and the unread ones stay
    assert left[0] == taken[0][0]
    assert len(left) == 3


def test_a_held_call_whose_stream_was_refused_becomes_an_unsettled_failure(
    consumer, publisher, sessions, redis_client, account
) -> None:
    from worker.contract.entries import MAX_ENTRY_BYTES

    m = meta(account)
    with publisher.batch():
        publisher.open(m)
    drain(consumer)  # the hold
    # An entry past the limit, as a gateway outside the contract writes it (the publisher splits
    # a body that large into parts: docs/events.md §1).
    redis_client.xadd(
        consumer.keys.request(m["request_id"]),
        {"kind": "frame", "body": "data: " + "x" * MAX_ENTRY_BYTES},
    )
    publisher.close(m["request_id"])
    drain(consumer)
    assert redis_client.xlen(consumer.keys.dead) == 1
    assert status(sessions, m["request_id"]) == "held"
    Sweeper(consumer).run()
    # not money held for ever: an unsettled failure that can be resolved
    assert status(sessions, m["request_id"]) == "unsettled"
    assert not redis_client.sismember(consumer.keys.quarantine, m["request_id"])
