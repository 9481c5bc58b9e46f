"""Usage records: what a settled call consumed and what it was charged. Counts only, never text."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, CheckConstraint, ForeignKey, Index, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, BigId, UTCDateTime


class UsageRecord(Base):
    __tablename__ = "usage_records"
    __table_args__ = (
        CheckConstraint("usage_source IN ('reported', 'estimated')", name="usage_source"),
        CheckConstraint("charge_micros >= 0", name="charge_not_negative"),
        Index(None, "created_at"),  # windows: drift medians, unsettled rate, reports
        Index(None, "requested_at"),  # the report's window on the call's creation
        Index(None, "completion_id"),  # ``billing show`` finds a call by its completion id
        # The report counts settled calls at the estimate: a few rows, found without a scan.
        Index(
            "ix_usage_records_estimated",
            "reservation_id",
            postgresql_where=text("usage_source = 'estimated'"),
            sqlite_where=text("usage_source = 'estimated'"),
        ),
        # Drift percentiles per model: read from this index alone, already in (model, drift) order.
        Index(
            "ix_usage_records_drift",
            "model",
            "drift_ppm",
            postgresql_include=["requested_at"],
            postgresql_where=text("drift_ppm IS NOT NULL"),
            sqlite_where=text("drift_ppm IS NOT NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    reservation_id: Mapped[int] = mapped_column(ForeignKey("reservations.id"), unique=True)
    prompt_tokens: Mapped[int]
    cached_tokens: Mapped[int]
    completion_tokens: Mapped[int]
    reasoning_tokens: Mapped[int]
    usage_source: Mapped[str] = mapped_column(String(16))
    finish_reasons: Mapped[str | None] = mapped_column(Text)
    charge_micros: Mapped[int] = mapped_column(BigInteger)
    estimate_prompt_tokens: Mapped[int]
    estimate_completion_tokens: Mapped[int]
    estimate_approximate: Mapped[bool]
    system_fingerprint: Mapped[str | None] = mapped_column(String(200))
    completion_id: Mapped[str | None] = mapped_column(String(200))
    anomalies: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    # Salted hash of the assembled output (content, refusal, reasoning, tool calls), never the text:
    # parity compares completion tokens only between twins whose outputs are identical.
    output_hash: Mapped[str | None] = mapped_column(String(64))
    # Streamed calls with reported usage: (reported visible - estimated) completion tokens, parts per
    # million of the estimate (visible = completion - reasoning); NULL otherwise or when the estimate
    # is 0. The one drift: the alerts' medians and the report's percentiles both read it.
    drift_ppm: Mapped[int | None] = mapped_column(BigInteger)
    # The call's model and creation time, copied from the request at settle time (the reservation
    # holds the same values): the report's drift reads usage records alone, one scan of one table.
    # Backfilled by migration 0003; NULL only for a row written by a worker older than 0003.
    model: Mapped[str | None] = mapped_column(String(200))
    requested_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # The canonical parts of the billed counts (``worker.core.result.Usage``): cache writes and audio in are
    # parts of prompt_tokens, audio out of completion_tokens. 0 on rows written before 0008.
    cache_write_tokens: Mapped[int] = mapped_column(server_default=text("0"))
    audio_prompt_tokens: Mapped[int] = mapped_column(server_default=text("0"))
    audio_completion_tokens: Mapped[int] = mapped_column(server_default=text("0"))
    # Revision 0018: 1-hour cache writes (a part of cache_write_tokens), image tokens (a part of
    # prompt_tokens), web search requests and their context size, and the rates the call was charged
    # at as JSON text (``Price.unit_prices``; NULL before 0018 and for calls not charged).
    cache_write_1h_tokens: Mapped[int] = mapped_column(server_default=text("0"))
    image_prompt_tokens: Mapped[int] = mapped_column(server_default=text("0"))
    web_search_requests: Mapped[int] = mapped_column(server_default=text("0"))
    search_context_size: Mapped[str | None] = mapped_column(String(16))
    unit_prices: Mapped[str | None] = mapped_column(Text)
    # Revision 0025: citation tokens (a part of prompt_tokens) and the inference geography the
    # usage named (its row's multiplier applies; NULL: none named).
    citation_tokens: Mapped[int] = mapped_column(server_default=text("0"))
    inference_geo: Mapped[str | None] = mapped_column(String(16))
    # Revision 0031: image output tokens (a part of completion_tokens), images billed per image
    # and their size and quality (which pick the row's per-image price; NULL: none stated).
    image_completion_tokens: Mapped[int] = mapped_column(server_default=text("0"))
    images: Mapped[int] = mapped_column(server_default=text("0"))
    image_size: Mapped[str | None] = mapped_column(String(16))
    image_quality: Mapped[str | None] = mapped_column(String(16))
    # Where the gateway routed the call, the usage shape it reported in (``worker.core.usage.Shape``;
    # NULL when billed at the estimate), the service tier the response reported, and the provider's
    # own charge for the call when it sent one: the report's per-provider cost cross-check.
    provider: Mapped[str | None] = mapped_column(String(64))
    usage_shape: Mapped[str | None] = mapped_column(String(32))
    service_tier: Mapped[str | None] = mapped_column(String(32))
    provider_cost_micros: Mapped[int | None] = mapped_column(BigInteger)
    # Revision 0021: an estimated call charged at calibrated counts (``worker.core.calibration``):
    # the factors (ppm) and their version; prompt_tokens / completion_tokens are then the raw
    # estimate (estimate_*_tokens) times its factor, rounded half up. NULL: billed at face value.
    calibration_version: Mapped[int | None]
    prompt_factor_ppm: Mapped[int | None] = mapped_column(BigInteger)
    completion_factor_ppm: Mapped[int | None] = mapped_column(BigInteger)
    # Revision 0027: the call's content segment (``worker.core.segments``): calibration learns a
    # factor per segment from reported calls, and an estimated call is charged at its segment's.
    estimate_segment: Mapped[str | None] = mapped_column(String(16))
