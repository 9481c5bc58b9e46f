"""Size limits and the batch byte budget at a small scale (the limits lowered), through the real
consumer and sweeper (real Redis, SQLite and PostgreSQL): a batch past its budget is split and nothing
is lost or acknowledged early; a stream past the limits is refused without being read; refused input
does not outlive its dead letter, and the dead-letter stream stays bounded."""

from __future__ import annotations

import orjson
import pytest
import redis
from sqlalchemy import select

from models.failures import Failure
from models.reservations import Reservation
from worker.config import Settings
from worker.consumer.consumer import Consumer
from worker.consumer.sweeper import Sweeper
from worker.contract import entries
from worker.contract.keys import Keys
from worker.contract.publisher import admission_commands, admission_fields, queue_commands

from .test_consumer import KEY as FINGERPRINT_KEY
from .test_consumer import drain, frames, meta, play, status


@pytest.fixture
def settings(prefix: str) -> Settings:
    # A budget of one byte: every call's stream is read in a batch of its own.
    return Settings(
        hash_salt=FINGERPRINT_KEY,
        prefix=prefix,
        batch_size=50,
        claim_idle_ms=60_000,
        sweep_idle_ms=0,
        batch_bytes=1,
    )


@pytest.fixture
def account() -> str:
    return "acct-limits"


@pytest.fixture
def reads(consumer: Consumer) -> list[list[tuple[str, int]]]:
    """Every read of call streams, the consumer's and its sweepers' (their step ``fetch``): the
    (request id, entry count) pairs read."""
    seen: list[list[tuple[str, int]]] = []

    def spy(fetch, batch):  # type: ignore[no-untyped-def]
        fetch(batch)
        read = zip(batch.calls, batch.streams, strict=True)
        seen.append([(call.request_id, len(found)) for call, found in read if found])

    consumer.wrap_step("fetch", spy)
    return seen


def read_ids(reads: list[list[tuple[str, int]]]) -> set[str]:
    return {rid for batch in reads for rid, _count in batch}


def dead_reasons(client: redis.Redis, keys: Keys) -> list[str]:
    return [fields[b"reason"].decode() for _id, fields in client.xrange(keys.dead)]


def test_a_batch_past_its_byte_budget_is_split_and_nothing_is_lost(
    consumer, publisher, sessions, redis_client, account, reads
) -> None:
    calls = [meta(account) for _ in range(5)]
    for m in calls:
        play(publisher, m, frames())
    stats = consumer.poll(block_ms=None)
    assert (stats.read, stats.settled, stats.acked) == (10, 5, 10)
    assert [len(batch) for batch in reads] == [1] * 5  # one call's stream per read
    assert all(status(sessions, m["request_id"]) == "settled" for m in calls)
    keys = consumer.keys
    assert redis_client.xpending(keys.events(), keys.group)["pending"] == 0


def test_drain_finishes_what_the_budget_left_even_past_its_time(
    consumer, publisher, sessions, redis_client, account, reads
) -> None:
    calls = [meta(account) for _ in range(4)]
    for m in calls:
        play(publisher, m, frames())
    stats = consumer.drain(seconds=0.0, block_ms=None)
    assert stats.settled == 4 and len(reads) == 4
    keys = consumer.keys
    assert redis_client.xpending(keys.events(), keys.group)["pending"] == 0


def test_calls_past_the_budget_stay_pending_until_their_own_commit(
    consumer, publisher, redis_client, account
) -> None:
    first, second = sorted((meta(account), meta(account)), key=lambda m: m["request_id"])
    for m in (first, second):
        play(publisher, m, frames())
    stream = consumer.keys.events()
    entries_read = consumer.read(stream, None)
    batch = consumer.prepare(stream, entries_read, consumer.prices.current())
    assert [call.request_id for call in batch.calls] == [first["request_id"]]
    assert len(batch.rest) == 2  # the second call's open and close, not acknowledged
    consumer.apply(batch)
    assert redis_client.xpending(stream, consumer.keys.group)["pending"] == 2
    # Another consumer that claimed and finished them meanwhile: they are not redone here.
    redis_client.xack(stream, consumer.keys.group, *[entry_id for entry_id, _ in batch.rest])
    assert consumer.intake.keep(stream, batch.rest) == []


def test_a_stream_with_too_many_entries_is_refused_unread_and_deleted(
    consumer, publisher, redis_client, account, reads, monkeypatch
) -> None:
    monkeypatch.setattr(entries, "MAX_ENTRIES", 20)
    m = meta(account)
    play(publisher, m, frames() * 30)
    drain(consumer)
    # one dead letter per notification, its open and its close
    assert (
        dead_reasons(redis_client, consumer.keys) == ["stream has more than 20 entries (151)"] * 2
    )
    assert m["request_id"] not in read_ids(reads)
    # no reservation refers to it: the stream (the prompt) goes with the dead letter
    assert not redis_client.exists(consumer.keys.request(m["request_id"]))
    assert not redis_client.sismember(consumer.keys.quarantine, m["request_id"])


def test_a_stream_past_the_byte_limit_is_refused_unread(
    consumer, publisher, redis_client, account, reads, monkeypatch
) -> None:
    monkeypatch.setattr(entries, "MAX_STREAM_BYTES", 50_000)
    big, small = meta(account), meta(account)
    play(publisher, big, ["data: " + "x" * 10_000 + "\n\n"] * 10 + frames())
    play(publisher, small, frames())
    drain(consumer)
    reason, _same = dead_reasons(redis_client, consumer.keys)
    assert (
        reason == _same
        and reason.startswith("call stream larger than the limits")
        and "more than 50000" in reason
    )
    assert big["request_id"] not in read_ids(reads)
    assert small["request_id"] in read_ids(reads)


def test_an_admitted_stream_past_the_limits_is_recorded_from_its_admission(
    consumer, publisher, sessions, redis_client, account, reads, monkeypatch
) -> None:
    """Its open and close read in one batch, after the stream grew past the limits (a 51 MB
    answer): the stream is refused unread but for its admission entry, and the call is recorded
    unsettled ``unreadable`` under the admission's account, its hold the exposure."""
    monkeypatch.setattr(entries, "MAX_STREAM_BYTES", 50_000)
    m = meta(account, reserved=7_000)
    admitted = {**m, "messages": [], "omitted_messages": True}
    fields = admission_fields(orjson.dumps(admitted), 1_796_000_000_000)
    queue_commands(redis_client, admission_commands(consumer.keys, m["request_id"], fields))
    publisher.open(m, admission=fields)
    publisher.frames(m["request_id"], ["data: " + "x" * 10_000 + "\n\n"] * 10 + frames())
    publisher.close(m["request_id"])
    drain(consumer)
    assert dead_reasons(redis_client, consumer.keys)[0].startswith("call stream larger")
    assert reads == [[(m["request_id"], 1)]]  # the admission entry alone
    assert status(sessions, m["request_id"]) == "unsettled"
    with sessions() as session:
        reservation = session.scalars(
            select(Reservation).where(Reservation.request_id == m["request_id"])
        ).one()
        assert (reservation.account_id, reservation.reserved_micros) == (account, 7_000)
        assert (
            session.scalar(select(Failure.reason).where(Failure.reservation_id == reservation.id))
            == "unreadable"
        )


def test_an_over_limit_stream_is_not_reread_by_the_recheck(
    consumer, publisher, sessions, redis_client, account, reads, monkeypatch
) -> None:
    m = meta(account)
    play(publisher, m, frames(usage=False))  # unsettled: its stream is kept for late data
    drain(consumer)
    assert status(sessions, m["request_id"]) == "unsettled"
    publisher.frames(m["request_id"], ["data: {}\n\n"] * 20)  # late junk past the limit
    monkeypatch.setattr(entries, "MAX_ENTRIES", 10)
    reads.clear()
    for _ in range(3):
        Sweeper(consumer).run()
    assert reads == [] or m["request_id"] not in read_ids(reads)
    # its request entry, four frames, twenty late ones
    assert dead_reasons(redis_client, consumer.keys) == ["stream has more than 10 entries (25)"]
    assert redis_client.zscore(consumer.keys.recheck, m["request_id"]) is None
    assert status(sessions, m["request_id"]) == "unsettled"  # the resolve policy decides it


def test_the_sweeper_reads_abandoned_streams_within_the_budget(
    consumer, publisher, sessions, account, reads
) -> None:
    calls = [meta(account) for _ in range(3)]
    for m in calls:
        play(publisher, m, frames(), close=False)
    drain(consumer)
    reads.clear()
    stats = Sweeper(consumer).run()
    assert stats.finalized == 3
    assert [len(batch) for batch in reads] == [1, 1, 1]
    assert all(status(sessions, m["request_id"]) == "settled" for m in calls)


def test_an_abandoned_stream_past_the_limits_is_finalized_unread(
    consumer, publisher, sessions, redis_client, account, reads, monkeypatch
) -> None:
    m = meta(account)
    play(publisher, m, frames() * 5, close=False)
    drain(consumer)
    monkeypatch.setattr(entries, "MAX_ENTRIES", 10)
    reads.clear()
    stats = Sweeper(consumer).run()
    # one pass: dead-lettered and finalized from the reservation alone, never read
    assert (stats.dead, stats.finalized) == (1, 1)
    assert reads == [] or m["request_id"] not in read_ids(reads)
    assert status(sessions, m["request_id"]) == "unsettled"
    assert redis_client.zscore(consumer.keys.recheck, m["request_id"]) is None
    assert not redis_client.sismember(consumer.keys.quarantine, m["request_id"])


def test_dead_letters_cap_what_they_copy(consumer, redis_client) -> None:
    keys = consumer.keys
    huge = b"r" * 10_000
    redis_client.xadd(keys.events(), {"kind": b"close", "request_id": huge})
    redis_client.xadd(keys.events(), {f"f{i}".encode(): b"v" for i in range(100)})
    drain(consumer)
    first, second = (fields for _id, fields in redis_client.xrange(keys.dead))
    assert first[b"orig.request_id"].startswith(b"r" * entries.DEAD_LETTER_VALUE_BYTES)
    assert first[b"orig.request_id"].endswith("…[9744 more]".encode())
    copied = [name for name in second if name.startswith(b"orig.")]
    assert len(copied) == entries.DEAD_LETTER_FIELDS
    assert second[b"orig_dropped"] == b"68"


def test_the_dead_letter_stream_is_bounded(redis_client, sessions, prefix) -> None:
    settings = Settings(
        hash_salt=FINGERPRINT_KEY, prefix=prefix, batch_size=500, dead_letter_maxlen=10
    )
    consumer = Consumer(redis_client, sessions, settings, name="c1")
    keys = consumer.keys
    pipe = redis_client.pipeline(transaction=False)
    for number in range(1_000):
        pipe.xadd(keys.events(), {"kind": "bogus", "request_id": f"r{number}"})
    pipe.execute()
    drain(consumer)
    # MAXLEN ~: Redis trims whole nodes (100 entries by default), so a little over the cap
    assert redis_client.xlen(keys.dead) <= 10 + 100


def test_a_held_call_whose_close_was_refused_by_size_is_finalized_by_the_sweeper(
    consumer, publisher, sessions, redis_client, account, reads, monkeypatch
) -> None:
    """Its open read first (held), its close after the stream grew past the limits (a 51 MB
    answer, on a loaded machine): the consumer dead-letters the close and quarantines the call;
    the sweeper finalizes it unsettled ``unreadable`` at its hold, reading its admission entry at
    most, never deferring it pass after pass (the admission head is no stream to reconcile)."""
    monkeypatch.setattr(entries, "MAX_STREAM_BYTES", 50_000)
    m = meta(account, reserved=7_000)
    admitted = {**m, "messages": [], "omitted_messages": True}
    fields = admission_fields(orjson.dumps(admitted), 1_796_000_000_000)
    queue_commands(redis_client, admission_commands(consumer.keys, m["request_id"], fields))
    publisher.open(m, admission=fields)
    drain(consumer)
    assert status(sessions, m["request_id"]) == "held"
    publisher.frames(m["request_id"], ["data: " + "x" * 10_000 + "\n\n"] * 10 + frames())
    publisher.close(m["request_id"])
    drain(consumer)
    assert redis_client.sismember(consumer.keys.quarantine, m["request_id"])
    assert status(sessions, m["request_id"]) == "held"
    Sweeper(consumer).run()
    assert status(sessions, m["request_id"]) == "unsettled"
    with sessions() as session:
        reason = session.scalar(
            select(Failure.reason)
            .join(Reservation, Reservation.id == Failure.reservation_id)
            .where(Reservation.request_id == m["request_id"])
        )
    assert reason == "unreadable"
