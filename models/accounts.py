"""Customer accounts and the ledger accounts that hold their money."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import CheckConstraint, ForeignKey, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, BigId, UTCDateTime


class LedgerKind(StrEnum):
    """Per customer: ``available`` and ``held``. System: ``revenue`` and ``credit`` (funding)."""

    AVAILABLE = "available"
    HELD = "held"
    REVENUE = "revenue"
    CREDIT = "credit"


CUSTOMER_KINDS = (LedgerKind.AVAILABLE, LedgerKind.HELD)
SYSTEM_KINDS = (LedgerKind.REVENUE, LedgerKind.CREDIT)


class Account(Base):
    """A gateway customer account, created on its first hold."""

    __tablename__ = "accounts"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class LedgerAccount(Base):
    """A bucket of money. ``name`` is unique: ``available:<account>``, ``held:<account>``, ``revenue``.

    Balances are never stored: they are sums of entries (credits minus debits).
    """

    __tablename__ = "ledger_accounts"
    __table_args__ = (
        CheckConstraint(
            "(kind IN ('available', 'held') AND account_id IS NOT NULL)"
            " OR (kind IN ('revenue', 'credit') AND account_id IS NULL)",
            name="kind_owner",
        ),
        Index(None, "account_id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    name: Mapped[str] = mapped_column(String(220), unique=True)
    kind: Mapped[str] = mapped_column(String(16))
    account_id: Mapped[str | None] = mapped_column(ForeignKey("accounts.id"))


def ledger_account_name(kind: str, account_id: str | None = None) -> str:
    return str(kind) if account_id is None else f"{kind}:{account_id}"
