"""The append-only double-entry ledger: transactions and their entries.

Each entry moves a positive amount into (credit) or out of (debit) one ledger account; the credits and
debits of a transaction are equal. On PostgreSQL the migrations make the database refuse, at COMMIT, a
transaction whose entries do not balance (each INSERT statement queues the ledger transactions it
touched as one ``LedgerCheck`` row, whose deferred constraint trigger checks them all; migration
0013), and triggers refuse UPDATE and DELETE.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    ForeignKey,
    Index,
    String,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, BigId, UTCDateTime


class Kind(StrEnum):
    HOLD = "hold"
    CHARGE = "charge"
    RELEASE = "release"
    TRUE_UP = "true_up"
    RESOLVE_CHARGE = "resolve_charge"
    RESOLVE_RELEASE = "resolve_release"
    FUND = "fund"


class Direction(StrEnum):
    DEBIT = "debit"
    CREDIT = "credit"


class Transaction(Base):
    __tablename__ = "transactions"
    __table_args__ = (
        UniqueConstraint("reservation_id", "kind"),
        CheckConstraint(
            "kind IN ('hold', 'charge', 'release', 'true_up', 'resolve_charge',"
            " 'resolve_release', 'fund')",
            name="kind",
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    reservation_id: Mapped[int | None] = mapped_column(ForeignKey("reservations.id"))
    kind: Mapped[str] = mapped_column(String(32))
    flagged: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class Entry(Base):
    __tablename__ = "entries"
    __table_args__ = (
        CheckConstraint("amount > 0", name="amount_positive"),
        CheckConstraint("direction IN ('debit', 'credit')", name="direction"),
        Index(None, "transaction_id"),
        Index(None, "ledger_account_id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    transaction_id: Mapped[int] = mapped_column(ForeignKey("transactions.id"))
    ledger_account_id: Mapped[int] = mapped_column(ForeignKey("ledger_accounts.id"))
    amount: Mapped[int] = mapped_column(BigInteger)
    direction: Mapped[str] = mapped_column(String(6))


class LedgerCheck(Base):
    """The ledger transactions one INSERT statement touched, waiting for the balance check at COMMIT.

    Written only by the PostgreSQL triggers (migration 0013) and deleted by the check itself, so the
    table is empty outside a database transaction; never written on SQLite, where the code checks."""

    __tablename__ = "ledger_checks"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    transaction_ids: Mapped[list[int]] = mapped_column(JSON)
