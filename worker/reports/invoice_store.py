"""Finalized invoices and credit notes: numbered, stored as finalized, their status.

Contract. ``issue`` runs in short transactions of its own (``session_of``), one at a time per
deployment (a PostgreSQL advisory lock; SQLite's writers run alone), retried when another process
took the same number first:

* no live (not void) invoice for the (account, month): the invoice is **finalized** from the
  month's ``Content``: the next invoice number, the customer's details and tax terms in force now,
  a due date, and its JSON and HTML stored (``invoices.document`` / ``html``), never changed after.
  A month with nothing charged is refused unless ``allow_empty``: no number is used for it.
* a live invoice: it is returned as stored, byte for byte, whatever changed since (prefix, issuer,
  customer). If the ledger now says something else for its period (money posted later, dated
  inside it), a **credit note** is finalized for the difference (``invoice_model.correction``),
  numbered in its own sequence; the next issue finds nothing new.

``on_finalized`` runs in the finalizing transaction for each document finalized (the CLI queues a
webhook event with it). Status (``set_status``) is the one thing that changes afterwards.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from models import Invoice
from worker.reports.invoice_model import (
    CREDIT_NOTE,
    INVOICE,
    InvoiceDocument,
    Party,
    Stated,
    TaxTerms,
    build_invoice,
    correction,
)
from worker.reports.invoice_query import Content, content, customer
from worker.reports.invoice_render import render_invoice_html, render_invoice_json
from worker.reports.spec import ReportError

invoices = Invoice.__table__

MAX_ATTEMPTS = 20  # number allocations that lost a race to another process, retried
# PostgreSQL: finalizations take this transaction-scoped advisory lock, one at a time (the races the
# unique constraints and the retries settle are then SQLite's only).
INVOICE_LOCK = 0x62696C6C696E76  # "billinv"
_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,15}")
_PRINTED = re.compile(r"(.+)-(\d{6,})")
# Status changes allowed, by kind and current status.
MOVES = {
    INVOICE: {"finalized": {"paid", "overdue", "void"}, "overdue": {"paid", "void"}},
    CREDIT_NOTE: {"finalized": {"void"}},
}
STATUSES = ("paid", "overdue", "void")


@dataclass(frozen=True, slots=True)
class Numbering:
    invoice_prefix: str
    credit_note_prefix: str
    due_days: int


@dataclass(frozen=True, slots=True)
class Stored:
    """A finalized document as stored."""

    id: int
    kind: str
    number: str  # as printed
    account_id: str
    month: str
    issued_at: datetime
    due_at: datetime | None
    status: str
    total: int
    document: str  # the JSON, byte for byte
    html: str


@dataclass(frozen=True, slots=True)
class Issued:
    invoice: Stored
    finalized_now: bool
    credit_note: Stored | None  # finalized now, for money posted into the period since


def printed_number(prefix: str, number: int) -> str:
    """The number as printed: ``<prefix>-<number, six digits at least>``."""
    return f"{prefix}-{number:06d}"


def check_prefix(prefix: str, setting: str) -> str:
    if not _PREFIX.fullmatch(prefix):
        raise ReportError(
            f"{setting} {prefix!r}: 1-16 letters, digits, '-' or '_', "
            "starting with a letter or digit"
        )
    return prefix


def _stored(row: object) -> Stored:
    r = row  # a Row of ``invoices``
    return Stored(
        r.id, r.kind, printed_number(r.prefix, r.number), r.account_id, r.month,  # type: ignore[attr-defined]
        r.issued_at, r.due_at, r.status, r.total_micros, r.document, r.html,  # type: ignore[attr-defined]
    )  # fmt: skip


def _next_number(session: Session, kind: str) -> int:
    highest = session.execute(
        select(func.max(invoices.c.number)).where(invoices.c.kind == kind)
    ).scalar()
    return int(highest or 0) + 1


def _insert(
    session: Session,
    doc: InvoiceDocument,
    *,
    number: int,
    prefix: str,
    corrects_id: int | None,
    on_finalized: Callable[[Session, Stored], None] | None,
) -> Stored:
    due_at = None
    if doc.due_date is not None:
        due_at = datetime.combine(doc.due_date, datetime.min.time(), doc.issued_at.tzinfo)
    values = dict(
        kind=doc.kind, number=number, prefix=prefix, account_id=doc.account_id, month=doc.month,
        total_micros=int(doc.total), issued_at=doc.issued_at, due_at=due_at,
        corrects_id=corrects_id, document=render_invoice_json(doc), html=render_invoice_html(doc),
        status="finalized",
    )  # fmt: skip
    new_id = session.execute(invoices.insert().values(**values).returning(invoices.c.id)).scalar()
    row = session.execute(select(invoices).where(invoices.c.id == new_id)).one()
    stored = _stored(row)
    if on_finalized is not None:
        on_finalized(session, stored)
    return stored


def _terms_of(document: str) -> TaxTerms:
    tax = json.loads(document)["tax"]
    rate = tax["rate_percent"]
    return TaxTerms(None if rate is None else Decimal(rate), bool(tax["reverse_charge"]))


def issue(
    session_of: sessionmaker[Session],
    found: Content,
    *,
    account_id: str,
    month: str,
    start: datetime,
    end: datetime,
    issuer: Party,
    numbering: Numbering,
    now: datetime,
    allow_empty: bool = False,
    on_finalized: Callable[[Session, Stored], None] | None = None,
) -> Issued:
    """The invoice of (``account_id``, ``month``), finalized now or as stored, and a credit note
    finalized now when the ledger changed for its period since (module docstring)."""
    for _ in range(MAX_ATTEMPTS):
        try:
            with session_of() as session, session.begin():
                if session.get_bind().dialect.name == "postgresql":
                    session.execute(select(func.pg_advisory_xact_lock(INVOICE_LOCK)))
                return _issue(
                    session, found, account_id=account_id, month=month, start=start, end=end,
                    issuer=issuer, numbering=numbering, now=now, allow_empty=allow_empty,
                    on_finalized=on_finalized,
                )  # fmt: skip
        except IntegrityError:
            continue
    raise ReportError(f"could not allocate an invoice number in {MAX_ATTEMPTS} attempts")


def _issue(
    session: Session,
    found: Content,
    *,
    account_id: str,
    month: str,
    start: datetime,
    end: datetime,
    issuer: Party,
    numbering: Numbering,
    now: datetime,
    allow_empty: bool,
    on_finalized: Callable[[Session, Stored], None] | None,
) -> Issued:
    row = session.execute(
        select(invoices).where(
            invoices.c.account_id == account_id,
            invoices.c.month == month,
            invoices.c.kind == INVOICE,
            invoices.c.status != "void",
        )
    ).first()
    period = dict(account_id=account_id, month=month, start=start, end=end)
    if row is None or row.document is None:
        if row is None and found.empty and not allow_empty:
            raise ReportError(
                f"{account_id} was charged nothing in {month}: no invoice finalized, no number "
                "used (--allow-empty finalizes a $0 invoice)"
            )
        issued_at = now if row is None else row.issued_at
        number = _next_number(session, INVOICE) if row is None else int(row.number)
        party, terms = customer(session, account_id, issued_at)
        doc = build_invoice(
            lines=found.lines, credits=found.credits, tax_terms=terms, subtotal=found.subtotal,
            number=printed_number(numbering.invoice_prefix, number), issued_at=issued_at,
            due_date=(issued_at + timedelta(days=numbering.due_days)).date(), issuer=issuer,
            customer=party, **period,
        )  # fmt: skip
        if row is not None:  # finalized before documents were stored: stored as issued now
            session.execute(invoices.delete().where(invoices.c.id == row.id))
        stored = _insert(session, doc, number=number, prefix=numbering.invoice_prefix,
                         corrects_id=None, on_finalized=on_finalized)  # fmt: skip
        return Issued(stored, True, None)
    invoice = _stored(row)
    notes = session.execute(
        select(invoices.c.document)
        .where(invoices.c.corrects_id == row.id, invoices.c.status != "void")
        .order_by(invoices.c.number)
    ).scalars()
    stated = Stated.of([row.document, *notes])
    party, _ = customer(session, account_id, now)
    head = dict(issued_at=now, due_date=None, issuer=issuer, customer=party, **period)
    fresh = build_invoice(
        lines=found.lines, credits=found.credits, tax_terms=_terms_of(row.document),
        subtotal=found.subtotal, number=invoice.number, **head,
    )  # fmt: skip
    number = _next_number(session, CREDIT_NOTE)
    note = correction(
        stated, fresh, invoice.number,
        number=printed_number(numbering.credit_note_prefix, number), **head,
    )  # fmt: skip
    if note is None:
        return Issued(invoice, False, None)
    stored_note = _insert(session, note, number=number, prefix=numbering.credit_note_prefix,
                          corrects_id=row.id, on_finalized=on_finalized)  # fmt: skip
    return Issued(invoice, False, stored_note)


def find(session: Session, printed: str) -> Stored:
    """The stored document printed as ``printed`` (``INV-000042``, ``CN-000001``)."""
    match = _PRINTED.fullmatch(printed)
    if match is None:
        raise ReportError(f"{printed!r} is not a document number (<prefix>-<6 digits or more>)")
    rows = session.execute(
        select(invoices).where(
            invoices.c.prefix == match.group(1), invoices.c.number == int(match.group(2))
        )
    ).all()
    if not rows:
        raise ReportError(f"no invoice or credit note is numbered {printed}")
    if len(rows) > 1:
        raise ReportError(f"{printed} names an invoice and a credit note (the same prefix)")
    return _stored(rows[0])


def set_status(
    session: Session, printed: str, status: str, *, who: str, note: str, now: datetime
) -> Stored:
    """Move a finalized document to ``status`` (``MOVES``); its stored bytes never change. An
    invoice with a live credit note is voided only after its notes."""
    found = find(session, printed)
    allowed = MOVES[found.kind].get(found.status, set())
    if status not in allowed:
        raise ReportError(
            f"{printed} is {found.status}: it cannot become {status} "
            f"({'no change allowed' if not allowed else 'allowed: ' + ', '.join(sorted(allowed))})"
        )
    if status == "void" and found.kind == INVOICE:
        live = session.execute(
            select(func.count()).where(
                invoices.c.corrects_id == found.id, invoices.c.status != "void"
            )
        ).scalar()
        if live:
            raise ReportError(f"{printed} has {live} credit note(s) not void: void them first")
    session.execute(
        update(invoices)
        .where(invoices.c.id == found.id, invoices.c.status == found.status)
        .values(status=status, status_at=now, status_by=who, status_note=note)
    )
    return find(session, printed)


def listed(session: Session, account_id: str | None) -> list[Stored]:
    query = select(invoices).where(invoices.c.document.is_not(None))
    if account_id is not None:
        query = query.where(invoices.c.account_id == account_id)
    rows = session.execute(query.order_by(invoices.c.issued_at, invoices.c.id)).all()
    return [_stored(row) for row in rows]


def pdf_of(
    session_of: sessionmaker[Session], stored: Stored, printer: Callable[[str], bytes]
) -> bytes:
    """The document's PDF: the one stored, or printed now from its stored HTML and stored (the
    first print wins), so every later print is the same bytes."""
    with session_of() as session:
        kept = session.execute(select(invoices.c.pdf).where(invoices.c.id == stored.id)).scalar()
    if kept is not None:
        return bytes(kept)
    printed = printer(stored.html)
    with session_of() as session, session.begin():
        session.execute(
            update(invoices)
            .where(invoices.c.id == stored.id, invoices.c.pdf.is_(None))
            .values(pdf=printed)
        )
        kept = session.execute(select(invoices.c.pdf).where(invoices.c.id == stored.id)).scalar()
    return bytes(kept)


def run_invoice(
    url: str,
    account_id: str,
    month: str,
    *,
    issuer: Party,
    numbering: Numbering,
    now: datetime,
    draft: bool = False,
    allow_empty: bool = False,
    on_finalized: Callable[[Session, Stored], None] | None = None,
) -> Issued | InvoiceDocument:
    """The invoice of ``account_id`` for the closed ``month``: the month read in one read-only
    snapshot, then ``issue``; a ``draft`` is built from the same reading and the customer's terms
    now, unnumbered, and nothing is written."""
    from worker.ledger.database import make_engine, session_factory
    from worker.reports import connect_args, snapshot
    from worker.reports.statement_query import parse_month

    start, end = parse_month(month)
    if now < end:
        raise ReportError(
            f"--month {month} is not over until {end.date().isoformat()} UTC: an invoice is "
            "issued for a closed month (`billing statement` shows the month in progress)"
        )
    month = f"{start:%Y-%m}"
    reader = make_engine(url, readonly=True, **connect_args(url))
    try:
        with snapshot(reader) as conn, Session(bind=conn) as session:
            found = content(session, account_id, start, end)
            if draft:
                party, terms = customer(session, account_id, now)
                return build_invoice(
                    lines=found.lines, credits=found.credits, tax_terms=terms,
                    subtotal=found.subtotal, number="DRAFT", issued_at=now,
                    due_date=(now + timedelta(days=numbering.due_days)).date(), issuer=issuer,
                    customer=party, account_id=account_id, month=month, start=start, end=end,
                    draft=True,
                )  # fmt: skip
    finally:
        reader.dispose()
    engine = make_engine(url, **connect_args(url))
    try:
        return issue(
            session_factory(engine), found, account_id=account_id, month=month, start=start,
            end=end, issuer=issuer, numbering=numbering, now=now, allow_empty=allow_empty,
            on_finalized=on_finalized,
        )  # fmt: skip
    finally:
        engine.dispose()
