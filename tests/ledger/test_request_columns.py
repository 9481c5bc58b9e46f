"""Whatever metadata the parser accepts, both engines store: the hold, its accounts and its
``money_daily`` row, on the per-call and the batched path alike (what SQLite accepts and PostgreSQL
refuses is refused before either sees it)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

from hypothesis import given, settings
from metadata_values import hostile_metadata
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from models.reservations import Reservation
from models.rollup import MoneyDaily
from worker.core.errors import RequestMetaError
from worker.core.request import MAX_RESERVED_MICROS, request_from_dict
from worker.ledger.batch import apply_common
from worker.ledger.operations import hold
from worker.ledger.rollup import flush_money

NOW = datetime(2026, 12, 2, tzinfo=UTC)
_entries = itertools.count(1)


def _in_rolled_back_session(engine: Engine, work) -> None:  # type: ignore[no-untyped-def]
    with engine.connect() as conn:
        outer = conn.begin()
        session = Session(bind=conn, join_transaction_mode="create_savepoint")
        try:
            work(session)
        finally:
            session.close()
            outer.rollback()


@settings(max_examples=150, deadline=None)
@given(data=hostile_metadata())
def test_accepted_metadata_is_held_by_both_paths_on_both_engines(engine: Engine, data) -> None:
    try:
        meta = request_from_dict(data, f"{next(_entries)}-0".encode())
    except RequestMetaError:
        return
    twin = request_from_dict({**data, "request_id": meta.request_id[:190] + "-batched"}, b"1-1")

    def held_now(session: Session) -> int:
        found = session.scalar(
            select(func.sum(MoneyDaily.held)).where(
                MoneyDaily.account_id == meta.account_id, MoneyDaily.model == meta.model
            )
        )
        return int(found or 0)

    def work(session: Session) -> None:
        # What other tests committed to the shared database for this account and model stays out.
        before = held_now(session)
        hold(session, meta, now=NOW)
        applied = apply_common(session, [twin], [], now=NOW)
        assert applied.held == ({twin.request_id} if twin.reserved_micros > 0 else set())
        flush_money(session)
        stored = session.execute(
            select(Reservation.account_id, Reservation.model, Reservation.reserved_micros)
            .where(Reservation.request_id == meta.request_id)
        ).one()  # fmt: skip
        assert tuple(stored) == (meta.account_id, meta.model, meta.reserved_micros)
        assert held_now(session) - before == meta.reserved_micros + twin.reserved_micros

    _in_rolled_back_session(engine, work)


def test_maximal_holds_of_one_account_day_and_model_add_up_in_the_rollup(engine: Engine) -> None:
    base = {
        "account_id": "acct-max",
        "model": "gpt-4o",
        "stream": True,
        "created_at": "2026-11-30T12:00:00Z",
    }
    metas = [
        request_from_dict({**base, "request_id": f"max-{i}", "reserved_micros": amount})
        for i, amount in enumerate([MAX_RESERVED_MICROS] * 3 + [1000])
    ]

    def work(session: Session) -> None:
        for meta in metas[:2]:
            hold(session, meta, now=NOW)
        apply_common(session, metas[2:], [], now=NOW)
        flush_money(session)
        held = session.scalar(select(MoneyDaily.held).where(MoneyDaily.account_id == "acct-max"))
        assert held == 3 * MAX_RESERVED_MICROS + 1000

    _in_rolled_back_session(engine, work)
