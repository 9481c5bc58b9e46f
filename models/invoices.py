"""Customer invoices: the number each (account, month) was issued under, and customer details.

``invoices`` holds one row per invoice issued: its ``number`` is sequential over the deployment
(unique; the next is one more than the highest), allocated once per (account, month) (unique), and
never changed afterwards, so issuing the same invoice again gives the same number. ``total_micros``
is what the invoice charged when first issued: a closed month's ledger never changes, so a later
rendering that finds another total is refused, not printed.

``customer_details`` is the history of what an invoice says about the customer (name, postal
address, e-mail, tax id), newest row in force, append-only by convention like ``credit_limits``:
an invoice shows the details in force when it was issued.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    ForeignKey,
    Index,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, BigId, UTCDateTime


class Invoice(Base):
    __tablename__ = "invoices"
    __table_args__ = (
        UniqueConstraint("account_id", "month"),
        CheckConstraint("number > 0", name="number_positive"),
        CheckConstraint("length(month) = 7", name="month_shape"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    number: Mapped[int] = mapped_column(BigInteger, unique=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id"))
    month: Mapped[str] = mapped_column(String(7))  # YYYY-MM, UTC
    total_micros: Mapped[int] = mapped_column(BigInteger)
    issued_at: Mapped[datetime] = mapped_column(UTCDateTime())


class CustomerDetails(Base):
    __tablename__ = "customer_details"
    __table_args__ = (Index(None, "account_id", "set_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id"))
    name: Mapped[str] = mapped_column(String(200))
    address: Mapped[str | None] = mapped_column(Text)  # lines separated by newlines
    email: Mapped[str | None] = mapped_column(String(320))
    tax_id: Mapped[str | None] = mapped_column(String(64))
    set_by: Mapped[str] = mapped_column(String(200))
    set_at: Mapped[datetime] = mapped_column(UTCDateTime())
