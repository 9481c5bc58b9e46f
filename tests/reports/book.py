"""A small ledger built through the real operations, and what the report must say about it.

Each ``Call`` is a plan; ``post`` runs it through ``hold`` / ``apply_result`` / ``resolve`` and records
its findings (output hash, drift) as the consumer does; and ``expected`` / ``expected_drift`` compute
every count, amount and drift from the plans alone, without SQL and without the worker's own drift
function, so the report's queries are checked against an independent computation.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from ledger.factories import make_meta, make_result
from sqlalchemy.orm import Session

from worker.core.money import Micros
from worker.core.result import Estimate, Outcome, Reason, Result, Usage, UsageSource
from worker.ledger.findings import record_findings
from worker.ledger.operations import apply_result, hold, resolve
from worker.ledger.rollup import flush_money
from worker.reports.model import COUNT_FIELDS, MONEY_FIELDS, Tally

GRACE = timedelta(hours=1)
SINCE = datetime(2033, 5, 1, tzinfo=UTC)
UNTIL = datetime(2033, 5, 3, tzinfo=UTC)


@dataclass(frozen=True)
class Call:
    account: str
    model: str
    created_at: datetime
    kind: str  # settled | void | unsettled | pending
    reserved: int = 10_000
    stream: bool = True
    charge: int | None = 4_000  # settled: the charge (None: unpriced → unsettled, unpriced)
    source: str = "reported"
    reason: str | None = None  # unsettled
    exposure: int | None = 3_000
    resolution: str | None = None  # release | charge_estimate | settled_late
    completion: int = 50
    reasoning: int = 0  # of ``completion``: hidden from the stream, so outside the drift
    estimate: int = 52
    request_id: str = ""

    @property
    def day(self) -> str:
        return self.created_at.date().isoformat()


def scenario(
    prefix: str, account_a: str = "", account_b: str = "", model: str = "m-one"
) -> list[Call]:
    """Every outcome, two days in the window, and one call on each side of it."""
    a = account_a or f"acct-a-{prefix}"
    b = account_b or f"acct-b-{prefix}"
    d1 = datetime(2033, 5, 1, 0, 0, tzinfo=UTC)  # the first instant of the window: included
    d2 = datetime(2033, 5, 2, 23, 59, 59, 999_000, tzinfo=UTC)
    calls = [
        Call(a, "m-one", d1, "settled", completion=50, estimate=52),
        Call(a, "m-two", d1 + timedelta(hours=3), "settled", stream=False, charge=3_000,
             source="estimated", completion=40, estimate=40),
        Call(b, "m-one", d1 + timedelta(hours=5), "settled", reserved=1_000, charge=2_500,
             completion=120, reasoning=30, estimate=100),  # a reasoning model: 90 visible
        Call(b, "m-two", d1 + timedelta(hours=6), "void", stream=False),
        Call(a, "m-one", d2 - timedelta(hours=1), "unsettled", reason="error_finish"),
        Call(b, "m-one", d2 - timedelta(hours=2), "unsettled", reason="incomplete",
             resolution="release"),
        Call(a, "m-two", d2 - timedelta(hours=3), "unsettled", reason="missing_usage",
             exposure=3_000, resolution="charge_estimate"),
        Call(b, "m-two", d2 - timedelta(hours=4), "unsettled", reason="missing_usage",
             exposure=15_000, resolution="charge_estimate"),
        Call(a, "m-one", d2 - timedelta(hours=5), "unsettled", reason="unpriced", charge=None),
        Call(b, "m-one", d2 - timedelta(hours=6), "unsettled", reason="error_finish",
             resolution="settled_late", charge=6_000, completion=80, estimate=90),
        Call(a, "m-two", d2, "pending", reserved=7_000),
        Call(b, "m-two", d2 - timedelta(hours=7), "settled", reserved=0, charge=500,
             completion=10, estimate=9, stream=False),  # reported but not streamed: no drift
        Call(a, "m-one", SINCE - timedelta(microseconds=1), "settled"),  # before the window
        Call(a, "m-one", UNTIL, "void"),  # the end is exclusive
    ]  # fmt: skip
    return [
        Call(**{
            **c.__dict__,
            "model": model if c.model == "m-one" else c.model,
            "request_id": f"rep-{prefix}-{i}-{uuid.uuid4().hex[:6]}",
        })
        for i, c in enumerate(calls)
    ]  # fmt: skip


def _result(call: Call, outcome: Outcome, **kw: object) -> Result:
    result = make_result(
        call.request_id,
        outcome=outcome,
        account_id=call.account,
        reserved=call.reserved,
        model=call.model,
        created_at=call.created_at,
        usage=Usage(
            prompt_tokens=100, completion_tokens=call.completion, reasoning_tokens=call.reasoning
        ),
        estimate=Estimate(prompt_tokens=98, completion_tokens=call.estimate, approximate=False),
        **kw,  # type: ignore[arg-type]
    )
    return dataclasses.replace(result, stream=call.stream)


def _apply(session: Session, result: Result, now: datetime) -> str:
    """``apply_result`` and then the findings, as the consumer applies a call."""
    effect = apply_result(session, result, now=now, grace=GRACE)
    assert record_findings(session, result, effect, salt="report-tests", now=now)
    return effect


def post(session: Session, calls: Iterable[Call]) -> None:
    for call in calls:
        now = call.created_at + timedelta(seconds=5)
        meta = make_meta(
            call.request_id,
            account_id=call.account,
            reserved=call.reserved,
            model=call.model,
            stream=call.stream,
            created_at=call.created_at,
        )
        hold(session, meta, now=now)
        if call.kind == "settled":
            result = _result(call, Outcome.SETTLED, charge=call.charge,
                             usage_source=UsageSource(call.source))  # fmt: skip
            _apply(session, result, now)
        elif call.kind == "void":
            _apply(session, _result(call, Outcome.VOID), now)
        elif call.kind == "unsettled" and call.reason == "unpriced":
            _apply(session, _result(call, Outcome.SETTLED, charge=None), now)
        elif call.kind == "unsettled":
            result = _result(call, Outcome.UNSETTLED, reason=Reason(call.reason),
                             exposure=call.exposure)  # fmt: skip
            _apply(session, result, now)
            later = now + timedelta(seconds=30)
            if call.resolution == "settled_late":
                late = _result(call, Outcome.SETTLED, charge=call.charge,
                               usage_source=UsageSource(call.source))  # fmt: skip
                assert _apply(session, late, later) == "settled_late"
            elif call.resolution is not None:
                resolve(session, call.request_id, call.resolution, who="test", note="t", now=later)
    session.flush()
    flush_money(session)  # the rollup is written at COMMIT; the tests read it in this transaction


def _tally(call: Call) -> Tally:
    counts = dict.fromkeys(COUNT_FIELDS, 0)
    money = dict.fromkeys(MONEY_FIELDS, 0)
    counts["calls"] = 1
    counts["streamed" if call.stream else "non_streamed"] = 1
    money["held"] = call.reserved

    def charged(amount: int) -> None:
        money["charged"] = amount
        money["true_ups"] = max(amount - call.reserved, 0)
        money["released"] = call.reserved - min(amount, call.reserved)

    if call.kind == "settled":
        counts[f"settled_{call.source}"] = 1
        charged(call.charge or 0)
    elif call.kind == "void":
        counts["void"] = 1
        money["released"] = call.reserved
    elif call.kind == "pending":
        counts["pending"] = 1
        money["still_held"] = call.reserved
    else:
        counts[f"unsettled_{call.reason}"] = 1
        if call.resolution is None:
            money["still_held"] = call.reserved
            money["exposure"] = 0 if call.reason == "unpriced" else (call.exposure or 0)
        else:
            counts[f"resolved_{call.resolution}"] = 1
        if call.resolution == "release":
            money["released"] = call.reserved
        elif call.resolution == "charge_estimate":
            charged(call.exposure or 0)
        elif call.resolution == "settled_late":
            counts[f"settled_{call.source}"] = 1
            charged(call.charge or 0)
    return Tally.of(counts, {k: Micros(v) for k, v in money.items()})


def in_window(calls: Iterable[Call]) -> list[Call]:
    return [c for c in calls if SINCE <= c.created_at < UNTIL]


def key_of(call: Call, by: Sequence[str]) -> tuple[str, ...]:
    values = {"day": call.day, "account": call.account, "model": call.model}
    return tuple(values[k] for k in by)


def expected(calls: Iterable[Call], by: Sequence[str]) -> dict[tuple[str, ...], Tally]:
    found: dict[tuple[str, ...], Tally] = {}
    for call in in_window(calls):
        key = key_of(call, by)
        found[key] = found.get(key, Tally()) + _tally(call)
    return found


def percentile_cont(values: Sequence[float], fraction: float) -> float:
    """PostgreSQL's definition, in plain Python."""
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = int(position // 1)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (position - low) * (ordered[high] - ordered[low])


def drift_of(call: Call) -> int | None:
    """The call's drift in ppm, from its plan: streamed, settled with reported usage, a non-zero
    estimate; visible (completion - reasoning) against the estimate, truncated toward zero."""
    reported = call.source == "reported" and (
        call.kind == "settled" or call.resolution == "settled_late"
    )
    if not (reported and call.stream and call.estimate > 0):
        return None
    difference = (call.completion - call.reasoning - call.estimate) * 1_000_000
    magnitude = abs(difference) // call.estimate
    return magnitude if difference >= 0 else -magnitude


def expected_drift(calls: Iterable[Call]) -> dict[str, list[int]]:
    """Per model, the drift (ppm) of the window's calls that have one."""
    found: dict[str, list[int]] = {}
    for call in in_window(calls):
        ppm = drift_of(call)
        if ppm is not None:
            found.setdefault(call.model, []).append(ppm)
    return found


def drift_percentile(values: Sequence[int], fraction: float) -> float:
    """What the report shows: the ppm percentile as a fraction, six decimals."""
    return round(percentile_cont(values, fraction) / 1_000_000, 6)
