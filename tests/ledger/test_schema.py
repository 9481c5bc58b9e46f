"""The schema keeps the ledger honest on its own: what the code must not do, the database refuses."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import Engine, delete, func, insert, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from ledger.factories import T0, make_meta, unsettled
from models import Entry, Failure, LedgerAccount, LedgerCheck, Reservation, Transaction
from worker.ledger.operations import apply_result, hold

NOW = T0


def _ledger_ids(session: Session, account: str) -> tuple[int, int]:
    rows = dict(
        session.execute(
            select(LedgerAccount.kind, LedgerAccount.id).where(LedgerAccount.account_id == account)
        ).all()
    )
    return rows["available"], rows["held"]


def test_amounts_must_be_positive(session: Session) -> None:
    hold(session, make_meta(), now=NOW)
    available, held = _ledger_ids(session, "acct-1")
    txn = session.execute(
        insert(Transaction.__table__)
        .values(reservation_id=None, kind="fund", flagged=False, created_at=NOW)
        .returning(Transaction.id)
    ).scalar_one()
    with pytest.raises(IntegrityError, match="amount_positive"), session.begin_nested():
        session.execute(
            insert(Entry.__table__),
            [
                {"transaction_id": txn, "ledger_account_id": available, "amount": 0,
                 "direction": "debit"},
                {"transaction_id": txn, "ledger_account_id": held, "amount": 0,
                 "direction": "credit"},
            ],
        )  # fmt: skip
    with pytest.raises(IntegrityError, match="amount_positive"), session.begin_nested():
        session.execute(
            insert(Entry.__table__).values(
                transaction_id=txn, ledger_account_id=held, amount=-5, direction="credit"
            )
        )


def test_one_entry_set_per_reservation_and_kind(session: Session) -> None:
    hold(session, make_meta(), now=NOW)
    reservation = session.execute(
        select(Reservation.id).where(Reservation.request_id == "req-1")
    ).scalar_one()
    with pytest.raises(IntegrityError), session.begin_nested():
        session.execute(
            insert(Transaction.__table__).values(
                reservation_id=reservation, kind="hold", flagged=False, created_at=NOW
            )
        )


def test_entries_and_transactions_are_append_only(session: Session) -> None:
    hold(session, make_meta(), now=NOW)
    for statement in (
        update(Entry.__table__).values(amount=1),
        delete(Entry.__table__),
        update(Transaction.__table__).values(flagged=True),
        delete(Transaction.__table__),
    ):
        with pytest.raises(IntegrityError, match="append-only"), session.begin_nested():
            session.execute(statement)


def test_resolution_is_all_or_nothing(session: Session) -> None:
    hold(session, make_meta(), now=NOW)
    apply_result(session, unsettled(), now=NOW, grace=timedelta(hours=1))
    with pytest.raises(IntegrityError, match="resolution_all_or_none"), session.begin_nested():
        session.execute(update(Failure.__table__).values(action="release"))


@pytest.mark.postgres
def test_postgres_refuses_an_unbalanced_transaction_at_commit(
    pg_engine: Engine, unique_id: str
) -> None:
    sessions = sessionmaker(pg_engine)
    with sessions() as session, session.begin():
        hold(session, make_meta(f"r-{unique_id}", account_id=f"a-{unique_id}"), now=NOW)
    with sessions() as session:
        available, held = _ledger_ids(session, f"a-{unique_id}")
        session.rollback()
        for legs in ([(available, 5, "debit"), (held, 4, "credit")], [(held, 5, "credit")], []):
            txn = session.execute(
                insert(Transaction.__table__)
                .values(reservation_id=None, kind="fund", flagged=False, created_at=NOW)
                .returning(Transaction.id)
            ).scalar_one()
            for account, amount, direction in legs:
                session.execute(
                    insert(Entry.__table__).values(
                        transaction_id=txn,
                        ledger_account_id=account,
                        amount=amount,
                        direction=direction,
                    )
                )
            with pytest.raises(IntegrityError, match="does not balance"):
                session.commit()
            session.rollback()
        # A balanced one written by hand goes through.
        txn = session.execute(
            insert(Transaction.__table__)
            .values(reservation_id=None, kind="fund", flagged=False, created_at=NOW)
            .returning(Transaction.id)
        ).scalar_one()
        session.execute(
            insert(Entry.__table__),
            [
                {"transaction_id": txn, "ledger_account_id": available, "amount": 5,
                 "direction": "debit"},
                {"transaction_id": txn, "ledger_account_id": held, "amount": 5,
                 "direction": "credit"},
            ],
        )  # fmt: skip
        session.commit()
        # An entry added later to that committed transaction unbalances it: refused at commit too.
        session.execute(
            insert(Entry.__table__).values(
                transaction_id=txn, ledger_account_id=held, amount=1, direction="credit"
            )
        )
        with pytest.raises(IntegrityError, match="does not balance"):
            session.commit()
        session.rollback()
        # A savepoint rolled back takes its queued check with it; the queue is empty after commits.
        savepoint = session.begin_nested()
        session.execute(
            insert(Entry.__table__).values(
                transaction_id=txn, ledger_account_id=held, amount=1, direction="credit"
            )
        )
        savepoint.rollback()
        session.commit()
        assert session.execute(select(func.count()).select_from(LedgerCheck)).scalar_one() == 0


@pytest.mark.postgres
def test_postgres_triggers_exist(pg_engine: Engine) -> None:
    with pg_engine.connect() as conn:
        names = set(
            conn.execute(text("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal")).scalars()
        )
    assert {"entries_balanced", "transactions_balanced", "ledger_checks_balanced"} <= names
    assert {"entries_append_only", "transactions_append_only"} <= names
