"""The hold rule (``reservation.hold_for``) is an upper bound of what the upstream can bill, and its
gateway helpers (``holds``): priced off the event loop, a limit written into the body."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worker.core.estimate import estimate_prompt, prompt_bytes_bound
from worker.core.prices import load_price_book
from worker.core.vocab import load_encoding
from worker.gateway.holds import (
    TOKENIZE_BYTES,
    hold_of_routes,
    price_hold,
    unpriced_hold,
    with_limit,
)
from worker.gateway.refusals import Refusal
from worker.gateway.reservation import Hold, Unpriced, hold_for

BOOK = load_price_book()
AT = datetime(2026, 12, 1, 12, tzinfo=UTC)
MODELS = ["gpt-4o", "gpt-4o-mini", "o3-mini", "gpt-4"]
ENCODING = load_encoding("o200k_base")
CL100K = load_encoding("cl100k_base")


def _tokens(value: object) -> int:
    """The oracle's count of a JSON field: the most tokens its JSON text has in either encoding."""
    text = json.dumps(value, ensure_ascii=False)
    return max(len(ENCODING.encode_ordinary(text)), len(CL100K.encode_ordinary(text)))


def _cost(model: str, prompt: int, completion: int) -> int:
    """What the upstream bills for these counts at the book's row, computed here."""
    price = BOOK.price_for(model, AT)
    assert price is not None
    exact = (price.input * prompt + price.output * completion).quantize(
        Decimal(1), rounding=ROUND_HALF_UP
    )
    return int(exact)


texts = st.text(st.characters(blacklist_categories=["Cs"]), max_size=300)
schemas = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=20,
)
limits = st.one_of(
    st.just({}),
    st.builds(lambda n: {"max_tokens": n}, st.integers(0, 200_000)),
    st.builds(lambda n: {"max_completion_tokens": n}, st.integers(0, 200_000)),
)


@settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(
    model=st.sampled_from(MODELS),
    contents=st.lists(texts, min_size=1, max_size=4),
    extra=st.dictionaries(
        st.sampled_from(["response_format", "tool_choice", "prediction", "x_unknown_field"]),
        schemas,
        max_size=3,
    ),
    limit=limits,
    n=st.integers(1, 4),
)
def test_the_hold_covers_every_bill_the_upstream_can_send(
    model: str, contents: list[str], extra: dict[str, Any], limit: dict[str, int], n: int
) -> None:
    """Oracle: the prompt's estimate plus the tokens of every other prompt field's JSON, and the
    completion the upstream is held to (the client's limit, else the one the gateway writes)
    bounded by the model's max output, times n, plus a prediction's tokens per choice."""
    messages = [{"role": "user", "content": c} for c in contents]
    body = {"model": model, "messages": messages, "n": n, **limit, **extra}
    found = hold_for(BOOK, body, AT)
    assert isinstance(found, Hold)
    row = BOOK.price_for(model, AT)
    assert row is not None
    stated = limit.get("max_completion_tokens", limit.get("max_tokens"))
    if stated is None:
        assert found.write == "max_completion_tokens"
        enforced = found.output_tokens
    else:
        assert found.write is None
        enforced = stated
    if row.max_output_tokens is not None:
        enforced = min(enforced, row.max_output_tokens)
    fields = sum(_tokens(v) for k, v in extra.items() if v is not None)
    predicted = _tokens(extra["prediction"]) if extra.get("prediction") is not None else 0
    prompt = estimate_prompt(model, messages) + fields
    assert int(found.micros) >= _cost(model, prompt, (enforced + predicted) * n)


def test_no_limit_holds_the_models_max_output_and_writes_it() -> None:
    """Was 4,096 output tokens whatever the model could produce: gpt-4o writes up to 16,384."""
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    found = hold_for(BOOK, body, AT)
    assert isinstance(found, Hold)
    assert (found.output_tokens, found.write) == (16_384, "max_completion_tokens")
    assert int(found.micros) >= _cost("gpt-4o", 0, 16_384)
    stated = hold_for(BOOK, {**body, "max_tokens": 100}, AT)
    assert isinstance(stated, Hold) and (stated.output_tokens, stated.write) == (100, None)


def test_the_written_field_is_the_providers() -> None:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    for provider, field in (("openai", "max_completion_tokens"), ("azure", "max_completion_tokens"),
                            (None, "max_completion_tokens"), ("deepseek", "max_tokens")):  # fmt: skip
        found = hold_for(BOOK, body, AT, provider=provider)
        if isinstance(found, Hold):
            assert found.write == field


def test_a_response_format_schema_is_in_the_hold() -> None:
    """Was left out: a 40 KB schema with a one-word message was held at the message alone."""
    schema = {"type": "object", "properties": {f"field_{i}": {"type": "string",
              "description": "a long description of the field " * 10} for i in range(100)}}  # fmt: skip
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 10}  # fmt: skip
    plain = hold_for(BOOK, body, AT)
    shaped = hold_for(BOOK, {**body, "response_format": {"type": "json_schema",
                                                         "json_schema": {"schema": schema}}}, AT)  # fmt: skip
    assert isinstance(plain, Hold) and isinstance(shaped, Hold)
    assert int(shaped.micros) - int(plain.micros) >= _cost("gpt-4o-mini", _tokens(schema), 0) - 1


@pytest.mark.parametrize("name", ["openai/gpt-4o-mini", "GPT-4o-mini", "no-such-model", ""])
def test_a_name_the_worker_cannot_price_is_unpriced_never_held_at_0(name: str) -> None:
    found = hold_for(BOOK, {"model": name, "messages": []}, AT)
    assert isinstance(found, Unpriced)
    refused = unpriced_hold(found, 0, "r1")
    assert isinstance(refused, Refusal)
    assert (refused.status, refused.code) == (400, "model_not_priced")
    assert unpriced_hold(found, 5_000_000, "r1") == (5_000_000, found.budget_model)


@pytest.mark.parametrize(
    ("name", "budget_model"),
    [
        ("gpt-4o-mini", "gpt-4o-mini"),
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("openai/gpt-4o-mini", "gpt-4o-mini"),
        ("GPT-4o-Mini", "gpt-4o-mini"),
    ],
)
def test_every_spelling_of_a_model_counts_under_one_budget_name(
    name: str, budget_model: str
) -> None:
    assert BOOK.budget_model(name) == budget_model
    found = hold_for(BOOK, {"model": name, "messages": []}, AT)
    if isinstance(found, Hold):
        assert found.model == budget_model
    else:
        assert found.budget_model == budget_model


@settings(deadline=None, max_examples=100)
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "role": st.sampled_from(["user", "system"]),
                "content": texts
                | st.lists(
                    st.fixed_dictionaries({"type": st.just("text"), "text": texts}), max_size=3
                ),
            },
            optional={"name": st.text(max_size=10)},
        ),
        max_size=5,
    ),
    st.sampled_from(MODELS),
)
def test_the_byte_bound_is_never_below_the_estimate(messages: list[Any], model: str) -> None:
    assert prompt_bytes_bound(model, messages) >= estimate_prompt(model, messages)


def test_a_request_past_the_size_bound_is_priced_from_bytes_at_least_as_high() -> None:
    text = "river delta town bridge " * 60_000  # 1.4 MB
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": text}], "max_tokens": 5}
    tokenized, counted = (
        hold_of_routes(BOOK, body, AT, [("gpt-4o", None)], tokenize=flag) for flag in (True, False)
    )
    assert isinstance(tokenized, Hold) and isinstance(counted, Hold)
    assert counted.prompt_tokens == prompt_bytes_bound("gpt-4o", body["messages"])
    assert counted.micros >= tokenized.micros
    by_size = hold_of_routes(BOOK, body, AT, [("gpt-4o", None)])  # past TOKENIZE_BYTES: bytes
    assert len(text) > TOKENIZE_BYTES and by_size == counted


def test_pricing_a_huge_prompt_leaves_the_event_loop_free() -> None:
    """Tokenizing 5.7 MB on the loop stalled it 1.75-2.8 s; priced in a thread it does not."""
    text = "word " * 1_140_000  # 5.7 MB
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}

    async def run() -> tuple[Hold | Unpriced, float]:
        gaps: list[float] = []
        done = False

        async def tick() -> None:
            last = time.monotonic()
            while not done:
                await asyncio.sleep(0.005)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        ticker = asyncio.create_task(tick())
        found = await price_hold(BOOK, body, AT, size=len(text))
        done = True
        await ticker
        return found, max(gaps)

    found, worst = asyncio.run(run())
    assert isinstance(found, Hold) and found.prompt_tokens >= len(text)
    assert worst < 0.25, worst


def test_the_limit_is_written_keeping_the_bytes_as_they_came() -> None:
    raw = b'{"model": "gpt-4o",\n "messages": [{"role": "user", "content": "h\\u00e9"}]}\n'
    body = json.loads(raw)
    out = with_limit(raw, body, "max_completion_tokens", 123)
    assert out.startswith(raw.rstrip()[:-1]) and json.loads(out) == {
        **body,
        "max_completion_tokens": 123,
    }
    # A field present with a value that is no limit: written anew, one key.
    raw = b'{"model": "gpt-4o", "messages": [], "max_tokens": null}'
    out = with_limit(raw, json.loads(raw), "max_tokens", 9)
    assert json.loads(out)["max_tokens"] == 9 and out.count(b"max_tokens") == 1
    # UTF-16: written anew as UTF-8.
    body = {"model": "gpt-4o", "messages": []}
    out = with_limit(json.dumps(body).encode("utf-16"), body, "max_tokens", 9)
    assert json.loads(out) == {**body, "max_tokens": 9}


def test_a_pricing_past_its_timeout_is_priced_from_bytes_never_left_unpriced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import worker.gateway.holds as holds

    monkeypatch.setattr(holds, "TIMEOUT_SECONDS", 0.001)
    text = "river delta town bridge " * 40_000  # under TOKENIZE_BYTES: tokenized, slowly
    assert len(text) < TOKENIZE_BYTES
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": text}], "max_tokens": 5}
    found = asyncio.run(price_hold(BOOK, body, AT, size=len(text)))
    assert isinstance(found, Hold)
    assert found.prompt_tokens == prompt_bytes_bound("gpt-4o", body["messages"])
