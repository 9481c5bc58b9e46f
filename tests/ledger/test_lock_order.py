"""Concurrent writers of one (day, account, model): no deadlock, and the rollup equals the ledger.

Two transactions each post calls of two rollup keys, in opposite orders, stepping in lock-step so
that each has posted its first call before either posts its second. When the rollup row was written
with each posting, each transaction then waited for the row the other had just written: PostgreSQL
broke the cycle with a deadlock error (the full ``make chaos`` lost thousands of calls to it). The
rollup is now written last, in key order, at COMMIT (``worker.ledger.rollup``).
"""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import Engine, func, select, text
from sqlalchemy.orm import Session

from models import MoneyDaily
from worker.core.result import Outcome, Reason
from worker.ledger.operations import apply_result, hold

from .factories import T0, make_meta, make_result

pytestmark = pytest.mark.postgres

GRACE = timedelta(hours=1)


def _writer(
    engine: Engine,
    account: str,
    calls: list[tuple[str, str]],
    barrier: threading.Barrier,
    errors: list[Exception],
) -> None:
    """Hold and settle ``calls`` (request id, model) in one transaction, meeting the other writer
    at the barrier after the first call."""
    try:
        with Session(engine) as session, session.begin():
            for index, (request_id, model) in enumerate(calls):
                common = {"account_id": account, "model": model}
                hold(session, make_meta(request_id, **common), now=T0)
                apply_result(session, make_result(request_id, **common), now=T0, grace=GRACE)
                if index == 0:
                    barrier.wait(timeout=30)
    except Exception as exc:  # the assertion below reports it
        errors.append(exc)
        barrier.abort()


def test_two_writers_in_opposite_key_orders_both_commit(pg_engine: Engine) -> None:
    account = f"lock-{uuid.uuid4().hex[:8]}"
    first = [(f"{account}-a-1", "model-x"), (f"{account}-a-2", "model-y")]
    second = [(f"{account}-b-1", "model-y"), (f"{account}-b-2", "model-x")]
    with Session(pg_engine) as session, session.begin():
        # The account exists before the race (two first holds of one account wait on its insert).
        hold(session, make_meta(f"{account}-0", account_id=account, model="model-z"), now=T0)
    barrier = threading.Barrier(2)
    errors: list[Exception] = []
    threads = [
        threading.Thread(target=_writer, args=(pg_engine, account, calls, barrier, errors))
        for calls in (first, second)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, f"a writer failed: {errors!r}"
    with Session(pg_engine) as session:
        rows = session.execute(
            select(MoneyDaily.model, func.sum(MoneyDaily.held), func.sum(MoneyDaily.charged))
            .where(MoneyDaily.account_id == account, MoneyDaily.model != "model-z")
            .group_by(MoneyDaily.model)
        ).all()
    # Each model: two holds of 10,000 and two charges of 4,000 (the factories' defaults).
    assert sorted(rows) == [("model-x", 20_000, 8_000), ("model-y", 20_000, 8_000)]


def _waiting_for_a_lock(engine: Engine) -> bool:
    with engine.connect() as conn:
        return bool(
            conn.scalar(
                text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            )
        )


def test_a_result_that_waited_for_the_lock_sees_the_failure_written_meanwhile(
    pg_engine: Engine,
) -> None:
    """A late settlement waits for the reservation's lock while another transaction marks the call
    unsettled; once it has the lock it must see that failure (and settle late), not a reservation
    that says ``unsettled`` without one (PostgreSQL re-reads the locked row after the wait, but a
    joined row comes from the statement's older snapshot)."""
    request_id = f"race-{uuid.uuid4().hex[:8]}"
    common = {"account_id": f"acct-{request_id}"}
    with Session(pg_engine) as session, session.begin():
        hold(session, make_meta(request_id, **common), now=T0)
    failed = make_result(
        request_id, outcome=Outcome.UNSETTLED, reason=Reason.MISSING_USAGE, **common
    )
    late = make_result(request_id, **common)
    outcome: dict[str, object] = {}

    def settle_late() -> None:
        try:
            with Session(pg_engine) as session, session.begin():
                later = T0 + timedelta(minutes=1)
                outcome["effect"] = apply_result(session, late, now=later, grace=GRACE)
        except Exception as exc:  # the assertion below reports it
            outcome["error"] = exc

    with Session(pg_engine) as first, first.begin():
        assert apply_result(first, failed, now=T0, grace=GRACE) == "unsettled"
        waiter = threading.Thread(target=settle_late)
        waiter.start()
        for _ in range(600):  # until the late settlement is queued behind our row lock
            if _waiting_for_a_lock(pg_engine) or not waiter.is_alive():
                break
            time.sleep(0.05)
    waiter.join(timeout=60)
    assert outcome == {"effect": "settled_late"}
