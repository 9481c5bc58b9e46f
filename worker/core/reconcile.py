"""The reconciler: request metadata + what the gateway sent → a ``Result``. Pure; no IO.

``reconcile_stream`` takes the body of a streamed call as the gateway recorded it (one or more records,
each holding one or more SSE events); ``reconcile_response`` takes a non-streamed response. Both run
through the same assembly, estimate and price steps, so the two paths bill the same by construction.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import orjson

from worker.core.assembly import Assembled
from worker.core.calibration import EMPTY, CalibrationTable
from worker.core.errors import BillingError, InputError
from worker.core.estimate import estimate
from worker.core.images import with_image_options
from worker.core.money import Micros
from worker.core.outcome import (
    IMPLAUSIBLE_USAGE,
    MISSING_USAGE,
    UNPRICED_COMPONENT,
    Decision,
    decide_response,
    decide_stream,
    finishes,
)
from worker.core.prices import PriceBook, normalize_tier
from worker.core.readers import read_body, read_stream
from worker.core.request import RequestMeta, cut_to_column
from worker.core.result import Choice, Estimate, Outcome, Reason, Result, Usage, UsageSource
from worker.core.searches import with_searches
from worker.core.sse import lenient_loads
from worker.core.substitution import billed_model
from worker.core.usage import (
    Reading,
    Verdict,
    against_output,
    bound_for,
    cost_drifted,
    describe_unpriced,
    read_usage,
    usage_tier,
)

# No single call is charged more than this (one million USD): a larger charge comes from counts no
# call can have, and would only push money columns toward their limits.
MAX_CALL_MICROS = 10**12


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
    if assembled.frames_after_done:
        found.append("frames_after_done")
    done = finishes(assembled)
    if done.complete and done.count < meta.n:
        found.append("n_ignored")
    return found


def _error_text(error: dict[str, Any] | None) -> str | None:
    if error is None:
        return None
    message = error.get("message") if isinstance(error, dict) else None
    code = error.get("code") or error.get("type") if isinstance(error, dict) else None
    text = f"{code}: {message}" if code and message else str(message or code or "error")
    return text[:200]


def whole_prompt(meta: RequestMeta, guess: Estimate) -> tuple[Estimate, bool]:
    """The estimate with its prompt covering the whole request as sent, and whether it could not.

    A gateway that published the prompt cut to its budget counts the whole one with this very
    estimate and says so (``prompt_estimate``): that count is the prompt's. An entry whose
    messages were left out (``omitted_messages``) with no such count cannot be estimated: the
    estimate counts what came (the completion), and the second value is True, which the
    reconciler never lets pass silently (``build_result``)."""
    if meta.prompt_estimate is not None:
        return replace(guess, prompt_tokens=meta.prompt_estimate), False
    return guess, meta.omitted_messages


def produced_output(choices: Iterable[Choice]) -> bool:
    """Whether any choice holds something a model had to generate: text, a refusal, reasoning, a
    tool call or a legacy function call (an empty string is nothing)."""
    for choice in choices:
        if choice.content or choice.refusal or choice.reasoning_content:
            return True
        if choice.tool_calls or choice.function_call is not None:
            return True
    return False


def billed_meta(
    meta: RequestMeta, assembled: Assembled, prices: PriceBook
) -> tuple[RequestMeta, bool]:
    """The call's metadata naming the model that prices it, and whether the upstream substituted
    it for the one requested (``worker.core.substitution``): ``meta`` itself when the requested model
    prices the call, else a copy naming the model the response names."""
    billed = billed_model(
        meta.model,
        assembled.model,
        prices,
        meta.created_at,
        tier=assembled.service_tier,
        provider=meta.provider,
    )
    if billed.model == meta.model:
        return meta, billed.substituted
    return replace(meta, model=billed.model), billed.substituted


def read_reported(meta: RequestMeta, assembled: Assembled, prices: PriceBook) -> Reading:
    """The call's usage blocks read by the rules of its provider and model, bounded by what the
    model can hold (its context window, when the price book knows it, times the choices), and
    checked against the output that came (``worker.core.usage.against_output``)."""
    window = None
    context_window = getattr(prices, "context_window", None)
    if context_window is not None:
        window = context_window(meta.model, meta.created_at)
    choices = max(meta.n, len(assembled.choices), 1)
    reading = read_usage(
        assembled.usage_raw,
        assembled.groq_usage,
        provider=meta.provider,
        model=meta.model,
        bound=bound_for(window, choices),
        same_tier=lambda tier: (
            assembled.service_tier is None
            or normalize_tier(tier) == normalize_tier(assembled.service_tier)
        ),
    )
    if reading.usage is not None:  # a search the usage does not count (``worker.core.searches``)
        searched = with_searches(
            reading.usage,
            stated=reading.searches_stated,
            requested_size=meta.web_search,
            model=meta.model,
        )
        searched = with_image_options(
            searched, size=meta.image_size, quality=meta.image_quality, model=meta.model
        )
        reading = replace(reading, usage=searched)
    return against_output(reading, produced_output(assembled.choices))


def build_result(
    meta: RequestMeta,
    assembled: Assembled,
    decision: Decision,
    prices: PriceBook,
    reading: Reading | None = None,
    *,
    substituted: bool = False,
) -> Result:
    """Attach the estimate, the charge and the exposure to a decided assembly.

    ``meta`` names the model that prices the call (``billed_meta``): the served model when the
    upstream answered with another one than requested, which is then ``Result.model`` too;
    ``substituted`` adds the anomaly ``model_substituted``.

    The charge is the reported usage's price (or the estimate's), at the response's service tier
    and for the call's provider; the exposure is the estimate's price, or for
    ``inconsistent_usage`` the price of the larger reading, or for ``unpriced_component`` the
    price of the parts that were read (a lower bound: the unpriced fields are left out; the
    estimate's price when those parts have no price either), or for an ``error_finish`` whose
    provider reported billable usage that usage's price (marked ``usage_before_error`` in
    ``Result.anomalies``, which the failure row keeps as ``exposure_reported``: the provider bills
    it, so the grace's ``charge_delivered`` charges it). The estimate's prompt
    covers the whole request as sent (``whole_prompt``); when it cannot (the prompt left out,
    uncounted) the anomaly ``prompt_uncounted`` says so, and a call that would have been settled
    at the estimate is unsettled ``missing_usage`` instead. A reported usage whose row prices the
    model but not a component it has (a kind of token or a fee: ``PriceBook.unpriced_components``)
    is unsettled ``unpriced_component`` too, exposed at the rest. A charge records the rates it was
    computed at (``Result.unit_prices``, ``PriceBook.quote``). An exposure is capped at
    ``MAX_CALL_MICROS`` so that no failure row can hold an amount no call can cost.

    A settled call without usage is charged at its estimate calibrated by the factors the book
    carries for its provider and model (``PriceBook.calibration``, ``worker.core.calibration``: its
    content segment's factors), recorded on the result (``Result.calibration``, only then) so that
    the charge can be recomputed; the exposure is the calibrated estimate's price too.
    """
    if reading is None:
        reading = read_reported(meta, assembled, prices)
    guess, uncounted = whole_prompt(
        meta, estimate(meta.model, meta.messages, meta.tools, assembled.choices)
    )
    table: CalibrationTable = getattr(prices, "calibration", EMPTY)
    factors = table.lookup(meta.provider, meta.model)
    anomalies = _anomalies(meta, assembled)
    if uncounted:
        anomalies.append("prompt_uncounted")
        if decision.outcome is Outcome.SETTLED and decision.usage_source is UsageSource.ESTIMATED:
            # no usage and no estimate of the prompt: the call cannot be charged from what came
            decision = MISSING_USAGE
    if substituted:
        anomalies.append("model_substituted")
    tier = assembled.service_tier

    def price(usage: Usage) -> Micros | None:
        return prices.charge(meta.model, usage, meta.created_at, tier=tier, provider=meta.provider)

    problem = reading.problem
    # An estimated call is charged, and an unsettled one exposed, at the calibrated estimate (its
    # segment's factors, ``worker.core.calibration``); the failure row keeps the raw counts.
    estimated = guess.as_usage() if factors is None else factors.usage(guess)
    # An estimate counts no search: the ones the call was billed for are added as for a reported
    # usage that states none (a request fee, a search model, ``web_search_options``).
    estimated = with_searches(
        estimated, stated=False, requested_size=meta.web_search, model=meta.model
    )
    exposure = price(estimated)
    if exposure is None:
        anomalies.append("unpriced")
    elif decision.reason is Reason.INCONSISTENT_USAGE and reading.larger is not None:
        exposure = price(reading.larger)
    elif decision.reason is Reason.UNPRICED_COMPONENT and reading.usage is not None:
        known = price(reading.usage)
        exposure = exposure if known is None else known
    elif (
        decision.reason is Reason.ERROR_FINISH
        and reading.verdict is Verdict.BILLABLE
        and reading.usage is not None
    ):
        # The provider reported (and bills) the usage of a call that then broke: that usage is
        # the exposure, which ``charge_delivered`` charges at the grace's end (never 0).
        reported_price = price(reading.usage)
        if reported_price is not None:
            exposure = reported_price
            anomalies.append("usage_before_error")
    charge: Micros | None = None
    billed: Usage | None = None
    if decision.outcome is Outcome.SETTLED:
        reported = decision.usage_source is UsageSource.REPORTED
        billed = reading.usage if reported else estimated
        if billed is None:
            raise BillingError(f"{meta.request_id}: settled as reported without billable usage")
        charge = price(billed)
        missing, known = (
            prices.unpriced_components(
                meta.model, billed, meta.created_at, tier=tier, provider=meta.provider
            )
            if charge is None and reported
            else ((), None)
        )
        if missing:  # the row prices the call's model, not a component it has: never without it
            problem = describe_unpriced(missing)
            decision, exposure = UNPRICED_COMPONENT, known if known is not None else exposure
        elif charge is not None and charge > MAX_CALL_MICROS:
            problem = f"a charge of {int(charge)} micros is beyond any call"
            decision, charge = IMPLAUSIBLE_USAGE, None
        elif (
            charge is not None
            and reported
            and reading.provider_cost_micros is not None
            and cost_drifted(charge, reading.provider_cost_micros)
        ):
            anomalies.append("provider_cost_drift")
    if exposure is not None and exposure > MAX_CALL_MICROS:
        exposure = Micros(MAX_CALL_MICROS)
    quote = getattr(prices, "quote", None)
    unit_prices = None
    if charge is not None and billed is not None and quote is not None:
        rates = quote(meta.model, billed, meta.created_at, tier=tier, provider=meta.provider)
        unit_prices = None if rates is None else orjson.dumps(rates).decode()
    block = assembled.usage_raw if assembled.usage_raw is not None else assembled.groq_usage
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
        usage=reading.usage,
        usage_raw=block,
        estimate=guess,
        charge_micros=charge,
        exposure_micros=exposure,
        choices=tuple(assembled.choices),
        completion_id=None
        if assembled.completion_id is None
        else cut_to_column(assembled.completion_id),
        system_fingerprint=assembled.system_fingerprint,
        anomalies=tuple(anomalies),
        error=_error_text(assembled.error),
        mixed_id_count=assembled.mixed_id_count,
        provider=meta.provider,
        service_tier=tier,
        usage_shape=None if reading.shape is None else str(reading.shape),
        usage_problem=problem if decision.outcome is Outcome.UNSETTLED else None,
        provider_cost_micros=reading.provider_cost_micros,
        frames_after_done=assembled.frames_after_done,
        usage_after_done=assembled.usage_after_done,
        n_requested=meta.n,
        unit_prices=unit_prices,
        calibration=(
            factors
            if decision.outcome is Outcome.SETTLED
            and decision.usage_source is UsageSource.ESTIMATED
            else None
        ),
    )


def reconcile_stream(
    meta: RequestMeta, records: Iterable[bytes | str] | bytes | str, prices: PriceBook
) -> Result:
    """Reconcile a streamed call from its recorded SSE body (never raises on the body's content)."""
    assembled = read_stream(meta.endpoint, records)
    if assembled.service_tier is None:  # the tier the usage names prices the call when alone
        assembled.service_tier = usage_tier(assembled.usage_raw)
    meta, substituted = billed_meta(meta, assembled, prices)
    reading = read_reported(meta, assembled, prices)
    decision = decide_stream(assembled, include_usage=meta.include_usage, reading=reading)
    return build_result(meta, assembled, decision, prices, reading, substituted=substituted)


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
            try:  # what a Python client reads: a BOM, UTF-16, a lone surrogate escape
                data = lenient_loads(body)
            except ValueError:
                data = None
                if status < 400:
                    raise InputError(f"response body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        if status < 400:
            raise InputError("response body is not a JSON object")
        data = {}
    assembled = read_body(meta.endpoint, data)
    if assembled.service_tier is None:  # the tier the usage names prices the call when alone
        assembled.service_tier = usage_tier(assembled.usage_raw)
    meta, substituted = billed_meta(meta, assembled, prices)
    reading = read_reported(meta, assembled, prices)
    decision = decide_response(assembled, status=status, reading=reading)
    return build_result(meta, assembled, decision, prices, reading, substituted=substituted)
