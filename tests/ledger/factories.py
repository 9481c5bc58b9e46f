"""Hand-built requests and results for ledger tests (the real ones come from the reconciler)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

from worker.core.money import Micros
from worker.core.request import RequestMeta
from worker.core.result import Choice, Estimate, Outcome, Reason, Result, Usage, UsageSource

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
_ids = itertools.count(1)


def request_id() -> str:
    return f"req-{next(_ids)}"


def make_meta(
    request_id: str = "req-1",
    *,
    account_id: str = "acct-1",
    reserved: int = 10_000,
    model: str = "gpt-4o-mini",
    stream: bool = True,
    created_at: datetime = T0,
) -> RequestMeta:
    return RequestMeta(
        request_id=request_id,
        account_id=account_id,
        model=model,
        stream=stream,
        include_usage=True,
        reserved_micros=Micros(reserved),
        created_at=created_at,
    )


def make_result(
    request_id: str = "req-1",
    *,
    outcome: Outcome = Outcome.SETTLED,
    account_id: str = "acct-1",
    reserved: int = 10_000,
    charge: int | None = 4_000,
    exposure: int | None = 3_000,
    reason: Reason | None = None,
    usage: Usage | None = None,
    usage_source: UsageSource | None = None,
    estimate: Estimate | None = None,
    model: str = "gpt-4o-mini",
    created_at: datetime = T0,
    finish_reason: str | None = "stop",
    anomalies: tuple[str, ...] = (),
    **extra: Any,
) -> Result:
    """A result; settled ones default to reported usage, unsettled ones to ``error_finish``."""
    if outcome is Outcome.SETTLED:
        usage = usage or Usage(prompt_tokens=100, completion_tokens=50, cached_tokens=20)
        usage_source = usage_source or UsageSource.REPORTED
    else:
        charge = None
    if outcome is Outcome.UNSETTLED and reason is None:
        reason = Reason.ERROR_FINISH
        finish_reason = "error"
    if charge is None and outcome is Outcome.SETTLED:
        anomalies = (*anomalies, "unpriced")
        exposure = None
    return Result(
        request_id=request_id,
        account_id=account_id,
        model=model,
        stream=True,
        created_at=created_at,
        reserved_micros=Micros(reserved),
        outcome=outcome,
        reason=reason,
        usage_source=usage_source,
        usage=usage,
        usage_raw=None,
        estimate=estimate or Estimate(prompt_tokens=98, completion_tokens=52, approximate=False),
        charge_micros=None if charge is None else Micros(charge),
        exposure_micros=None if exposure is None else Micros(exposure),
        choices=(Choice(index=0, role="assistant", finish_reason=finish_reason),),
        completion_id="chatcmpl-1",
        system_fingerprint="fp_1",
        anomalies=anomalies,
        **extra,
    )


def settled(request_id: str = "req-1", **kw: Any) -> Result:
    return make_result(request_id, outcome=Outcome.SETTLED, **kw)


def voided(request_id: str = "req-1", **kw: Any) -> Result:
    return make_result(request_id, outcome=Outcome.VOID, usage=None, **kw)


def unsettled(request_id: str = "req-1", **kw: Any) -> Result:
    return make_result(request_id, outcome=Outcome.UNSETTLED, **kw)
