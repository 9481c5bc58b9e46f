"""Customer invoices and credit notes, each stored as the document it was finalized as, and
customer details.

``invoices`` holds one row per finalized document: ``kind`` ``invoice`` or ``credit_note``, each
kind numbered on its own (``number`` unique per kind, the next one more than the kind's highest),
printed ``<prefix>-<number>`` with the ``prefix`` in force at finalization. ``document`` (the JSON)
and ``html`` are the document as finalized, byte for byte, and never changed: issuing it again
returns them. ``pdf`` is the first PDF printed from ``html``, kept so that later prints are the same
bytes. At most one invoice per (account, month) is not void; a credit note names the invoice it
corrects (``corrects_id``). ``total_micros`` is the document's total (an invoice: the amount due; a
credit note: the change it makes to the amount due, negative when it credits the customer).

``status`` is the one part that changes after finalization: ``finalized`` -> ``paid`` / ``overdue``
/ ``void`` (``overdue`` -> ``paid`` / ``void``), set by a command with who, when and a note. A void
document keeps its number. Rows finalized before revision 0028 have no ``document`` until they are
issued again (they are then stored as that issue prints them).

``customer_details`` is the history of what an invoice says about the customer (name, postal
address, e-mail, tax id, tax rate in percent or reverse charge), newest row in force, append-only
by convention like ``credit_limits``: a document shows the details in force when it was finalized.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    ForeignKey,
    Index,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, BigId, UTCDateTime


class Invoice(Base):
    __tablename__ = "invoices"
    __table_args__ = (
        UniqueConstraint("kind", "number"),
        # one live invoice per (account, month); void ones and credit notes are not counted
        Index(
            "uq_invoices_live_month",
            "account_id",
            "month",
            unique=True,
            sqlite_where=text("kind = 'invoice' AND status != 'void'"),
            postgresql_where=text("kind = 'invoice' AND status != 'void'"),
        ),
        CheckConstraint("number > 0", name="number_positive"),
        CheckConstraint("length(month) = 7", name="month_shape"),
        CheckConstraint("kind IN ('invoice', 'credit_note')", name="kind_known"),
        CheckConstraint("status IN ('finalized', 'paid', 'overdue', 'void')", name="status_known"),
        CheckConstraint(
            "(kind = 'credit_note') = (corrects_id IS NOT NULL)", name="credit_note_corrects"
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), server_default="invoice")
    number: Mapped[int] = mapped_column(BigInteger)
    prefix: Mapped[str | None] = mapped_column(String(16))
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id"))
    month: Mapped[str] = mapped_column(String(7))  # YYYY-MM, UTC
    total_micros: Mapped[int] = mapped_column(BigInteger)
    issued_at: Mapped[datetime] = mapped_column(UTCDateTime())
    due_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    corrects_id: Mapped[int | None] = mapped_column(ForeignKey("invoices.id"))
    document: Mapped[str | None] = mapped_column(Text)
    html: Mapped[str | None] = mapped_column(Text)
    pdf: Mapped[bytes | None] = mapped_column(LargeBinary)
    status: Mapped[str] = mapped_column(String(16), server_default="finalized")
    status_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    status_by: Mapped[str | None] = mapped_column(String(200))
    status_note: Mapped[str | None] = mapped_column(Text)


class CustomerDetails(Base):
    __tablename__ = "customer_details"
    __table_args__ = (Index(None, "account_id", "set_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id"))
    name: Mapped[str] = mapped_column(String(200))
    address: Mapped[str | None] = mapped_column(Text)  # lines separated by newlines
    email: Mapped[str | None] = mapped_column(String(320))
    tax_id: Mapped[str | None] = mapped_column(String(64))
    tax_rate: Mapped[str | None] = mapped_column(String(16))  # percent, a decimal: "20", "8.875"
    reverse_charge: Mapped[bool] = mapped_column(Boolean, server_default=false())
    set_by: Mapped[str] = mapped_column(String(200))
    set_at: Mapped[datetime] = mapped_column(UTCDateTime())
