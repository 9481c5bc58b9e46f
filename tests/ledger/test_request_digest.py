"""The reservation records which request entry it was held from; the ledger refuses to take
another call's request for it, on the per-call and the batched path."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from models.reservations import Reservation
from worker.core.errors import RequestIdReused
from worker.ledger.batch import apply_common
from worker.ledger.operations import HoldOutcome, hold

from .factories import T0, make_meta, make_result


def test_hold_records_the_digest_and_refuses_another_calls_request(session: Session) -> None:
    first = replace(make_meta("dig-1", account_id="dig-acct"), digest="a" * 64)
    assert hold(session, first, now=T0) is HoldOutcome.HELD
    stored = session.scalar(
        select(Reservation.request_digest).where(Reservation.request_id == "dig-1")
    )
    assert stored == "a" * 64
    assert hold(session, first, now=T0) is HoldOutcome.DUPLICATE  # the same entry again
    unknown = replace(first, digest=None)  # not read from a stream: proves nothing
    assert hold(session, unknown, now=T0) is HoldOutcome.DUPLICATE
    with pytest.raises(RequestIdReused, match="request_id reused by a different call"):
        hold(session, replace(first, digest="b" * 64), now=T0)


def test_the_batched_path_leaves_another_calls_result_alone(session: Session) -> None:
    first = replace(make_meta("dig-2", account_id="dig-acct"), digest="a" * 64)
    apply_common(session, [first], [], now=T0)
    second = replace(first, digest="b" * 64)
    applied = apply_common(session, [second], [make_result("dig-2", account_id="dig-acct")], now=T0)
    assert applied.settled == {} and applied.held == set()
    same = apply_common(session, [first], [make_result("dig-2", account_id="dig-acct")], now=T0)
    assert set(same.settled) == {"dig-2"}
