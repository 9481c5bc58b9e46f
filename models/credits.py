"""Funding a customer account: credits (top-ups) and their reversals, and credit limits.

``account_credits`` holds one row per credit or reversal, written in the same database transaction
as the ``fund`` ledger transaction that moves its money (``transaction_id``) and never changed
afterwards. A credit carries the caller's idempotency key (unique); a reversal names the credit it
undoes (``reverses_id``, unique: a credit is reversed at most once) and has no key of its own.

``credit_limits`` is the history of each account's credit limit, newest row in force: how far below
zero the account's ``available`` balance may go before the account is past its limit. An account
with no row has no limit set. Both tables are append-only by convention, like the price book.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import BigInteger, CheckConstraint, ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, BigId, UTCDateTime


class CreditKind(StrEnum):
    CREDIT = "credit"
    REVERSAL = "reversal"


class AccountCredit(Base):
    __tablename__ = "account_credits"
    __table_args__ = (
        CheckConstraint("amount_micros > 0", name="amount_positive"),
        CheckConstraint(
            "(kind = 'credit' AND idempotency_key IS NOT NULL AND reverses_id IS NULL)"
            " OR (kind = 'reversal' AND idempotency_key IS NULL AND reverses_id IS NOT NULL)",
            name="kind_key",
        ),
        Index(None, "account_id", "created_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    idempotency_key: Mapped[str | None] = mapped_column(String(200), unique=True)
    reverses_id: Mapped[int | None] = mapped_column(ForeignKey("account_credits.id"), unique=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id"))
    amount_micros: Mapped[int] = mapped_column(BigInteger)
    note: Mapped[str] = mapped_column(Text)
    created_by: Mapped[str] = mapped_column(String(200))
    transaction_id: Mapped[int] = mapped_column(ForeignKey("transactions.id"), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class CreditLimit(Base):
    __tablename__ = "credit_limits"
    __table_args__ = (
        CheckConstraint("limit_micros >= 0", name="limit_not_negative"),
        Index(None, "account_id", "set_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id"))
    limit_micros: Mapped[int] = mapped_column(BigInteger)
    note: Mapped[str] = mapped_column(Text)
    set_by: Mapped[str] = mapped_column(String(200))
    set_at: Mapped[datetime] = mapped_column(UTCDateTime())
