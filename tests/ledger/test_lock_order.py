"""Concurrent writers of one (day, account, model): no deadlock, and the rollup equals the ledger.

Two transactions each post calls of two rollup keys, in opposite orders, stepping in lock-step so
that each has posted its first call before either posts its second. When the rollup row was written
with each posting, each transaction then waited for the row the other had just written: PostgreSQL
broke the cycle with a deadlock error (the full ``make chaos`` lost thousands of calls to it). The
rollup is now written last, in key order, at COMMIT (``worker.ledger.rollup``).
"""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from models import MoneyDaily
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
