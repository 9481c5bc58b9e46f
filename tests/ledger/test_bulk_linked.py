"""``bulk.insert_linked``: parents and children in one statement (two on SQLite), each child given
its parent's id through the parent's natural key; a child naming no parent written is refused."""

from __future__ import annotations

import itertools

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from models import Entry, Transaction
from worker.core.errors import LedgerError
from worker.db import bulk
from worker.ledger import operations
from worker.ledger.postings import customer_ids, entries, transactions

from .factories import T0, make_meta

_runs = itertools.count()


def _reservation(session: Session) -> tuple[int, int, int]:
    """A held reservation and its customer's (available, held) ledger account ids."""
    meta = make_meta(f"linked-{next(_runs)}", account_id="acct-linked")
    operations.hold(session, meta, now=T0)
    reservation_id = session.execute(
        select(Transaction.reservation_id).order_by(Transaction.id.desc()).limit(1)
    ).scalar_one()
    customer = customer_ids(session, "acct-linked", T0)
    return reservation_id, customer.available_id, customer.held_id


def test_children_get_their_parents_ids(session: Session) -> None:
    reservation_id, available, held = _reservation(session)
    parents = [
        {"reservation_id": reservation_id, "kind": kind, "flagged": False, "created_at": T0}
        for kind in ("release", "true_up")
    ]
    children = [
        {"reservation_id": reservation_id, "kind": kind, "ledger_account_id": account,
         "amount": amount, "direction": direction}
        for kind, amount in (("release", 7), ("true_up", 11))
        for account, direction in ((held, "debit"), (available, "credit"))
    ]  # fmt: skip
    bulk.insert_linked(
        session, transactions, parents, entries, children,
        key=("reservation_id", "kind"), link="transaction_id",
    )  # fmt: skip
    found = session.execute(
        select(Transaction.kind, Entry.amount, Entry.direction)
        .join(Entry, Entry.transaction_id == Transaction.id)
        .where(Transaction.reservation_id == reservation_id, Transaction.kind != "hold")
    ).all()
    assert sorted(found) == sorted(
        [("release", 7, "debit"), ("release", 7, "credit"), ("true_up", 11, "debit"),
         ("true_up", 11, "credit")]
    )  # fmt: skip


def test_a_child_naming_no_parent_is_refused(session: Session) -> None:
    reservation_id, _available, held = _reservation(session)
    parents = [{"reservation_id": reservation_id, "kind": "release", "flagged": False,
                "created_at": T0}]  # fmt: skip
    children = [
        {"reservation_id": reservation_id, "kind": kind, "ledger_account_id": held,
         "amount": 5, "direction": "debit"}
        for kind in ("release", "true_up")  # no true_up parent
    ]  # fmt: skip
    with pytest.raises(LedgerError, match="name"), session.begin_nested():
        bulk.insert_linked(
            session, transactions, parents, entries, children,
            key=("reservation_id", "kind"), link="transaction_id",
        )  # fmt: skip
