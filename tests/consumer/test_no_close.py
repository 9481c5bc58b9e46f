"""``no_close`` only for a call whose close never came (real Redis, SQLite and PostgreSQL): not for
one whose close came and was refused, nor for one that settled late after the sweeper's finalize."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from models import Anomaly, Reservation
from worker.config import Settings
from worker.consumer.sweeper import Sweeper
from worker.contract import entries

from .test_consumer import KEY as FINGERPRINT_KEY
from .test_consumer import drain, frames, meta, play, sse, status


@pytest.fixture
def settings(prefix: str) -> Settings:
    return Settings(
        hash_salt=FINGERPRINT_KEY, prefix=prefix, batch_size=50, sweep_idle_ms=0, grace_seconds=3600
    )


def kinds(sessions: sessionmaker[Session], request_id: str) -> set[str]:
    with sessions() as s:
        return set(
            s.scalars(
                select(Anomaly.kind)
                .join(Reservation, Reservation.id == Anomaly.reservation_id)
                .where(Reservation.request_id == request_id)
            )
        )


def unfinished() -> list[str]:
    """A stream cut off mid-answer: no finish, no usage."""
    return frames(finish=None, usage=False)


def rest() -> list[str]:
    """What a slow call sends after the sweeper gave up on it: the finish and the usage."""
    return [f for f in frames() if f not in unfinished()]


def test_a_close_that_came_and_was_refused_is_not_a_no_close(
    consumer, publisher, sessions, redis_client, monkeypatch
) -> None:
    m = meta("acct-nc")
    play(publisher, m, frames() * 3, close=False)
    drain(consumer)  # the hold
    monkeypatch.setattr(entries, "MAX_ENTRIES", 5)
    publisher.close(m["request_id"])
    drain(consumer)  # the close is refused: its stream has too many entries
    assert redis_client.sismember(consumer.keys.quarantine, m["request_id"])
    assert redis_client.exists(consumer.keys.request(m["request_id"]))  # a reservation refers to it
    Sweeper(consumer).run()
    assert status(sessions, m["request_id"]) == "unsettled"
    assert "no_close" not in kinds(sessions, m["request_id"])


def test_a_call_the_sweeper_gave_up_on_that_settles_on_its_close_is_not_a_no_close(
    consumer, publisher, sessions
) -> None:
    m = meta("acct-nc")
    play(publisher, m, unfinished(), close=False)
    drain(consumer)
    Sweeper(consumer).run()
    assert status(sessions, m["request_id"]) == "unsettled"
    assert "no_close" in kinds(sessions, m["request_id"])  # a suspicion, for now
    publisher.frames(m["request_id"], rest())
    publisher.close(m["request_id"])
    drain(consumer)
    assert status(sessions, m["request_id"]) == "settled"
    assert "no_close" not in kinds(sessions, m["request_id"])


def test_a_call_settled_late_by_the_recheck_is_not_a_no_close(
    consumer, publisher, sessions
) -> None:
    m = meta("acct-nc")
    play(publisher, m, unfinished(), close=False)
    drain(consumer)
    sweeper = Sweeper(consumer)
    sweeper.run()
    assert "no_close" in kinds(sessions, m["request_id"])
    publisher.frames(m["request_id"], rest())
    stats = sweeper.run()
    assert stats.settled_late == 1
    assert status(sessions, m["request_id"]) == "settled"
    assert "no_close" not in kinds(sessions, m["request_id"])


def test_a_close_refused_after_the_sweeper_finalized_withdraws_the_no_close(
    consumer, publisher, sessions, monkeypatch
) -> None:
    m = meta("acct-nc")
    play(publisher, m, unfinished(), close=False)
    drain(consumer)
    Sweeper(consumer).run()
    assert "no_close" in kinds(sessions, m["request_id"])
    publisher.frames(m["request_id"], [sse({"choices": []})] * 10)
    monkeypatch.setattr(entries, "MAX_ENTRIES", 5)
    publisher.close(m["request_id"])
    stats = consumer.poll(block_ms=None)
    assert stats.dead == 1
    assert "no_close" not in kinds(sessions, m["request_id"])


def test_a_close_that_never_came_is_still_a_no_close(consumer, publisher, sessions) -> None:
    m = meta("acct-nc")
    play(publisher, m, unfinished(), close=False)
    drain(consumer)
    consumer.client.delete(consumer.keys.request(m["request_id"]))  # and its stream expired
    Sweeper(consumer).run()
    assert status(sessions, m["request_id"]) == "unsettled"
    assert "no_close" in kinds(sessions, m["request_id"])
