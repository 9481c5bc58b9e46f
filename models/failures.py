"""Unsettled failures: holds the worker could not settle, kept open until resolved exactly once."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import BigInteger, CheckConstraint, ForeignKey, Index, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, BigId, UTCDateTime


class Action(StrEnum):
    RELEASE = "release"
    CHARGE_ESTIMATE = "charge_estimate"
    SETTLED_LATE = "settled_late"


RESOLUTION_COLUMNS = ("resolved_by", "resolved_at", "action", "note")


class Failure(Base):
    __tablename__ = "failures"
    __table_args__ = (
        CheckConstraint(
            "reason IN ('error_finish', 'incomplete', 'missing_usage', 'unpriced',"
            " 'inconsistent_usage', 'implausible_usage', 'unreadable', 'unpriced_component')",
            name="reason",
        ),
        CheckConstraint(
            "action IS NULL OR action IN ('release', 'charge_estimate', 'settled_late')",
            name="action",
        ),
        CheckConstraint(
            "(resolved_by IS NULL AND resolved_at IS NULL AND action IS NULL AND note IS NULL)"
            " OR (resolved_by IS NOT NULL AND resolved_at IS NOT NULL AND action IS NOT NULL"
            " AND note IS NOT NULL)",
            name="resolution_all_or_none",
        ),
        CheckConstraint("exposure_micros IS NULL OR exposure_micros >= 0", name="exposure"),
        Index(None, "detected_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    reservation_id: Mapped[int] = mapped_column(ForeignKey("reservations.id"), unique=True)
    reason: Mapped[str] = mapped_column(String(32))
    estimate_prompt_tokens: Mapped[int]
    estimate_completion_tokens: Mapped[int]
    exposure_micros: Mapped[int | None] = mapped_column(BigInteger)
    finish_reasons: Mapped[str | None] = mapped_column(Text)
    # The exposure is the price of usage the provider reported before the call broke (an
    # ``error_finish`` with a billable usage block), not an estimate: ``charge_delivered`` charges
    # it at the grace's end.
    exposure_reported: Mapped[bool] = mapped_column(default=False, server_default=text("false"))
    detected_at: Mapped[datetime] = mapped_column(UTCDateTime())
    resolved_by: Mapped[str | None] = mapped_column(String(200))
    resolved_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    action: Mapped[str | None] = mapped_column(String(32))
    note: Mapped[str | None] = mapped_column(Text)
