"""An account's closed month read from the ledger for its invoice, and the customer's details.

``content`` reads in the caller's session (one read-only snapshot): the subtotal is the balance
query's (``funds_of``: charged at the month's end minus charged at its start), the charge lines one
aggregate over the month's revenue entries of the account's calls (``invoice_model`` states them),
the credits the balance brought forward and the statement's credit lines; ``InvoiceDocument``
refuses lines that do not add up to the subtotal. Storing and numbering: ``invoice_store``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from sqlalchemy import and_, case, exists, func, select
from sqlalchemy.orm import Session

from models import (
    CustomerDetails,
    Entry,
    Kind,
    LedgerKind,
    Reservation,
    Transaction,
    UsageRecord,
)
from worker.core.money import Micros
from worker.ledger.balances import SIGNED
from worker.ledger.funds import funds_of
from worker.ledger.postings import system_account_id
from worker.reports.invoice_model import (
    TOKEN_COLUMNS,
    CreditEntry,
    Item,
    Line,
    Party,
    TaxTerms,
    UsageGroup,
    charge_lines,
    per_call_items,
    usage_items,
)
from worker.reports.statement_query import credit_lines, require_account

entries = Entry.__table__
transactions = Transaction.__table__
reservations = Reservation.__table__
usage_records = UsageRecord.__table__
customer_details = CustomerDetails.__table__
NO_TAX = TaxTerms()


@dataclass(frozen=True, slots=True)
class Content:
    lines: tuple[Line, ...]
    credits: tuple[CreditEntry, ...]
    subtotal: Micros

    @property
    def empty(self) -> bool:
        """Nothing charged and no line: a month with nothing to invoice (an account's months
        before its first call among them)."""
        return not self.lines and not self.subtotal


def content(session: Session, account_id: str, start: datetime, end: datetime) -> Content:
    """The month's charge lines, subtotal and credits (``invoice_model``'s module docstring)."""
    require_account(session, account_id)
    opening = funds_of(session, account_id, as_of=start)
    closing = funds_of(session, account_id, as_of=end)
    subtotal = closing.charged - opening.charged
    brought = CreditEntry(
        "balance", None, "", "Balance brought forward", opening.funded - opening.charged
    )
    moved = tuple(
        CreditEntry(c.kind, c.at, c.key, c.note, c.amount)
        for c in credit_lines(session, account_id, start, end)
    )
    return Content(tuple(_lines(session, account_id, start, end)), (brought, *moved), subtotal)


def _lines(session: Session, account_id: str, start: datetime, end: datetime) -> list[Line]:
    e, t, r, u = entries, transactions, reservations, usage_records
    late = and_(t.c.kind == str(Kind.CHARGE), t.c.flagged)
    per_call = (
        select(
            t.c.reservation_id,
            func.sum(case((late, SIGNED), else_=0)).label("late"),
            func.sum(case((late, 0), else_=SIGNED)).label("rest"),
        )
        .select_from(e.join(t, t.c.id == e.c.transaction_id))
        .join(r, r.c.id == t.c.reservation_id)
        .where(
            r.c.account_id == account_id,
            e.c.ledger_account_id == system_account_id(session, LedgerKind.REVENUE),
            t.c.created_at >= start,
            t.c.created_at < end,
        )
        .group_by(t.c.reservation_id)
        .subquery()
    )
    resolve = t.alias("resolve")
    resolved = exists().where(
        resolve.c.reservation_id == r.c.id, resolve.c.kind == str(Kind.RESOLVE_CHARGE)
    )
    resolved_col = case((resolved, 1), else_=0).label("resolved")
    # a resolved call's own amounts: its line is per amount charged (calls x amount each)
    rest_each = case((resolved, per_call.c.rest), else_=None).label("rest_each")
    late_each = case((resolved, per_call.c.late), else_=None).label("late_each")
    sums = [func.coalesce(func.sum(u.c[name]), 0) for name in TOKEN_COLUMNS]
    rows = session.execute(
        select(
            r.c.model,
            resolved_col,
            u.c.unit_prices,
            rest_each,
            late_each,
            func.count(),
            func.sum(per_call.c.late),
            func.sum(per_call.c.rest),
            *sums,
        )
        .select_from(per_call.join(r, r.c.id == per_call.c.reservation_id))
        .outerjoin(u, u.c.reservation_id == r.c.id)
        .group_by(r.c.model, resolved_col, u.c.unit_prices, rest_each, late_each)
    ).all()
    items: list[tuple[Item, int]] = []
    charged = 0
    estimate: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    adjusted: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for (
        model,
        was_resolved,
        unit_prices,
        rest_one,
        late_one,
        calls,
        late,
        rest,
        *token_sums,
    ) in rows:
        late, rest, calls = int(late or 0), int(rest or 0), int(calls)
        charged += late + rest
        if was_resolved:  # the estimate charged, and the difference charged when usage came late
            estimate[model][int(rest_one or 0)] += calls
            adjusted[model][int(late_one or 0)] += calls
            continue
        group = UsageGroup(
            model, unit_prices, calls, dict(zip(TOKEN_COLUMNS, map(int, token_sums), strict=True)),
            late + rest,
        )  # fmt: skip
        items.extend(usage_items(group))
    for model, amounts in estimate.items():
        items.extend(per_call_items(model, "estimate", amounts))
    for model, amounts in adjusted.items():
        items.extend(per_call_items(model, "adjustment", amounts))
    return charge_lines(items, charged)


def customer(session: Session, account_id: str, at: datetime) -> tuple[Party, TaxTerms]:
    """The customer's details and tax terms in force at ``at`` (the newest row set before it);
    none set: the account id as the name, no tax."""
    row = session.execute(
        select(customer_details)
        .where(customer_details.c.account_id == account_id, customer_details.c.set_at <= at)
        .order_by(customer_details.c.set_at.desc(), customer_details.c.id.desc())
        .limit(1)
    ).first()
    if row is None:
        return Party(account_id), TaxTerms()
    address = tuple(line for line in (row.address or "").splitlines() if line.strip())
    rate = None if row.tax_rate is None else Decimal(row.tax_rate)
    return Party(row.name, address, row.email, row.tax_id), TaxTerms(rate, row.reverse_charge)


def set_customer(
    session: Session,
    account_id: str,
    *,
    name: str,
    address: str | None,
    email: str | None,
    tax_id: str | None,
    tax: TaxTerms = NO_TAX,
    who: str,
    now: datetime,
) -> None:
    """Record the customer's details from ``now`` on (the earlier rows stay: documents finalized
    earlier keep what they printed)."""
    require_account(session, account_id)
    session.execute(
        customer_details.insert().values(
            account_id=account_id, name=name, address=address, email=email, tax_id=tax_id,
            tax_rate=None if tax.rate is None else str(tax.rate),
            reverse_charge=tax.reverse_charge, set_by=who, set_at=now,
        )
    )  # fmt: skip
