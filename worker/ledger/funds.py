"""What each customer account holds, from the entries alone, now or at any earlier moment.

Per account: ``funded`` (credits minus reversals: the ``fund`` transactions on its available
account), ``held`` (its ``held`` account), ``charged`` (revenue from its reservations) and
``available`` (its ``available`` account). Every movement of a customer's money other than funding
stays within its available, held and revenue, so ``available = funded - held - charged``; the
figures are summed apart, so that identity is a check, not a definition. ``spendable`` adds the
credit limit in force. ``as_of`` counts the transactions created strictly before it.

Read-only: nothing here writes or commits.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from models import (
    Account,
    AccountCredit,
    CreditLimit,
    Entry,
    Kind,
    LedgerAccount,
    LedgerKind,
    Reservation,
    Transaction,
)
from worker.core.money import Micros
from worker.ledger.balances import SIGNED
from worker.ledger.postings import system_account_id

entries = Entry.__table__
transactions = Transaction.__table__
ledger_accounts = LedgerAccount.__table__
reservations = Reservation.__table__
accounts = Account.__table__
account_credits = AccountCredit.__table__
credit_limits = CreditLimit.__table__


@dataclass(frozen=True, slots=True)
class Funds:
    account_id: str
    funded: Micros
    held: Micros
    charged: Micros
    available: Micros
    limit: Micros | None  # the credit limit in force; None when none was ever set

    @property
    def spendable(self) -> Micros:
        """Available plus the credit limit: what the account may still spend."""
        return self.available + (self.limit or Micros(0))

    @property
    def ties_out(self) -> bool:
        return self.available == self.funded - self.held - self.charged


def _restrict(query: Any, column: Any, account_ids: Sequence[str] | None) -> Any:
    return query if account_ids is None else query.where(column.in_(list(account_ids)))


def _before(query: Any, as_of: datetime | None) -> Any:
    return query if as_of is None else query.where(transactions.c.created_at < as_of)


def account_funds(
    session: Session, account_ids: Sequence[str] | None = None, *, as_of: datetime | None = None
) -> dict[str, Funds]:
    """``Funds`` of each account in ``account_ids`` (every known account when None; an unknown one
    shows zeros), counting the transactions created before ``as_of`` (all when None)."""
    e, t, la, r = entries, transactions, ledger_accounts, reservations
    by_kind: dict[str, dict[str, int]] = defaultdict(dict)
    customer = _before(
        select(la.c.account_id, la.c.kind, func.sum(SIGNED))
        .select_from(e.join(la, la.c.id == e.c.ledger_account_id).join(t))
        .where(la.c.account_id.is_not(None))
        .group_by(la.c.account_id, la.c.kind),
        as_of,
    )
    for account, kind, amount in session.execute(_restrict(customer, la.c.account_id, account_ids)):
        by_kind[account][kind] = int(amount or 0)
    funded = _before(
        select(la.c.account_id, func.sum(SIGNED))
        .select_from(e.join(la, la.c.id == e.c.ledger_account_id).join(t))
        .where(t.c.kind == str(Kind.FUND), la.c.kind == str(LedgerKind.AVAILABLE))
        .group_by(la.c.account_id),
        as_of,
    )
    funded_by = dict(session.execute(_restrict(funded, la.c.account_id, account_ids)).all())
    charged = _before(
        select(r.c.account_id, func.sum(SIGNED))
        .select_from(e.join(t).join(r, r.c.id == t.c.reservation_id))
        .where(e.c.ledger_account_id == system_account_id(session, LedgerKind.REVENUE))
        .group_by(r.c.account_id),
        as_of,
    )
    charged_by = dict(session.execute(_restrict(charged, r.c.account_id, account_ids)).all())
    limits = limits_in_force(session, account_ids, as_of=as_of)
    if account_ids is None:
        account_ids = sorted(session.execute(select(accounts.c.id)).scalars())
    return {
        account: Funds(
            account,
            funded=Micros(int(funded_by.get(account) or 0)),
            held=Micros(by_kind[account].get(LedgerKind.HELD, 0)),
            charged=Micros(int(charged_by.get(account) or 0)),
            available=Micros(by_kind[account].get(LedgerKind.AVAILABLE, 0)),
            limit=limits.get(account),
        )
        for account in account_ids
    }


def funds_of(session: Session, account_id: str, *, as_of: datetime | None = None) -> Funds:
    return account_funds(session, [account_id], as_of=as_of)[account_id]


def limits_in_force(
    session: Session, account_ids: Sequence[str] | None = None, *, as_of: datetime | None = None
) -> dict[str, Micros]:
    """The credit limit in force per account at ``as_of`` (now when None): its newest row."""
    query = select(credit_limits.c.account_id, credit_limits.c.limit_micros).order_by(
        credit_limits.c.set_at, credit_limits.c.id
    )
    if as_of is not None:
        query = query.where(credit_limits.c.set_at < as_of)
    query = _restrict(query, credit_limits.c.account_id, account_ids)
    return {account: Micros(limit) for account, limit in session.execute(query)}


# --- levels at moments, for the low-balance alert ---------------------------------------------------


def funded_since(session: Session, before: datetime) -> dict[str, datetime]:
    """The accounts someone funded or gave a credit limit before ``before``, each with the moment
    of its first credit or limit: from then on the account's balance is watched."""
    first: dict[str, datetime] = {}
    for table, at in ((account_credits, account_credits.c.created_at),
                      (credit_limits, credit_limits.c.set_at)):  # fmt: skip
        rows = session.execute(
            select(table.c.account_id, func.min(at)).where(at < before).group_by(table.c.account_id)
        )
        for account, moment in rows:
            first[account] = min(moment, first.get(account, moment))
    return first


class Level(NamedTuple):
    """An account's available balance and the credit limit in force (0 when none) at a moment."""

    available: Micros
    limit: Micros

    @property
    def spendable(self) -> Micros:
        return self.available + self.limit


def levels_at(session: Session, moments: Sequence[datetime]) -> dict[str, list[Level | None]]:
    """Per watched account (``funded_since`` the last moment), its ``Level`` at each of
    ``moments`` (ascending), or None at a moment before it was watched. One pass over the watched
    accounts' available entries; their limit histories are a few rows."""
    if not moments:
        return {}
    watched = funded_since(session, moments[-1])
    if not watched:
        return {}
    e, t, la = entries, transactions, ledger_accounts
    sums = [
        func.sum(case((t.c.created_at < moment, SIGNED), else_=0)).label(f"m{i}")
        for i, moment in enumerate(moments)
    ]
    rows = session.execute(
        select(la.c.account_id, *sums)
        .select_from(e.join(la, la.c.id == e.c.ledger_account_id).join(t))
        .where(la.c.kind == str(LedgerKind.AVAILABLE), la.c.account_id.in_(list(watched)))
        .group_by(la.c.account_id)
    ).all()
    available = {row[0]: [int(value or 0) for value in row[1:]] for row in rows}
    history: dict[str, list[tuple[datetime, int]]] = defaultdict(list)
    for account, at, limit in session.execute(
        select(credit_limits.c.account_id, credit_limits.c.set_at, credit_limits.c.limit_micros)
        .where(credit_limits.c.account_id.in_(list(watched)))
        .order_by(credit_limits.c.set_at, credit_limits.c.id)
    ):
        history[account].append((at, limit))
    levels: dict[str, list[Level | None]] = {}
    for account, since in watched.items():
        sums_of = available.get(account, [0] * len(moments))
        levels[account] = [
            None
            if moment <= since
            else Level(Micros(sums_of[i]), Micros(_limit_at(history[account], moment)))
            for i, moment in enumerate(moments)
        ]
    return levels


def _limit_at(history: Iterable[tuple[datetime, int]], moment: datetime) -> int:
    found = 0
    for at, limit in history:  # ascending
        if at >= moment:
            break
        found = limit
    return found
