"""Sanity bounds: no usage block, however absurd, is billed as if it were real, and none can push a
money value past what the ledger's columns hold, on either engine."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from sqlalchemy.orm import Session

from models import Anomaly, Failure, Reservation, UsageRecord
from worker.core.reconcile import MAX_CALL_MICROS, reconcile_response, reconcile_stream
from worker.core.request import request_from_dict
from worker.core.result import Outcome, Reason
from worker.core.usage import TOKEN_COLUMN_MAX, Verdict, read_usage
from worker.ledger.findings import record_findings
from worker.ledger.operations import apply_result, hold

from .shapes import AT, BOOK, sse

INT64 = 2**63 - 1
COUNT = st.one_of(
    st.integers(-(10**18), 10**18),
    st.integers(0, 3_000),
    st.sampled_from([0, 1, 2**31 - 1, 2**31, 2**53, 10**18, -1]),
    st.text(max_size=4),
    st.floats(allow_nan=True, allow_infinity=True),
    st.none(),
    st.booleans(),
)
DETAILS = st.dictionaries(
    st.sampled_from(["cached_tokens", "audio_tokens", "cache_write_tokens", "reasoning_tokens"]),
    COUNT,
    max_size=3,
)
BLOCK = st.dictionaries(
    st.sampled_from(
        [
            "prompt_tokens",
            "completion_tokens",
            "total_tokens",
            "prompt_cache_hit_tokens",
            "prompt_cache_miss_tokens",
            "input_tokens",
            "output_tokens",
            "cache_read_input_tokens",
            "cost",
            "cost_in_usd_ticks",
        ]
    ),
    COUNT,
    max_size=6,
).flatmap(
    lambda block: st.fixed_dictionaries(
        {},
        optional={"prompt_tokens_details": DETAILS, "completion_tokens_details": DETAILS},
    ).map(lambda details: {**block, **details})
)
PROVIDER = st.sampled_from([None, "xai", "gemini", "deepseek", "openrouter"])
UNSETTLED_BY_USAGE = {
    Reason.IMPLAUSIBLE_USAGE,
    Reason.INCONSISTENT_USAGE,
    Reason.UNPRICED,
    Reason.UNPRICED_COMPONENT,
}


def _frames(block: dict[str, Any]) -> bytes:
    base = {"id": "chatcmpl-b", "object": "chat.completion.chunk", "model": "gpt-4o"}
    return sse(
        [
            {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}}]},
            {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {**base, "choices": [], "usage": block},
            "[DONE]",
        ]
    )


def _body(block: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-b",
        "object": "chat.completion",
        "model": "gpt-4o",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}
        ],
        "usage": block,
    }


@given(block=BLOCK, provider=PROVIDER)
@settings(max_examples=400, deadline=None)
def test_reading_never_raises_and_never_passes_the_bound(block: dict, provider: str | None) -> None:
    reading = read_usage(block, provider=provider, model="gpt-4o", bound=128_000)
    if reading.verdict is Verdict.BILLABLE:
        usage = reading.usage
        assert usage is not None and usage.total_tokens <= 128_000
        parts = (usage.cached_tokens, usage.cache_write_tokens, usage.audio_prompt_tokens)
        assert all(0 <= part <= usage.prompt_tokens for part in parts)
        assert 0 <= usage.reasoning_tokens <= usage.completion_tokens
    elif reading.verdict is Verdict.INCONSISTENT:
        assert reading.larger is not None and reading.larger.total_tokens <= 128_000
    else:
        assert reading.problem


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(block=BLOCK, provider=PROVIDER, stream=st.booleans(), include_usage=st.booleans())
@example(  # hypothesis found it: gpt-4o has no audio price, so the call is unpriced, not settled
    block={
        "prompt_tokens": 5,
        "completion_tokens": 3,
        "prompt_tokens_details": {"audio_tokens": 1},
    },
    provider=None,
    stream=False,
    include_usage=False,
)
def test_any_block_has_a_clear_outcome_in_the_ledger(
    session: Session, block: dict, provider: str | None, stream: bool, include_usage: bool
) -> None:
    request_id = f"bound-{uuid.uuid4().hex[:12]}"
    meta = request_from_dict(
        {
            "request_id": request_id,
            "account_id": "acct_bounds",
            "model": "gpt-4o",
            "stream": stream,
            "include_usage": include_usage,
            "reserved_micros": 10_000,
            "created_at": AT.isoformat(),
            "messages": [{"role": "user", "content": "Hello"}],
            "provider": provider,
        }
    )
    if stream:
        result = reconcile_stream(meta, _frames(block), BOOK)
    else:
        result = reconcile_response(meta, 200, _body(block), BOOK)
    hold(session, meta, now=AT)
    effect = apply_result(session, result, now=AT, grace=timedelta(hours=1))
    record_findings(session, result, effect, salt="s", now=AT, meta=meta)
    reservation = session.scalar(select(Reservation).where(Reservation.request_id == request_id))
    assert reservation is not None
    if result.outcome is Outcome.SETTLED and result.charge_micros is None:
        # a block with a kind the row has no price for (gpt-4o's audio tokens): never a guessed
        # charge, the ledger marks the call unsettled as unpriced (transitions.settled)
        assert effect == "unsettled"
        failure = session.scalar(select(Failure).where(Failure.reservation_id == reservation.id))
        assert failure is not None and failure.reason == str(Reason.UNPRICED)
    elif result.outcome is Outcome.SETTLED:
        assert effect == "settled"
        record = session.scalar(
            select(UsageRecord).where(UsageRecord.reservation_id == reservation.id)
        )
        assert record is not None and 0 <= record.charge_micros <= MAX_CALL_MICROS
        assert record.prompt_tokens + record.completion_tokens <= TOKEN_COLUMN_MAX
    else:
        assert (result.outcome, effect) == (Outcome.UNSETTLED, "unsettled")
        assert result.reason in UNSETTLED_BY_USAGE
        failure = session.scalar(select(Failure).where(Failure.reservation_id == reservation.id))
        assert failure is not None and failure.reason == str(result.reason)
        assert failure.exposure_micros is None or 0 <= failure.exposure_micros <= INT64
        if result.reason is not Reason.UNPRICED:
            kinds = session.scalars(
                select(Anomaly.kind).where(Anomaly.reservation_id == reservation.id)
            ).all()
            assert str(result.reason) in kinds  # the block's problem, for billing show


@pytest.mark.parametrize(
    ("block", "problem"),
    [
        ({"prompt_tokens": 10**18, "completion_tokens": 10**18}, "beyond any call"),
        ({"prompt_tokens": 5}, "completion_tokens is missing"),
        ({"prompt_tokens": -1, "completion_tokens": 3}, "negative"),
        ({"prompt_tokens": "12", "completion_tokens": 3}, "not an integer"),
        ({"prompt_tokens": 1.5, "completion_tokens": 3}, "not an integer"),
        ({"prompt_tokens": 200_000, "completion_tokens": 3}, "exceed what the call can hold"),
        (
            {
                "prompt_tokens": 5,
                "completion_tokens": 3,
                "completion_tokens_details": {"reasoning_tokens": 9},
            },
            "reasoning_tokens (9) exceed completion_tokens (3)",
        ),
    ],
)
def test_implausible_blocks_are_never_billed(block: dict, problem: str) -> None:
    # The bound when the book knows no context window: 10^8 per choice, here cut to 128k by a book
    # that knows it (as the price book will: PriceBook.context_window).
    class Windowed(type(BOOK)):  # type: ignore[misc]
        def context_window(self, model: str, at: object) -> int:
            return 128_000

    book = Windowed(BOOK.prices)
    meta = request_from_dict(
        {
            "request_id": "impl",
            "account_id": "a",
            "model": "gpt-4o",
            "stream": False,
            "reserved_micros": 0,
            "created_at": AT.isoformat(),
        }
    )
    result = reconcile_response(meta, 200, _body(block), book)
    assert (result.outcome, result.reason) == (Outcome.UNSETTLED, Reason.IMPLAUSIBLE_USAGE)
    assert result.charge_micros is None
    assert problem in (result.usage_problem or "")


def test_an_inconsistent_total_is_exposed_at_the_larger_reading() -> None:
    meta = request_from_dict(
        {
            "request_id": "inc",
            "account_id": "a",
            "model": "gpt-4o",
            "stream": False,
            "reserved_micros": 0,
            "created_at": AT.isoformat(),
        }
    )
    block = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 1110}
    result = reconcile_response(meta, 200, _body(block), BOOK)
    assert (result.outcome, result.reason) == (Outcome.UNSETTLED, Reason.INCONSISTENT_USAGE)
    # The total's reading, the excess read as completion: 100 * 2.50 + 1010 * 10.00 = 10350
    assert result.exposure_micros == 10_350
    assert result.usage_problem == "total_tokens 1110 != prompt 100 + completion 10"
