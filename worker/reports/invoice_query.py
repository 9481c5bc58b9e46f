"""``billing invoice``: an account's closed month read from the ledger, its number, its parties.

Reading: one read-only snapshot (``content``): the total is the balance query's (``funds_of``:
charged at the month's end minus charged at its start), the lines one aggregate over the month's
revenue entries of the account's calls (``invoice_model`` splits it), and ``InvoiceDocument``
refuses lines that do not add up to the total. Writing: ``issue`` allocates the number in its own
short transaction, once per (account, month): the same invoice issued again gets the same number
(and must have the same total: a closed month's ledger never changes).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, case, exists, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from models import (
    CustomerDetails,
    Entry,
    Invoice,
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
    InvoiceDocument,
    Line,
    Party,
    UsageGroup,
    merge,
    usage_lines,
)
from worker.reports.spec import ReportError
from worker.reports.statement_query import parse_month, require_account

entries = Entry.__table__
transactions = Transaction.__table__
reservations = Reservation.__table__
usage_records = UsageRecord.__table__
invoices = Invoice.__table__
customer_details = CustomerDetails.__table__

MAX_ATTEMPTS = 20  # number allocations that lost a race to another process, retried
# PostgreSQL: allocations take this transaction-scoped advisory lock, one at a time (the races the
# unique constraints and the retries settle are then SQLite's only).
INVOICE_LOCK = 0x62696C6C696E76  # "billinv"
_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,15}")


@dataclass(frozen=True, slots=True)
class Content:
    lines: tuple[Line, ...]
    total: Micros
    prepaid: Micros


def content(session: Session, account_id: str, start: datetime, end: datetime) -> Content:
    """The month's lines, total and prepaid funds (``invoice_model``'s module docstring)."""
    require_account(session, account_id)
    opening = funds_of(session, account_id, as_of=start)
    closing = funds_of(session, account_id, as_of=end)
    total = closing.charged - opening.charged
    prepaid = closing.funded - opening.charged  # balance at the start + the month's credits
    return Content(tuple(_lines(session, account_id, start, end)), total, prepaid)


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
    sums = [func.coalesce(func.sum(u.c[name]), 0) for name in TOKEN_COLUMNS]
    rows = session.execute(
        select(
            r.c.model,
            resolved_col,
            u.c.unit_prices,
            func.count(),
            func.sum(per_call.c.late),
            func.sum(per_call.c.rest),
            func.sum(case((per_call.c.late != 0, 1), else_=0)),
            func.sum(case((per_call.c.rest != 0, 1), else_=0)),
            *sums,
        )
        .select_from(per_call.join(r, r.c.id == per_call.c.reservation_id))
        .outerjoin(u, u.c.reservation_id == r.c.id)
        .group_by(r.c.model, resolved_col, u.c.unit_prices)
    ).all()
    lines: list[Line] = []
    estimate: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    adjusted: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for model, was_resolved, unit_prices, calls, late, rest, n_late, n_rest, *token_sums in rows:
        late, rest = int(late or 0), int(rest or 0)
        if was_resolved:  # the estimate charged, and the difference charged when usage came late
            estimate[model][0] += int(n_rest or 0)
            estimate[model][1] += rest
            adjusted[model][0] += int(n_late or 0)
            adjusted[model][1] += late
            continue
        group = UsageGroup(
            model, unit_prices, int(calls), dict(zip(TOKEN_COLUMNS, map(int, token_sums), strict=True)),
            late + rest,
        )  # fmt: skip
        lines.extend(usage_lines(group))
    for model, (calls, amount) in estimate.items():
        if not calls:
            continue
        lines.append(
            Line(model, "estimate", f"{model}: unsettled calls charged at their estimate",
                 calls, "calls", None, Micros(amount))
        )  # fmt: skip
    for model, (calls, amount) in adjusted.items():
        if not calls:
            continue
        lines.append(
            Line(model, "adjustment", f"{model}: usage reported after an estimate was charged",
                 calls, "calls", None, Micros(amount))
        )  # fmt: skip
    return merge(lines)


def customer(session: Session, account_id: str, at: datetime) -> Party:
    """The customer's details in force at ``at`` (the newest row set before it); none set: the
    account id as the name."""
    row = session.execute(
        select(customer_details)
        .where(customer_details.c.account_id == account_id, customer_details.c.set_at <= at)
        .order_by(customer_details.c.set_at.desc(), customer_details.c.id.desc())
        .limit(1)
    ).first()
    if row is None:
        return Party(account_id)
    address = tuple(line for line in (row.address or "").splitlines() if line.strip())
    return Party(row.name, address, row.email, row.tax_id)


def set_customer(
    session: Session,
    account_id: str,
    *,
    name: str,
    address: str | None,
    email: str | None,
    tax_id: str | None,
    who: str,
    now: datetime,
) -> None:
    """Record the customer's details from ``now`` on (the earlier rows stay: older invoices)."""
    require_account(session, account_id)
    session.execute(
        customer_details.insert().values(
            account_id=account_id, name=name, address=address, email=email, tax_id=tax_id,
            set_by=who, set_at=now,
        )
    )  # fmt: skip


def issue(
    session_of: sessionmaker[Session], account_id: str, month: str, total: Micros, now: datetime
) -> tuple[int, datetime]:
    """The invoice number and issue time of (``account_id``, ``month``): the ones recorded, or the
    next number, recorded now. Each attempt is one transaction, retried when another process took
    the same number (or issued the same invoice) first. A recorded total that differs from
    ``total`` raises: the month's ledger changed after the invoice was issued."""
    for _ in range(MAX_ATTEMPTS):
        try:
            with session_of() as session, session.begin():
                if session.get_bind().dialect.name == "postgresql":
                    session.execute(select(func.pg_advisory_xact_lock(INVOICE_LOCK)))
                found = session.execute(
                    select(invoices.c.number, invoices.c.total_micros, invoices.c.issued_at).where(
                        invoices.c.account_id == account_id, invoices.c.month == month
                    )
                ).first()
                if found is not None:
                    if found.total_micros != total:
                        raise ReportError(
                            f"invoice {found.number} ({account_id}, {month}) was issued for "
                            f"{found.total_micros} micro-USD; the ledger now says {int(total)}"
                        )
                    return int(found.number), found.issued_at
                highest = session.execute(select(func.max(invoices.c.number))).scalar()
                number = int(highest or 0) + 1
                session.execute(
                    invoices.insert().values(
                        number=number, account_id=account_id, month=month,
                        total_micros=int(total), issued_at=now,
                    )
                )  # fmt: skip
            return number, now
        except IntegrityError:
            continue
    raise ReportError(f"could not allocate an invoice number in {MAX_ATTEMPTS} attempts")


def invoice_number(prefix: str, number: int) -> str:
    """The number as printed: ``<prefix>-<number, six digits at least>``."""
    return f"{prefix}-{number:06d}"


def check_prefix(prefix: str) -> str:
    if not _PREFIX.fullmatch(prefix):
        raise ReportError(
            f"BILLING_INVOICE_PREFIX {prefix!r}: 1-16 letters, digits, '-' or '_', "
            "starting with a letter or digit"
        )
    return prefix


def run_invoice(
    url: str,
    account_id: str,
    month: str,
    *,
    issuer: Party,
    prefix: str,
    now: datetime,
) -> InvoiceDocument:
    """The invoice of ``account_id`` for the closed ``month``: read in one snapshot, numbered
    (``issue``), its customer's details as they were when it was first issued."""
    from worker.ledger.database import make_engine, session_factory
    from worker.reports import connect_args, snapshot

    start, end = parse_month(month)
    if now < end:
        raise ReportError(
            f"--month {month} is not over until {end.date().isoformat()} UTC: an invoice is "
            "issued for a closed month (`billing statement` shows the month in progress)"
        )
    check_prefix(prefix)
    month = f"{start:%Y-%m}"
    reader = make_engine(url, readonly=True, **connect_args(url))
    try:
        with snapshot(reader) as conn, Session(bind=conn) as session:
            found = content(session, account_id, start, end)
    finally:
        reader.dispose()
    engine = make_engine(url, **connect_args(url))
    try:
        number, issued_at = issue(session_factory(engine), account_id, month, found.total, now)
        with Session(engine) as session:
            party = customer(session, account_id, issued_at)
    finally:
        engine.dispose()
    return InvoiceDocument(
        number=invoice_number(prefix, number),
        account_id=account_id,
        month=month,
        start=start,
        end=end,
        issued_at=issued_at,
        issuer=issuer,
        customer=party,
        lines=found.lines,
        total=found.total,
        prepaid=found.prepaid,
    )
