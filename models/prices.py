"""The effective-dated price book, kept as history: a row, once written, never changes.

A row's key is (layer, model, provider, tier, effective_from); ``provider`` is '' for a row that
prices every provider. Prices are USD per 1M tokens as exact decimal text; a NULL kind is one the row
does not price (``worker.core.prices.price``). ``aliases`` holds the row's other exact names, one a line.
``bands`` the row's long-context bands as JSON text (``worker.core.prices.price.bands_to_json``: rates
as decimal strings), '' for none.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from sqlalchemy import BigInteger, Boolean, String, Text, UniqueConstraint, false
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, BigId, DecimalText, UTCDateTime


class PriceRow(Base):
    __tablename__ = "prices"
    __table_args__ = (UniqueConstraint("layer", "model", "provider", "tier", "effective_from"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    layer: Mapped[str] = mapped_column(String(16), server_default="override")
    model: Mapped[str] = mapped_column(String(200))
    provider: Mapped[str] = mapped_column(String(100), server_default="")
    tier: Mapped[str] = mapped_column(String(32), server_default="default")
    effective_from: Mapped[datetime] = mapped_column(UTCDateTime())
    until: Mapped[datetime | None] = mapped_column(UTCDateTime())
    input: Mapped[Decimal] = mapped_column(DecimalText())
    cached_input: Mapped[Decimal] = mapped_column(DecimalText())
    cache_write: Mapped[Decimal | None] = mapped_column(DecimalText())
    output: Mapped[Decimal] = mapped_column(DecimalText())
    reasoning: Mapped[Decimal | None] = mapped_column(DecimalText())
    audio_input: Mapped[Decimal | None] = mapped_column(DecimalText())
    audio_output: Mapped[Decimal | None] = mapped_column(DecimalText())
    aliases: Mapped[str] = mapped_column(Text, server_default="")
    snapshots: Mapped[bool] = mapped_column(Boolean, server_default=false())
    max_input_tokens: Mapped[int | None] = mapped_column(BigInteger)
    max_output_tokens: Mapped[int | None] = mapped_column(BigInteger)
    prompt_limit: Mapped[int | None] = mapped_column(BigInteger)
    bands: Mapped[str] = mapped_column(Text, server_default="")
    # 1-hour cache writes, image input, web search fees, off-peak rates, unapplied source keys, as
    # JSON text ('' for none): ``worker.core.prices.price.dimensions_to_json``.
    dimensions: Mapped[str] = mapped_column(Text, server_default="")
    source: Mapped[str] = mapped_column(Text, server_default="")
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
