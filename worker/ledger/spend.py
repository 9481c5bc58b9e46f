"""What the authorization store copies from the ledger (``worker.service.authorization``).

Read-only, and read inside one snapshot by the caller (a REPEATABLE READ transaction on
PostgreSQL, one read transaction on SQLite) so that every figure is of the same moment.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models import OPEN_STATUSES, AccountCredit, CreditLimit, LedgerKind, Reservation
from worker.ledger import budgets as budget_rows
from worker.ledger.balances import SIGNED
from worker.ledger.funds import account_funds, entries, transactions
from worker.ledger.postings import system_account_id

reservations = Reservation.__table__


@dataclass
class AccountSpend:
    account_id: str
    funds: int | None  # funded + the credit limit in force; None: never funded nor given a limit
    charged: int
    budgets: dict[tuple[str, str], int] = field(default_factory=dict)  # (period, model) → limit
    # (period, model) → charged for the calls created in the current day / month; model "" all
    spent: dict[tuple[str, str], int] = field(default_factory=dict)
    # (scope, model) → charged for the calls created in the period ``scope`` names (``d:<date>``,
    # ``m:<month>``): the current periods and, near their bounds, the ones either side
    # (``period_windows``); model "" all
    scoped: dict[tuple[str, str], int] = field(default_factory=dict)
    # request id → (hold, created_at, model) of its calls still open (held or unsettled)
    open_holds: dict[str, tuple[int, datetime, str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CallState:
    account_id: str
    open: bool
    charged: int
    updated_at: datetime


def period_starts(now: datetime) -> dict[str, tuple[datetime, datetime]]:
    """The current UTC day's and calendar month's [start, end)."""
    now = now.astimezone(UTC)
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    month = day.replace(day=1)
    next_month = (month + timedelta(days=32)).replace(day=1)
    return {"day": (day, day + timedelta(days=1)), "month": (month, next_month)}


# A call's period is its own creation (admission) time, on the clock that stamped it; the sync's clock
# may differ by this much and a budget is still read from the period the call counts in.
CLOCK_MARGIN = timedelta(hours=1)


def period_windows(
    now: datetime, margin: timedelta = CLOCK_MARGIN
) -> list[tuple[str, str, datetime, datetime, bool]]:
    """(period, scope, start, end, current) of the periods whose spend the store needs at ``now``:
    the current day and month, and the one before or after when ``now`` is within ``margin`` of
    its bound."""
    found = []
    for period, (start, end) in period_starts(now).items():
        found.append((period, start, end, True))
        if now - start < margin:
            before = period_starts(start - timedelta(seconds=1))[period]
            found.append((period, *before, False))
        if end - now <= margin:
            after = period_starts(end)[period]
            found.append((period, *after, False))
    code = {"day": ("d:", "%Y-%m-%d"), "month": ("m:", "%Y-%m")}
    return [
        (period, code[period][0] + start.strftime(code[period][1]), start, end, current)
        for period, start, end, current in found
    ]


def _revenue(session: Session):  # type: ignore[no-untyped-def]
    return (
        select(reservations.c.account_id, reservations.c.model, func.sum(SIGNED))
        .select_from(entries.join(transactions).join(
            reservations, reservations.c.id == transactions.c.reservation_id))
        .where(entries.c.ledger_account_id == system_account_id(session, LedgerKind.REVENUE))
    )  # fmt: skip


def spend_snapshot(
    session: Session, now: datetime, account_ids: Sequence[str] | None = None
) -> dict[str, AccountSpend]:
    """Every known account's (or ``account_ids``') figures as the store needs them."""
    funds = account_funds(session, account_ids)
    funded = set(session.execute(select(AccountCredit.account_id).distinct()).scalars())
    funded |= set(session.execute(select(CreditLimit.account_id).distinct()).scalars())
    found = {
        account: AccountSpend(
            account,
            funds=int(f.funded) + int(f.limit or 0) if account in funded else None,
            charged=int(f.charged),
        )
        for account, f in funds.items()
    }
    for account, limits in budget_rows.in_force(session, account_ids).items():
        if account in found:
            found[account].budgets = limits
    for period, scope, start, end, current in period_windows(now):
        query = _revenue(session).where(
            reservations.c.created_at >= start, reservations.c.created_at < end
        )
        if account_ids is not None:
            query = query.where(reservations.c.account_id.in_(list(account_ids)))
        totals: dict[str, int] = defaultdict(int)
        for account, model, amount in session.execute(
            query.group_by(reservations.c.account_id, reservations.c.model)
        ):
            if account in found:
                found[account].scoped[(scope, model)] = int(amount or 0)
                if current:
                    found[account].spent[(period, model)] = int(amount or 0)
                totals[account] += int(amount or 0)
        for account, total in totals.items():
            found[account].scoped[(scope, "")] = total
            if current:
                found[account].spent[(period, "")] = total
    held = select(
        reservations.c.account_id,
        reservations.c.request_id,
        reservations.c.reserved_micros,
        reservations.c.created_at,
        reservations.c.model,
    ).where(reservations.c.status.in_([str(s) for s in OPEN_STATUSES]))
    if account_ids is not None:
        held = held.where(reservations.c.account_id.in_(list(account_ids)))
    for account, request_id, amount, created_at, model in session.execute(held):
        if account in found:
            found[account].open_holds[request_id] = (int(amount), created_at, model)
    return found


def call_states(session: Session, request_ids: Sequence[str]) -> dict[str, CallState]:
    """The ledger's state of each of ``request_ids`` it knows: open or not, and what it charged."""
    states: dict[str, CallState] = {}
    ids = list(request_ids)
    open_statuses = {str(s) for s in OPEN_STATUSES}
    revenue = system_account_id(session, LedgerKind.REVENUE)
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        charged = dict(
            session.execute(
                select(reservations.c.request_id, func.sum(SIGNED))
                .select_from(entries.join(transactions).join(
                    reservations, reservations.c.id == transactions.c.reservation_id))
                .where(entries.c.ledger_account_id == revenue,
                       reservations.c.request_id.in_(chunk))
                .group_by(reservations.c.request_id)
            ).all()
        )  # fmt: skip
        for request_id, account, status, updated_at in session.execute(
            select(
                reservations.c.request_id,
                reservations.c.account_id,
                reservations.c.status,
                reservations.c.updated_at,
            ).where(reservations.c.request_id.in_(chunk))
        ):
            states[request_id] = CallState(
                account, status in open_statuses, int(charged.get(request_id) or 0), updated_at
            )
    return states
