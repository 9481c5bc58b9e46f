"""Reservations: one per gateway request, the hold the gateway placed before the call ran."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import BigInteger, CheckConstraint, ForeignKey, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, BigId, UTCDateTime


class Status(StrEnum):
    """``held`` → ``settled`` | ``voided`` | ``unsettled``; ``unsettled`` → ``released`` |
    ``settled_from_estimate`` | ``settled`` (a late result within grace)."""

    HELD = "held"
    SETTLED = "settled"
    VOIDED = "voided"
    UNSETTLED = "unsettled"
    RELEASED = "released"
    SETTLED_FROM_ESTIMATE = "settled_from_estimate"


OPEN_STATUSES = (Status.HELD, Status.UNSETTLED)


class Reservation(Base):
    __tablename__ = "reservations"
    __table_args__ = (
        CheckConstraint("reserved_micros >= 0", name="reserved_not_negative"),
        CheckConstraint(
            "status IN ('held', 'settled', 'voided', 'unsettled', 'released',"
            " 'settled_from_estimate')",
            name="status",
        ),
        Index(None, "account_id"),
        Index(None, "fingerprint"),
        # The report's window (migration 0005). Written once at the hold, never updated.
        Index(None, "created_at"),
        # ``billing show`` by the client's own reference (migration 0024).
        Index(None, "client_request_id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    request_id: Mapped[str] = mapped_column(String(200), unique=True)
    account_id: Mapped[str] = mapped_column(ForeignKey("accounts.id"))
    model: Mapped[str] = mapped_column(String(200))
    stream: Mapped[bool]
    reserved_micros: Mapped[int] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    # A salted hash of the request (for duplicate detection by later issues); never the prompt.
    fingerprint: Mapped[str | None] = mapped_column(String(128))
    # Which request entry the hold was recorded from (``worker.core.request.request_digest``): a later
    # notification whose entry differs is another call under a reused request id. NULL on rows
    # older than migration 0006 and on holds recorded without a stream entry.
    request_digest: Mapped[str | None] = mapped_column(String(64))
    # The client's own reference for the call (its ``X-Request-Id``), never its identity: two
    # calls may carry the same one. NULL when the client sent none, and on older rows.
    client_request_id: Mapped[str | None] = mapped_column(String(200))
    # The endpoint the call was made to (``worker.core.readers.ENDPOINTS``), NULL for chat
    # completions and on rows older than migration 0025.
    endpoint: Mapped[str | None] = mapped_column(String(32))
