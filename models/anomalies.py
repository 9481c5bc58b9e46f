"""Contract anomalies: what a call did that the gateway's contract says it must not. Never blocking.

One row per (reservation, kind): a redelivered notification or a second detector finds the row there.
``detail`` is a short human sentence (counts, ids); never prompt or completion text.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import CheckConstraint, ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, BigId, UTCDateTime
from worker.core.anomalies import AnomalyKind

ANOMALY_KINDS = tuple(str(kind) for kind in AnomalyKind)


class Anomaly(Base):
    __tablename__ = "anomalies"
    __table_args__ = (
        UniqueConstraint("reservation_id", "kind"),
        CheckConstraint(
            "kind IN (" + ", ".join(f"'{kind}'" for kind in ANOMALY_KINDS) + ")", name="kind"
        ),
        Index(None, "detected_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    reservation_id: Mapped[int] = mapped_column(ForeignKey("reservations.id"))
    kind: Mapped[str] = mapped_column(String(32))
    detail: Mapped[str | None] = mapped_column(Text)
    detected_at: Mapped[datetime] = mapped_column(UTCDateTime())
