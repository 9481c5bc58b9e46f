"""The parity promise as a property: for any usage block, model and time, the streamed and the
non-streamed path through the reconciler and the ledger (a real session) charge the same integers."""

from __future__ import annotations

import re
import uuid
from dataclasses import replace
from datetime import timedelta

import orjson
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from sqlalchemy.orm import Session

from models import Reservation, UsageRecord
from worker.core.reconcile import reconcile_response, reconcile_stream
from worker.core.request import request_from_dict
from worker.core.result import Outcome
from worker.core.usage import usage_from_block
from worker.ledger.operations import apply_result

from .calls import BOOK, T0, meta_dict, reconcile, response_body, sse_body

MODELS = sorted({price.model for price in BOOK.prices})
# OpenAI's web search guide: the search models search on every Chat Completions call, which their
# usage does not count (the oracle's own reading, not ``worker.core.searches``).
SEARCH_MODEL = re.compile(r"-search-(preview|api)")


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    model=st.sampled_from(MODELS),
    prompt=st.integers(0, 2_000_000),
    completion=st.integers(0, 500_000),
    cached_share=st.integers(0, 100),
    minutes=st.integers(-525_600, 525_600),
    reserved=st.integers(0, 10_000_000),
)
def test_streamed_and_plain_charge_the_same(
    session: Session,
    model: str,
    prompt: int,
    completion: int,
    cached_share: int,
    minutes: int,
    reserved: int,
) -> None:
    at = T0 + timedelta(minutes=minutes)
    # Within what the model can hold (beyond it, both are unsettled implausible_usage alike), and
    # at least one completion token: the call has text, and 0 for text is implausible_usage alike.
    window = BOOK.context_window(model, at) or 10**8
    prompt, completion = prompt % (window // 2 + 1), 1 + completion % (window // 2)
    block = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": prompt * cached_share // 100},
    }
    tag = uuid.uuid4().hex[:10]
    charges = []
    for stream in (True, False):
        data = meta_dict(stream=stream, model=model, created_at=at, reserved=reserved)
        data["request_id"] = f"prop-{tag}-{stream}"
        result = reconcile(data, "Same words.", block)
        assert result.outcome is Outcome.SETTLED
        effect = apply_result(session, result, now=at, grace=timedelta(hours=1))
        if result.charge_micros is None:  # unpriced at that time: both are, equally
            assert effect == "unsettled"
            charges.append(None)
            continue
        assert effect == "settled"
        charges.append(
            session.scalar(
                select(UsageRecord.charge_micros)
                .join(Reservation, Reservation.id == UsageRecord.reservation_id)
                .where(Reservation.request_id == data["request_id"])
            )
        )
    assert charges[0] == charges[1]
    assert charges[0] is None or isinstance(charges[0], int)


def _shaped(shape: str, prompt: int, completion: int, cached: int, reasoning: int) -> dict:
    """One call's usage as each provider family writes it (tests/fixtures/providers for sources)."""
    if shape == "deepseek":
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_cache_hit_tokens": cached,
            "prompt_cache_miss_tokens": prompt - cached,
        }
    if shape == "anthropic":
        return {
            "input_tokens": prompt - cached,
            "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": 0,
            "output_tokens": completion,
        }
    if shape == "reasoning_apart":  # xAI: reasoning beside completion, counted in the total
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion + reasoning,
            "prompt_tokens_details": {"cached_tokens": cached},
            "completion_tokens_details": {"reasoning_tokens": reasoning},
        }
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion + reasoning,
        "total_tokens": prompt + completion + reasoning,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    model=st.sampled_from(MODELS),
    shape=st.sampled_from(["openai", "deepseek", "anthropic", "reasoning_apart", "groq"]),
    prompt=st.integers(0, 200_000),
    completion=st.integers(0, 50_000),
    reasoning=st.integers(0, 50_000),
    cached_share=st.integers(0, 100),
)
# Hypothesis found it (a search model's call is charged one search its usage does not count).
@example(
    model="gpt-4o-mini-search-preview", shape="openai", prompt=0, completion=0, reasoning=0,
    cached_share=0,
)  # fmt: skip
def test_provider_shapes_charge_the_same_streamed_and_plain(
    session: Session,
    model: str,
    shape: str,
    prompt: int,
    completion: int,
    reasoning: int,
    cached_share: int,
) -> None:
    """Each provider family's usage shape, streamed (Groq: in ``x_groq.usage`` on the finish chunk)
    and not, settles at the same charge as the same counts in OpenAI's shape."""
    # Within what the model can hold (beyond it, both are unsettled implausible_usage alike), and
    # at least one completion token: the call has text, and 0 for text is implausible_usage alike.
    part = (BOOK.context_window(model, T0) or 10**8) // 3 + 1
    prompt, completion, reasoning = prompt % part, 1 + completion % (part - 1), reasoning % part
    cached = prompt * cached_share // 100
    if shape in ("deepseek", "anthropic"):
        reasoning = 0
    block = _shaped(shape, prompt, completion, cached, reasoning)
    provider = "xai" if shape == "reasoning_apart" else shape
    tag = uuid.uuid4().hex[:10]
    charges = []
    for stream in (True, False):
        data = meta_dict(stream=stream, model=model, created_at=T0, provider=provider)
        data["request_id"] = f"shape-{tag}-{stream}"
        meta = request_from_dict(data)
        if stream:
            frames = sse_body("Same words.", None if shape == "groq" else block, model=model)
            if shape == "groq":
                finish = orjson.loads(frames[-2][6:])
                finish["x_groq"] = {"id": "req_x", "usage": block}
                frames[-2] = b"data: " + orjson.dumps(finish) + b"\n\n"
            result = reconcile_stream(meta, frames, BOOK)
        else:
            result = reconcile_response(
                meta, 200, response_body("Same words.", block, model=model), BOOK
            )
        assert result.outcome is Outcome.SETTLED, (shape, result.reason, result.usage_problem)
        usage = result.usage
        assert usage is not None
        assert (usage.prompt_tokens, usage.cached_tokens) == (prompt, cached)
        assert usage.completion_tokens == completion + reasoning
        effect = apply_result(session, result, now=T0, grace=timedelta(hours=1))
        if result.charge_micros is None:
            assert effect == "unsettled"
            charges.append(None)
            continue
        assert effect == "settled"
        charges.append(
            session.scalar(
                select(UsageRecord.charge_micros)
                .join(Reservation, Reservation.id == UsageRecord.reservation_id)
                .where(Reservation.request_id == data["request_id"])
            )
        )
    plain = {"prompt_tokens": prompt, "completion_tokens": completion + reasoning}
    plain["prompt_tokens_details"] = {"cached_tokens": cached}
    assert charges[0] == charges[1]
    canonical = usage_from_block(plain)
    assert canonical is not None
    if SEARCH_MODEL.search(model):  # OpenAI's search models: every call one search, "medium"
        canonical = replace(canonical, web_search_requests=1, search_context_size="medium")
    assert charges[0] == BOOK.charge(model, canonical, T0, provider=provider)
