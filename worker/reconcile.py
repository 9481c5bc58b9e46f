"""The reconciler: request metadata + what the gateway sent → a ``Result``. Pure; no IO.

``reconcile_stream`` takes the body of a streamed call as the gateway recorded it (one or more records,
each holding one or more SSE events); ``reconcile_response`` takes a non-streamed response. Both run
through the same assembly, estimate and price steps, so the two paths bill the same by construction.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from worker.assembly import Assembled, assemble_response, assemble_stream
from worker.errors import InputError
from worker.estimate import estimate
from worker.money import Micros
from worker.outcome import Decision, decide_response, decide_stream
from worker.prices import PriceBook
from worker.request import RequestMeta
from worker.result import Outcome, Result, UsageSource, usage_from_block


def _anomalies(meta: RequestMeta, assembled: Assembled) -> list[str]:
    found = []
    if assembled.mixed_id_count:
        found.append("mixed_ids")
    if assembled.foreign_objects:
        found.append("foreign_chunks")
    if assembled.frame_errors:
        found.append("bad_frames")
    if meta.stream and meta.idempotency_key:
        found.append("idempotency_key_on_stream")
    return found


def _error_text(error: dict[str, Any] | None) -> str | None:
    if error is None:
        return None
    message = error.get("message") if isinstance(error, dict) else None
    code = error.get("code") or error.get("type") if isinstance(error, dict) else None
    text = f"{code}: {message}" if code and message else str(message or code or "error")
    return text[:200]


def build_result(
    meta: RequestMeta, assembled: Assembled, decision: Decision, prices: PriceBook
) -> Result:
    """Attach the estimate, the charge and the exposure to a decided assembly."""
    guess = estimate(meta.model, meta.messages, meta.tools, assembled.choices)
    reported = usage_from_block(assembled.usage_raw)
    anomalies = _anomalies(meta, assembled)
    exposure = prices.charge(meta.model, guess.as_usage(), meta.created_at)
    if exposure is None:
        anomalies.append("unpriced")
    charge: Micros | None = None
    if decision.outcome is Outcome.SETTLED:
        billed = reported if decision.usage_source is UsageSource.REPORTED else guess.as_usage()
        assert billed is not None
        charge = prices.charge(meta.model, billed, meta.created_at)
    return Result(
        request_id=meta.request_id,
        account_id=meta.account_id,
        model=meta.model,
        stream=meta.stream,
        created_at=meta.created_at,
        reserved_micros=meta.reserved_micros,
        outcome=decision.outcome,
        reason=decision.reason,
        usage_source=decision.usage_source,
        usage=reported,
        usage_raw=assembled.usage_raw if reported is not None else None,
        estimate=guess,
        charge_micros=charge,
        exposure_micros=exposure,
        choices=tuple(assembled.choices),
        completion_id=assembled.completion_id,
        system_fingerprint=assembled.system_fingerprint,
        anomalies=tuple(anomalies),
        error=_error_text(assembled.error),
        mixed_id_count=assembled.mixed_id_count,
    )


def reconcile_stream(
    meta: RequestMeta, records: Iterable[bytes | str] | bytes | str, prices: PriceBook
) -> Result:
    """Reconcile a streamed call from its recorded SSE body (never raises on the body's content)."""
    assembled = assemble_stream(records)
    decision = decide_stream(assembled, n=meta.n, include_usage=meta.include_usage)
    return build_result(meta, assembled, decision, prices)


def reconcile_response(
    meta: RequestMeta, status: int, body: bytes | str | dict[str, Any], prices: PriceBook
) -> Result:
    """Reconcile a non-streamed call from its HTTP status and JSON body.

    An error status may come with any body (an HTML page from a proxy, nothing at all): the call is
    void unless the body reports usage. A success status with a body that is not a JSON object is
    bad input and raises ``InputError``.
    """
    data: Any = body
    if not isinstance(body, dict):
        try:
            data = orjson.loads(body) if body else None
        except orjson.JSONDecodeError as exc:
            data = None
            if status < 400:
                raise InputError(f"response body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        if status < 400:
            raise InputError("response body is not a JSON object")
        data = {}
    assembled = assemble_response(data)
    decision = decide_response(assembled, status=status)
    return build_result(meta, assembled, decision, prices)
