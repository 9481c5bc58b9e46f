"""The effective-dated price book, kept as history: a (pattern, effective_from) row never changes."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from sqlalchemy import String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, BigId, DecimalText, UTCDateTime


class PriceRow(Base):
    """USD per 1M tokens as exact decimal text."""

    __tablename__ = "prices"
    __table_args__ = (UniqueConstraint("pattern", "effective_from"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    pattern: Mapped[str] = mapped_column(String(200))
    effective_from: Mapped[datetime] = mapped_column(UTCDateTime())
    input: Mapped[Decimal] = mapped_column(DecimalText())
    cached_input: Mapped[Decimal] = mapped_column(DecimalText())
    output: Mapped[Decimal] = mapped_column(DecimalText())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
