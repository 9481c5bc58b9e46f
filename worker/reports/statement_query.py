"""``billing statement``: an account's month, read from the ledger in one read-only snapshot.

The positions at the month's start and end are the balance query (``worker.ledger.funds``, as of
each moment); the movements are four aggregates over the month's entries of the account (its
``available`` and ``held`` ledger accounts, and revenue from its reservations) and one list of its
open failures. See ``statement_model`` for what ties out against what.
"""

from __future__ import annotations

import re
from collections import defaultdict
from datetime import UTC, date, datetime
from typing import Any

from sqlalchemy import Date, and_, case, cast, func, literal_column, not_, select
from sqlalchemy.orm import Session

from models import (
    AccountCredit,
    Entry,
    Failure,
    Kind,
    LedgerAccount,
    LedgerKind,
    Reservation,
    Transaction,
    UsageRecord,
)
from worker.core.errors import LedgerError
from worker.core.money import Micros
from worker.ledger.funds import SIGNED, Funds, funds_of
from worker.ledger.postings import system_account_id
from worker.ledger.queries import require_known_account
from worker.reports.spec import ReportError
from worker.reports.statement_model import (
    CHARGE_FIELDS,
    RELEASE_FIELDS,
    ChargeRow,
    CreditLine,
    OpenFailure,
    Position,
    Statement,
)

entries = Entry.__table__
transactions = Transaction.__table__
ledger_accounts = LedgerAccount.__table__
reservations = Reservation.__table__
usage_records = UsageRecord.__table__
failures = Failure.__table__
account_credits = AccountCredit.__table__

_MONTH = re.compile(r"(\d{4})-(\d{2})")
# The ledger transaction kinds that move money back to available, by statement release line.
RELEASE_OF = {
    str(Kind.CHARGE): "after_charge",
    str(Kind.RESOLVE_CHARGE): "after_charge",
    str(Kind.RELEASE): "void",
    str(Kind.RESOLVE_RELEASE): "resolved",
}


# A call charged late, after its hold was resolved (``legs.late_charge``): money beyond the hold
# either way, as ``rollup.money_deltas`` counts it; its credit to available (a refund of an
# estimate charged too high) is not a hold released.
_LATE = and_(transactions.c.kind == str(Kind.CHARGE), transactions.c.flagged)


def parse_month(text: str) -> tuple[datetime, datetime]:
    """``YYYY-MM`` as its half-open UTC interval [first day, first day of the next month)."""
    found = _MONTH.fullmatch(text.strip())
    if not found or not 1 <= int(found[2]) <= 12 or int(found[1]) < 1:
        raise ReportError(f"--month {text!r} is not a month: use YYYY-MM, like 2026-11")
    year, month = int(found[1]), int(found[2])
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
    return start, end


def require_account(session: Session, account_id: str) -> None:
    """``require_known_account`` as a ``ReportError``."""
    try:
        require_known_account(session, account_id)
    except LedgerError as exc:
        raise ReportError(str(exc)) from None


def _position(funds: Funds) -> Position:
    return Position(funds.funded, funds.charged, funds.held, funds.available)


def _in(start: datetime, end: datetime) -> Any:
    return (transactions.c.created_at >= start) & (transactions.c.created_at < end)


def _day(dialect: str) -> Any:
    created = transactions.c.created_at
    if dialect == "postgresql":
        return cast(func.timezone(literal_column("INTERVAL '0'"), created), Date)
    return func.date(created)  # SQLite keeps naive UTC text


def _as_date(value: Any) -> date:
    return value if isinstance(value, date) else date.fromisoformat(str(value))


def build_statement(session: Session, account_id: str, month: str, *, now: datetime) -> Statement:
    """The statement of ``account_id`` for ``month`` (YYYY-MM, UTC); the month in progress closes
    at ``now``."""
    start, end = parse_month(month)
    if now < start:
        raise ReportError(f"--month {month} has not begun (it is {now.date().isoformat()} UTC)")
    as_of = min(end, now)
    holds, releases = _holds_and_releases(session, account_id, start, as_of)
    return Statement(
        account_id=account_id,
        month=f"{start:%Y-%m}",
        start=start,
        end=end,
        as_of=as_of,
        generated_at=now,
        opening=_position(funds_of(session, account_id, as_of=start)),
        closing=_position(funds_of(session, account_id, as_of=as_of)),
        credits=credit_lines(session, account_id, start, as_of),
        charges=_charges(session, account_id, start, as_of),
        holds=holds,
        releases=releases,
        open_failures=_open_failures(session, account_id, as_of),
    )


def _own(account_id: str) -> Any:
    return (ledger_accounts.c.account_id == account_id) & (
        entries.c.ledger_account_id == ledger_accounts.c.id
    )


def credit_lines(
    session: Session, account_id: str, start: datetime, end: datetime
) -> tuple[CreditLine, ...]:
    """The fund entries on the account's available balance, with their credit rows."""
    e, t, la = entries, transactions, ledger_accounts
    reversed_credit = account_credits.alias("reversed_credit")
    key = func.coalesce(account_credits.c.idempotency_key, reversed_credit.c.idempotency_key)
    rows = session.execute(
        select(t.c.created_at, account_credits.c.kind, key, account_credits.c.note, SIGNED)
        .select_from(
            e.join(t, t.c.id == e.c.transaction_id)
            .join(la, la.c.id == e.c.ledger_account_id)
            .outerjoin(account_credits, account_credits.c.transaction_id == t.c.id)
            .outerjoin(reversed_credit, reversed_credit.c.id == account_credits.c.reverses_id)
        )
        .where(
            _own(account_id),
            la.c.kind == str(LedgerKind.AVAILABLE),
            t.c.kind == str(Kind.FUND),
            _in(start, end),
        )
        .order_by(t.c.created_at, t.c.id)
    ).all()
    return tuple(
        CreditLine(
            at,
            kind or ("credit" if amount > 0 else "reversal"),
            credit_key or "",
            note or "",
            Micros(int(amount)),
        )
        for at, kind, credit_key, note, amount in rows
    )


def _charges(
    session: Session, account_id: str, start: datetime, end: datetime
) -> tuple[ChargeRow, ...]:
    """Revenue from the account's reservations, by day, model and what was charged."""
    e, t, r = entries, transactions, reservations
    category = case(
        (t.c.kind == str(Kind.TRUE_UP), "true_ups"),
        (_LATE, "true_ups"),
        (t.c.kind == str(Kind.RESOLVE_CHARGE), "resolved"),
        else_=func.coalesce(usage_records.c.usage_source, "reported"),
    )
    day = _day(session.get_bind().dialect.name)
    charged = t.c.kind.in_([str(Kind.CHARGE), str(Kind.RESOLVE_CHARGE)])
    calls = func.count(func.distinct(case((charged, t.c.reservation_id))))
    rows = session.execute(
        select(day, r.c.model, category, func.sum(SIGNED), calls)
        .select_from(
            e.join(t, t.c.id == e.c.transaction_id)
            .join(r, r.c.id == t.c.reservation_id)
            .outerjoin(usage_records, usage_records.c.reservation_id == r.c.id)
        )
        .where(
            r.c.account_id == account_id,
            e.c.ledger_account_id == system_account_id(session, LedgerKind.REVENUE),
            _in(start, end),
        )
        .group_by(day, r.c.model, category)
    ).all()
    money: dict[tuple[date, str], dict[str, int]] = {}
    counts: dict[tuple[date, str], int] = defaultdict(int)
    for row_day, model, kind, amount, count in rows:
        key = (_as_date(row_day), model)
        money.setdefault(key, dict.fromkeys(CHARGE_FIELDS, 0))[kind] += int(amount or 0)
        counts[key] += int(count or 0)
    return tuple(
        ChargeRow(key[0], key[1], counts[key], {k: Micros(v) for k, v in money[key].items()})
        for key in sorted(money)
    )


def _holds_and_releases(
    session: Session, account_id: str, start: datetime, end: datetime
) -> tuple[Micros, dict[str, Micros]]:
    """Credits to the account's held (holds) and available (releases) ledger accounts."""
    e, t, la = entries, transactions, ledger_accounts
    holds = Micros(0)
    releases = dict.fromkeys(RELEASE_FIELDS, Micros(0))
    for kind, tx_kind, amount in session.execute(
        select(la.c.kind, t.c.kind, func.sum(e.c.amount))
        .select_from(
            e.join(t, t.c.id == e.c.transaction_id).join(la, la.c.id == e.c.ledger_account_id)
        )
        .where(_own(account_id), e.c.direction == "credit", _in(start, end), not_(_LATE))
        .group_by(la.c.kind, t.c.kind)
    ):
        if kind == LedgerKind.HELD and tx_kind == Kind.HOLD:
            holds += int(amount)
        elif kind == LedgerKind.AVAILABLE and tx_kind in RELEASE_OF:
            releases[RELEASE_OF[tx_kind]] += int(amount)
    return holds, releases


def _open_failures(session: Session, account_id: str, at: datetime) -> tuple[OpenFailure, ...]:
    """The account's failures detected before ``at`` and not resolved before it."""
    r = reservations
    rows = session.execute(
        select(
            r.c.request_id,
            r.c.model,
            failures.c.reason,
            failures.c.detected_at,
            r.c.reserved_micros,
            failures.c.exposure_micros,
        )
        .select_from(failures.join(r, r.c.id == failures.c.reservation_id))
        .where(
            r.c.account_id == account_id,
            failures.c.detected_at < at,
            failures.c.resolved_at.is_(None) | (failures.c.resolved_at >= at),
        )
        .order_by(failures.c.detected_at, r.c.request_id)
    ).all()
    return tuple(
        OpenFailure(
            rid,
            model,
            reason,
            detected,
            Micros(held),
            None if exposure is None else Micros(exposure),
        )
        for rid, model, reason, detected, held, exposure in rows
    )


def run_statement(
    url: str, account_id: str, month: str, *, now: datetime | None = None
) -> Statement:
    """``build_statement`` in one read-only snapshot of the database at ``url``."""
    from worker.ledger.database import make_engine
    from worker.reports import connect_args, snapshot

    parse_month(month)  # a bad month is an error before any connection
    engine = make_engine(url, readonly=True, **connect_args(url))
    try:
        with snapshot(engine) as conn, Session(bind=conn) as session:
            require_account(session, account_id)
            return build_statement(session, account_id, month, now=now or datetime.now(UTC))
    finally:
        engine.dispose()
