"""What the providers say they served us: their usage and cost exports, imported as downloaded.

``upstream_usage`` holds one row per bucket row of an export (provider, bucket start, model as the
provider names it, project or workspace, API key, service tier, batch): the natural key is unique,
so importing the same period again changes nothing. A row whose figures change on a later import
(the provider's current day still filling in) is replaced, and the figures it had are kept in
``upstream_revisions`` (docs/reports.md, "Upstream reconciliation"); a bucket is replaced whole
when a later import groups it otherwise, never summed with it. ``upstream_gaps`` records the
imports known to be incomplete. ``upstream_costs`` likewise
per (provider, bucket start, project, API key, line item), the amount exact as the export wrote it
(``amount``) and rounded half-even to micro-USD (``amount_micros``). ``call_routes`` records where
the gateway sent a call and under which upstream key label (never a secret), for the calls whose
request metadata named either.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from sqlalchemy import BigInteger, CheckConstraint, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, BigId, DecimalText, UTCDateTime

# The empty string stands for "not grouped by this" in a natural key: NULLs are never equal in a
# unique constraint, so a NULL there would let the same bucket row be imported twice.
USAGE_KEY = (
    "provider", "bucket_start", "model", "project_id", "api_key_id", "service_tier", "batch",
)  # fmt: skip
COST_KEY = ("provider", "bucket_start", "project_id", "api_key_id", "line_item")
USAGE_FIGURES = (
    "requests", "input_tokens", "cached_tokens", "cache_write_tokens", "output_tokens",
    "cache_write_1h_tokens",
)  # fmt: skip


class UpstreamUsage(Base):
    __tablename__ = "upstream_usage"
    __table_args__ = (
        UniqueConstraint(*USAGE_KEY, name="uq_upstream_usage_key"),
        CheckConstraint(
            "input_tokens >= 0 AND cached_tokens >= 0 AND cache_write_tokens >= 0"
            " AND output_tokens >= 0 AND (requests IS NULL OR requests >= 0)",
            name="counts_not_negative",
        ),
        Index(None, "bucket_start"),
        Index(None, "imported_at"),  # the leakage alert's reader: rows imported in a window
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    provider: Mapped[str] = mapped_column(String(64))
    bucket_start: Mapped[datetime] = mapped_column(UTCDateTime())
    bucket_end: Mapped[datetime] = mapped_column(UTCDateTime())
    model: Mapped[str] = mapped_column(String(200))
    project_id: Mapped[str] = mapped_column(String(200))
    api_key_id: Mapped[str] = mapped_column(String(200))
    service_tier: Mapped[str] = mapped_column(String(32))
    batch: Mapped[str] = mapped_column(String(8))  # '', 'true', 'false': as grouped by the export
    # OpenAI's num_model_requests; Anthropic's report counts no requests (NULL).
    requests: Mapped[int | None] = mapped_column(BigInteger)
    input_tokens: Mapped[int] = mapped_column(BigInteger)  # every input token, cached ones included
    cached_tokens: Mapped[int] = mapped_column(BigInteger)  # cache reads, part of input_tokens
    cache_write_tokens: Mapped[int] = mapped_column(BigInteger)  # cache writes, part of input
    output_tokens: Mapped[int] = mapped_column(BigInteger)
    # Anthropic's 1-hour cache writes, part of cache_write_tokens (priced above 5-minute ones).
    cache_write_1h_tokens: Mapped[int] = mapped_column(BigInteger, server_default="0")
    source: Mapped[str] = mapped_column(Text)  # the file it was last imported from
    imported_at: Mapped[datetime] = mapped_column(UTCDateTime())


class UpstreamCost(Base):
    __tablename__ = "upstream_costs"
    __table_args__ = (
        UniqueConstraint(*COST_KEY, name="uq_upstream_costs_key"),
        Index(None, "bucket_start"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    provider: Mapped[str] = mapped_column(String(64))
    bucket_start: Mapped[datetime] = mapped_column(UTCDateTime())
    bucket_end: Mapped[datetime] = mapped_column(UTCDateTime())
    project_id: Mapped[str] = mapped_column(String(200))
    api_key_id: Mapped[str] = mapped_column(String(200))
    line_item: Mapped[str] = mapped_column(String(300))
    model: Mapped[str] = mapped_column(String(200))  # from the line item; '' when it names none
    amount: Mapped[Decimal] = mapped_column(DecimalText())  # USD exactly as exported
    amount_micros: Mapped[int] = mapped_column(BigInteger)  # rounded half-even
    source: Mapped[str] = mapped_column(Text)
    imported_at: Mapped[datetime] = mapped_column(UTCDateTime())


class UpstreamRevision(Base):
    """An imported row's figures before a later import replaced them (JSON of the old figures)."""

    __tablename__ = "upstream_revisions"
    __table_args__ = (
        CheckConstraint("kind IN ('usage', 'cost')", name="kind"),
        Index(None, "row_id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    kind: Mapped[str] = mapped_column(String(8))
    row_id: Mapped[int] = mapped_column(BigInteger)
    before: Mapped[str] = mapped_column(Text)
    after: Mapped[str] = mapped_column(Text)
    source: Mapped[str] = mapped_column(Text)
    revised_at: Mapped[datetime] = mapped_column(UTCDateTime())


class UpstreamGap(Base):
    """An import whose last page said ``has_more`` without its next page: the export of
    ``provider`` (``kind`` usage or cost) is incomplete from ``after`` on, until an import holds a
    bucket starting at or after it (``closed_at``; the report lists the open ones)."""

    __tablename__ = "upstream_gaps"
    __table_args__ = (CheckConstraint("kind IN ('usage', 'cost')", name="kind"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    provider: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(8))
    after: Mapped[datetime] = mapped_column(UTCDateTime())
    source: Mapped[str] = mapped_column(Text)
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime())
    closed_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class CallRoute(Base):
    """Where the gateway sent one call: its provider and upstream key label, as its request said."""

    __tablename__ = "call_routes"

    request_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    provider: Mapped[str | None] = mapped_column(String(64))
    upstream_key: Mapped[str | None] = mapped_column(String(64))
