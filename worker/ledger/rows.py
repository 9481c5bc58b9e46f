"""The rows the ledger writes besides its transactions, as pure functions of a request or a result:
a reservation, a settled call's usage record, an unsettled call's failure. Both write paths
(``batch`` and ``operations``) insert exactly these.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from models import Status
from worker.core.errors import LedgerError
from worker.core.money import Micros
from worker.core.request import RequestMeta
from worker.core.result import Reason, Result, UsageSource


def micros(value: Any) -> Micros:
    """Money in, as Micros; floats (and anything not integral) are refused by ``Micros`` itself."""
    return value if isinstance(value, Micros) else Micros(value)


def aware(now: datetime) -> datetime:
    if now.tzinfo is None:
        raise LedgerError(f"naive timestamp {now!r}: pass an aware UTC datetime")
    return now


def reservation_values(meta: RequestMeta, now: datetime) -> dict[str, Any]:
    """The reservation row of a request ."""
    return {
        "request_id": meta.request_id,
        "account_id": meta.account_id,
        "model": meta.model,
        "stream": meta.stream,
        "reserved_micros": int(meta.reserved_micros),
        "status": str(Status.HELD),
        "created_at": aware(meta.created_at),
        "updated_at": now,
        "request_digest": meta.digest,
        "client_request_id": meta.client_request_id,
        "endpoint": None if meta.endpoint == "chat_completions" else meta.endpoint,
    }


def usage_values(reservation_id: int, result: Result, now: datetime) -> dict[str, Any]:
    """The usage record of a settled, priced result; an estimated one records the calibration
    factors its counts were computed with (none for reported usage: nothing was calibrated)."""
    billed = result.billed_usage
    if billed is None or result.charge_micros is None:
        raise LedgerError(f"{result.request_id}: settled result without billed usage or charge")
    factors = result.calibration if result.usage_source is UsageSource.ESTIMATED else None
    return {
        "reservation_id": reservation_id,
        "prompt_tokens": billed.prompt_tokens,
        "cached_tokens": billed.cached_tokens,
        "completion_tokens": billed.completion_tokens,
        "reasoning_tokens": billed.reasoning_tokens,
        "usage_source": str(result.usage_source),
        "finish_reasons": joined(result.finish_reasons),
        "charge_micros": int(result.charge_micros),
        "estimate_prompt_tokens": result.estimate.prompt_tokens,
        "estimate_completion_tokens": result.estimate.completion_tokens,
        "estimate_approximate": result.estimate.approximate,
        "system_fingerprint": result.system_fingerprint,
        "completion_id": result.completion_id,
        "anomalies": joined(result.anomalies),
        "created_at": now,
        # The request's model and creation time, as its reservation holds them (both come from the
        # same request metadata): the report reads usage records without joining reservations.
        "model": result.model,
        "requested_at": result.created_at,
        "cache_write_tokens": billed.cache_write_tokens,
        "audio_prompt_tokens": billed.audio_prompt_tokens,
        "audio_completion_tokens": billed.audio_completion_tokens,
        "cache_write_1h_tokens": billed.cache_write_1h_tokens,
        "image_prompt_tokens": billed.image_prompt_tokens,
        "web_search_requests": billed.web_search_requests,
        "search_context_size": billed.search_context_size,
        "citation_tokens": billed.citation_tokens,
        "inference_geo": billed.inference_geo,
        "image_completion_tokens": billed.image_completion_tokens,
        "images": billed.images,
        "image_size": billed.image_size,
        "image_quality": billed.image_quality,
        "unit_prices": result.unit_prices,
        "provider": result.provider,
        "usage_shape": result.usage_shape,
        "service_tier": result.service_tier,
        "provider_cost_micros": (
            None if result.provider_cost_micros is None else int(result.provider_cost_micros)
        ),
        "calibration_version": None if factors is None else factors.version,
        "prompt_factor_ppm": None
        if factors is None
        else factors.for_segment(result.estimate.segment)[0],
        "completion_factor_ppm": None
        if factors is None
        else factors.for_segment(result.estimate.segment)[1],
        "estimate_segment": result.estimate.segment,
    }


def failure_values(
    reservation_id: int, result: Result, reason: Reason, now: datetime
) -> dict[str, Any]:
    """The failure row of an unsettled result : its
    exposure is the estimate's price, none when the model is unpriced."""
    exposure = None if reason is Reason.UNPRICED else result.exposure_micros
    return {
        "reservation_id": reservation_id,
        "reason": str(reason),
        "estimate_prompt_tokens": result.estimate.prompt_tokens,
        "estimate_completion_tokens": result.estimate.completion_tokens,
        "exposure_micros": None if exposure is None else int(micros(exposure)),
        "finish_reasons": joined(result.finish_reasons),
        "exposure_reported": "usage_before_error" in result.anomalies,
        "detected_at": now,
    }


def joined(values: Sequence[str | None]) -> str | None:
    return ",".join("" if v is None else str(v) for v in values) if values else None
