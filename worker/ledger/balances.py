"""Balances, always computed from entries: nothing stored can drift from the ledger.

A ledger account's balance is its credits minus its debits. ``charged`` is what the customer has
paid into revenue (charges and true-ups of its reservations). The auditing helpers are used by the
tests and by anyone who wants to check a live database.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from models import OPEN_STATUSES, Entry, LedgerAccount, LedgerKind, Reservation, Transaction
from worker.core.money import Micros
from worker.ledger.postings import system_account_id

entries = Entry.__table__
ledger_accounts = LedgerAccount.__table__
reservations = Reservation.__table__
transactions = Transaction.__table__

SIGNED = case((entries.c.direction == "credit", entries.c.amount), else_=-entries.c.amount)


@dataclass(frozen=True, slots=True)
class Balance:
    available: Micros
    held: Micros
    charged: Micros


def _sum(value: object) -> Micros:
    return Micros(int(value or 0))


def balance(session: Session, account_id: str) -> Balance:
    """A customer's available, held and charged micros (all zero for an unknown account)."""
    by_kind = dict(
        session.execute(
            select(ledger_accounts.c.kind, func.sum(SIGNED))
            .select_from(entries.join(ledger_accounts))
            .where(ledger_accounts.c.account_id == account_id)
            .group_by(ledger_accounts.c.kind)
        ).all()
    )
    charged = session.execute(
        select(func.sum(SIGNED))
        .select_from(
            entries.join(transactions).join(
                reservations, reservations.c.id == transactions.c.reservation_id
            )
        )
        .where(
            entries.c.ledger_account_id == system_account_id(session, LedgerKind.REVENUE),
            reservations.c.account_id == account_id,
        )
    ).scalar()
    return Balance(
        available=_sum(by_kind.get(LedgerKind.AVAILABLE)),
        held=_sum(by_kind.get(LedgerKind.HELD)),
        charged=_sum(charged),
    )


def revenue(session: Session) -> Micros:
    return _sum(
        session.execute(
            select(func.sum(SIGNED)).where(
                entries.c.ledger_account_id == system_account_id(session, LedgerKind.REVENUE)
            )
        ).scalar()
    )


def open_holds(session: Session, account_id: str | None = None) -> Micros:
    """The sum of reserved micros of reservations still holding money (held or unsettled)."""
    query = select(func.sum(reservations.c.reserved_micros)).where(
        reservations.c.status.in_([str(s) for s in OPEN_STATUSES])
    )
    if account_id is not None:
        query = query.where(reservations.c.account_id == account_id)
    return _sum(session.execute(query).scalar())


def unbalanced_transactions(session: Session) -> list[int]:
    """Ids of transactions whose entries do not sum to zero or that have fewer than two entries."""
    return list(
        session.execute(
            select(transactions.c.id)
            .select_from(transactions.outerjoin(entries))
            .group_by(transactions.c.id)
            .having((func.coalesce(func.sum(SIGNED), 0) != 0) | (func.count(entries.c.id) < 2))
        ).scalars()
    )


def ledger_is_balanced(session: Session) -> bool:
    """Every transaction sums to zero, and so does the whole ledger."""
    total = session.execute(select(func.coalesce(func.sum(SIGNED), 0))).scalar()
    return int(total or 0) == 0 and not unbalanced_transactions(session)
