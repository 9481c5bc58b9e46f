"""Spend control: each account's budgets, and the corrections the authorization store needed.

``budgets`` is the history of an account's budgets, newest row per (account, period, model) in
force: at most ``limit_micros`` charged (and held in flight) for the calls created in a UTC day or
calendar month, for every model (``model`` empty) or one. A row with ``limit_micros`` NULL clears
the budget. Append-only by convention, like ``credit_limits``.

``authorization_corrections``: each difference the sync task found between the Redis authorization
store and the ledger, with its amount (``worker.service.authorization``): a release the worker
missed, a call authorized but never recorded, a charge the store never saw. Append-only.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, CheckConstraint, ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, BigId, UTCDateTime

BUDGET_PERIODS = ("day", "month")
CORRECTION_KINDS = ("missed_release", "never_recorded", "unseen_charge", "unauthorized_hold")


class Budget(Base):
    __tablename__ = "budgets"
    __table_args__ = (
        CheckConstraint("limit_micros IS NULL OR limit_micros >= 0", name="limit_not_negative"),
        CheckConstraint("period IN ('day', 'month')", name="period"),
        Index(None, "account_id", "period", "model", "set_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id"))
    period: Mapped[str] = mapped_column(String(8))
    model: Mapped[str] = mapped_column(String(200))  # empty: every model
    limit_micros: Mapped[int | None] = mapped_column(BigInteger)
    note: Mapped[str] = mapped_column(Text)
    set_by: Mapped[str] = mapped_column(String(200))
    set_at: Mapped[datetime] = mapped_column(UTCDateTime())


class AuthorizationCorrection(Base):
    __tablename__ = "authorization_corrections"
    __table_args__ = (
        CheckConstraint(
            "kind IN (" + ", ".join(f"'{kind}'" for kind in CORRECTION_KINDS) + ")", name="kind"
        ),
        Index(None, "detected_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    account_id: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(32))
    # Signed: what the store had to move toward the ledger (positive: it had too little taken).
    amount_micros: Mapped[int] = mapped_column(BigInteger)
    request_id: Mapped[str | None] = mapped_column(String(200))
    detail: Mapped[str] = mapped_column(Text)
    detected_at: Mapped[datetime] = mapped_column(UTCDateTime())
