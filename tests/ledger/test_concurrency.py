"""Real concurrent connections on PostgreSQL: the reservation row lock makes one writer win."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session, sessionmaker

from ledger.factories import make_meta, settled, unsettled
from models import Reservation, Transaction
from worker.core.errors import LedgerError
from worker.db.transient import is_transient
from worker.ledger.balances import balance, unbalanced_transactions
from worker.ledger.operations import apply_result, hold, resolve

pytestmark = pytest.mark.postgres
GRACE = timedelta(hours=1)
THREADS = 4


def race(engine: Engine, work: Callable[[Session], str]) -> list[str]:
    """Run ``work`` in THREADS threads, each in its own connection and transaction, started together
    by a barrier; transient errors are retried as the pipeline would."""
    sessions = sessionmaker(engine)
    barrier = threading.Barrier(THREADS)
    outcomes: list[str] = []
    lock = threading.Lock()

    def run() -> None:
        for attempt in range(5):
            with sessions() as session:
                try:
                    with session.begin():
                        session.connection()  # own connection, transaction begun
                        if attempt == 0:
                            barrier.wait(timeout=10)
                        outcome = work(session)
                except LedgerError as exc:
                    outcome = f"refused: {exc}"
                except Exception as exc:
                    if is_transient(exc):
                        continue
                    outcome = f"error: {exc!r}"
            with lock:
                outcomes.append(outcome)
            return

    threads = [threading.Thread(target=run) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return sorted(outcomes)


def _charges(engine: Engine, request_id: str) -> int:
    with Session(engine) as session:
        return session.execute(
            select(func.count())
            .select_from(Transaction)
            .join(Reservation, Reservation.id == Transaction.reservation_id)
            .where(Reservation.request_id == request_id, Transaction.kind == "charge")
        ).scalar_one()


@pytest.mark.parametrize("held_first", [True, False], ids=["held", "settle-before-hold"])
def test_concurrent_settles_post_exactly_one_charge(
    pg_engine: Engine, unique_id: str, held_first: bool
) -> None:
    request_id, account = f"race-{unique_id}", f"acct-{unique_id}"
    now = datetime.now(UTC)
    if held_first:
        with sessionmaker(pg_engine).begin() as session:
            hold(session, make_meta(request_id, account_id=account), now=now)
    result = settled(request_id, account_id=account, charge=4_000)
    outcomes = race(pg_engine, lambda s: apply_result(s, result, now=now, grace=GRACE))
    assert outcomes == ["duplicate"] * (THREADS - 1) + ["settled"]
    assert _charges(pg_engine, request_id) == 1
    with Session(pg_engine) as session:
        found = balance(session, account)
        assert (found.available, found.held, found.charged) == (-4_000, 0, 4_000)
        assert unbalanced_transactions(session) == []


def test_concurrent_resolutions_resolve_once(pg_engine: Engine, unique_id: str) -> None:
    request_id, account = f"race-{unique_id}", f"acct-{unique_id}"
    now = datetime.now(UTC)
    with sessionmaker(pg_engine).begin() as session:
        hold(session, make_meta(request_id, account_id=account), now=now)
        apply_result(session, unsettled(request_id, account_id=account), now=now, grace=GRACE)
    outcomes = race(
        pg_engine,
        lambda s: resolve(s, request_id, "charge_estimate", who="ops", note="race", now=now),
    )
    assert outcomes[-1] == "settled_from_estimate"
    assert all("already resolved" in o for o in outcomes[:-1])
    with Session(pg_engine) as session:
        assert balance(session, account).charged == 3_000
