"""Alert events (one per unsettled call) and the alert outbox (one row per message to send).

``alert_events`` is written in the transaction that marks a call unsettled; the aggregation job reads
it by window. ``alert_outbox`` is the only thing the webhook sender reads: a row is ``pending`` until a
sender claims it (``sending``, with a lease in ``claimed_until``), then ``delivered`` (or ``logged``
when no webhook is configured). ``dedupe_key`` is unique: the same (kind, account, model, reason,
window start) is never queued twice.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import BigInteger, CheckConstraint, ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, BigId, UTCDateTime


class AlertKind(StrEnum):
    UNSETTLED = "unsettled"
    UNSETTLED_RATE = "unsettled_rate"
    PARITY_MISMATCH = "parity_mismatch"
    DRIFT = "drift"
    ANOMALY = "anomaly"
    LOW_BALANCE = "low_balance"  # a funded account's spendable balance fell below a level
    UPSTREAM_LEAKAGE = "upstream_leakage"
    INVOICE_FINALIZED = "invoice_finalized"  # an invoice or credit note was finalized (an event)


class OutboxStatus(StrEnum):
    PENDING = "pending"
    SENDING = "sending"
    DELIVERED = "delivered"
    LOGGED = "logged"


class AlertEvent(Base):
    __tablename__ = "alert_events"
    __table_args__ = (
        CheckConstraint("exposure_micros IS NULL OR exposure_micros >= 0", name="exposure"),
        Index(None, "detected_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    reservation_id: Mapped[int] = mapped_column(ForeignKey("reservations.id"), unique=True)
    account_id: Mapped[str] = mapped_column(String(200))
    model: Mapped[str] = mapped_column(String(200))
    reason: Mapped[str] = mapped_column(String(32))
    stream: Mapped[bool]
    exposure_micros: Mapped[int | None] = mapped_column(BigInteger)
    detected_at: Mapped[datetime] = mapped_column(UTCDateTime())


class OutboxAlert(Base):
    __tablename__ = "alert_outbox"
    __table_args__ = (
        CheckConstraint(
            "kind IN ('unsettled', 'unsettled_rate', 'parity_mismatch', 'drift', 'anomaly',"
            " 'low_balance',"
            " 'upstream_leakage', 'invoice_finalized')",
            name="kind",
        ),
        CheckConstraint("status IN ('pending', 'sending', 'delivered', 'logged')", name="status"),
        CheckConstraint("attempts >= 0", name="attempts"),
        Index(None, "status", "next_attempt_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    dedupe_key: Mapped[str] = mapped_column(String(64), unique=True)
    kind: Mapped[str] = mapped_column(String(32))
    account_id: Mapped[str | None] = mapped_column(String(200))
    model: Mapped[str | None] = mapped_column(String(200))
    reason: Mapped[str | None] = mapped_column(String(64))
    window_start: Mapped[datetime] = mapped_column(UTCDateTime())
    window_end: Mapped[datetime] = mapped_column(UTCDateTime())
    text: Mapped[str] = mapped_column(Text)
    payload: Mapped[str] = mapped_column(Text)  # the JSON body sent to the webhook
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int]
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime())
    claimed_until: Mapped[datetime | None] = mapped_column(UTCDateTime())
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
