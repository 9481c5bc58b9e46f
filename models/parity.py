"""Parity pairs: a streamed call and a non-streamed twin (same fingerprint, within the window).

Each reservation is in at most one pair (UNIQUE on both sides), so pairing is idempotent and two
pairing jobs racing insert one pair. ``mismatched`` names the compared fields that differ, comma
separated (``prompt_tokens``, ``completion_tokens``, ``charge_per_token``, ``charge``); the counts and
charges of both sides are copied here so a pair reads on its own.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, CheckConstraint, ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, BigId, UTCDateTime
from worker.core.parity import Verdict as Verdict  # the verdicts live in the core


class ParityPair(Base):
    __tablename__ = "parity_pairs"
    __table_args__ = (
        CheckConstraint("verdict IN ('match', 'mismatch')", name="verdict"),
        CheckConstraint(
            "(verdict = 'match' AND mismatched IS NULL)"
            " OR (verdict = 'mismatch' AND mismatched IS NOT NULL)",
            name="verdict_fields",
        ),
        Index(None, "paired_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(128))
    streamed_reservation_id: Mapped[int] = mapped_column(ForeignKey("reservations.id"), unique=True)
    plain_reservation_id: Mapped[int] = mapped_column(ForeignKey("reservations.id"), unique=True)
    verdict: Mapped[str] = mapped_column(String(16))
    mismatched: Mapped[str | None] = mapped_column(Text)
    # NULL when either side has no output hash (settled before the hash was recorded).
    outputs_identical: Mapped[bool | None]
    streamed_prompt_tokens: Mapped[int]
    plain_prompt_tokens: Mapped[int]
    streamed_completion_tokens: Mapped[int]
    plain_completion_tokens: Mapped[int]
    streamed_charge_micros: Mapped[int] = mapped_column(BigInteger)
    plain_charge_micros: Mapped[int] = mapped_column(BigInteger)
    paired_at: Mapped[datetime] = mapped_column(UTCDateTime())
