"""The reconciler end to end on bundled examples, and stream/non-stream parity."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.core.errors import InputError
from worker.core.prices import load_price_book
from worker.core.reconcile import reconcile_response, reconcile_stream
from worker.core.request import parse_request, request_from_dict
from worker.core.result import Outcome, Reason, UsageSource

EXAMPLES = Path(__file__).parent.parent / "worker" / "data" / "examples"
BOOK = load_price_book()


def replay(name: str):
    meta = parse_request((EXAMPLES / f"{name}.request.json").read_bytes())
    body = (EXAMPLES / (f"{name}.sse" if meta.stream else f"{name}.json")).read_bytes()
    if meta.stream:
        return reconcile_stream(meta, body, BOOK)
    return reconcile_response(meta, 200, body, BOOK)


@pytest.mark.parametrize(
    ("name", "outcome", "reason", "source", "charge"),
    [
        # seed 000: 11 prompt * 2.50 + 3 completion * 10.00 = 57.5 micro-USD → 58
        ("settled", Outcome.SETTLED, None, UsageSource.REPORTED, 58),
        ("non_streamed", Outcome.SETTLED, None, UsageSource.REPORTED, 58),
        ("missing_usage", Outcome.UNSETTLED, Reason.MISSING_USAGE, None, None),
        ("error_finish", Outcome.UNSETTLED, Reason.ERROR_FINISH, None, None),
        ("dropped", Outcome.UNSETTLED, Reason.INCOMPLETE, None, None),
        ("void_error", Outcome.VOID, None, None, None),
        # gpt-4.1-mini: 32 uncached * 0.40 + 64 cached * 0.10 + 31 * 1.60 = 68.8 → 69
        ("tool_calls_n2", Outcome.SETTLED, None, UsageSource.REPORTED, 69),
    ],
)
def test_examples(name, outcome, reason, source, charge) -> None:
    result = replay(name)
    assert (result.outcome, result.reason, result.usage_source, result.charge_micros) == (
        outcome,
        reason,
        source,
        charge,
    )
    assert result.exposure_micros is not None and result.exposure_micros > 0


def test_estimated_usage_is_charged_at_the_estimate() -> None:
    result = replay("passthrough")
    assert result.usage_source is UsageSource.ESTIMATED
    assert result.charge_micros == result.exposure_micros


def test_unpriced_model_is_flagged_never_zero() -> None:
    result = replay("unpriced")
    assert result.charge_micros is None and result.exposure_micros is None
    assert "unpriced" in result.anomalies
    assert result.to_json()["charge_micros"] is None


def test_n2_tool_calls_assemble_both_choices() -> None:
    result = replay("tool_calls_n2")
    first, second = result.choices
    assert [c.name for c in first.tool_calls] == ["get_weather", "get_time"]
    assert first.tool_calls[0].arguments == '{"city": "Paris"}'
    assert second.content == "I will check the weather."


def test_idempotency_key_on_a_stream_is_an_anomaly() -> None:
    meta = parse_request((EXAMPLES / "settled.request.json").read_bytes())
    data = orjson.loads((EXAMPLES / "settled.request.json").read_bytes())
    meta = request_from_dict({**data, "idempotency_key": "k1"})
    result = reconcile_stream(meta, (EXAMPLES / "settled.sse").read_bytes(), BOOK)
    assert "idempotency_key_on_stream" in result.anomalies


def test_success_status_with_garbage_body_is_input_error() -> None:
    meta = parse_request((EXAMPLES / "non_streamed.request.json").read_bytes())
    with pytest.raises(InputError, match="not JSON"):
        reconcile_response(meta, 200, b"<html>", BOOK)
    assert reconcile_response(meta, 502, b"<html>", BOOK).outcome is Outcome.VOID


MODELS = [
    "gpt-4o",
    "gpt-4o-mini",
    "gpt-4.1",
    "o3",
    "o4-mini",
    "gpt-4",
    "gpt-3.5-turbo",
    "llama-3.1-8b",
]


@settings(max_examples=150, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    prompt=st.integers(0, 200_000),
    completion=st.integers(0, 50_000),
    cached_share=st.integers(0, 100),
    reasoning_share=st.integers(0, 100),
    day=st.integers(0, 900),
)
def test_streamed_and_non_streamed_cost_the_same(
    model, prompt, completion, cached_share, reasoning_share, day
) -> None:
    created = datetime(2025, 1, 1, tzinfo=UTC) + timedelta(days=day)
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": prompt * cached_share // 100},
        "completion_tokens_details": {"reasoning_tokens": completion * reasoning_share // 100},
    }
    base = {
        "account_id": "a",
        "model": model,
        "reserved_micros": 0,
        "created_at": created.isoformat(),
        "messages": [{"role": "user", "content": "same prompt"}],
        "temperature": 0,
    }
    chunk = {"id": "c", "object": "chat.completion.chunk", "model": model}
    frames = [
        {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok"}}]},
        {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**chunk, "choices": [], "usage": usage},
    ]
    sse = b"".join(b"data: " + orjson.dumps(f) + b"\n\n" for f in frames) + b"data: [DONE]\n\n"
    body = {
        "id": "c",
        "object": "chat.completion",
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
        "usage": usage,
    }
    streamed = reconcile_stream(
        request_from_dict({**base, "request_id": "s", "stream": True}), sse, BOOK
    )
    plain = reconcile_response(
        request_from_dict({**base, "request_id": "p", "stream": False}),
        200,
        orjson.dumps(body),
        BOOK,
    )
    assert streamed.outcome is plain.outcome
    assert streamed.charge_micros == plain.charge_micros
    assert type(streamed.charge_micros) is type(plain.charge_micros)


ZERO_COMPLETION = {"prompt_tokens": 11, "completion_tokens": 0, "total_tokens": 11}


def body_with(message: dict, finish: str, usage: dict) -> dict:
    return {
        "id": "chatcmpl-z",
        "object": "chat.completion",
        "model": "gpt-4o-2024-08-06",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    }


def meta_for(rid: str, stream: bool):
    return request_from_dict(
        {
            "request_id": rid,
            "account_id": "acct_z",
            "model": "gpt-4o-2024-08-06",
            "stream": stream,
            "include_usage": True,
            "reserved_micros": 5000,
            "created_at": "2026-11-30T09:00:00Z",
            "messages": [{"role": "user", "content": "Say hello."}],
        }
    )


@pytest.mark.parametrize(
    "message",
    [
        {"role": "assistant", "content": None},  # max_tokens: 0, OpenAI answers length and nothing
        {"role": "assistant", "content": ""},
    ],
)
def test_a_zero_completion_without_output_settles_at_the_prompt(message: dict) -> None:
    """A legitimate zero: no output came, so 0 completion tokens is what the call cost (11 prompt
    tokens * 2.50 = 27.5 → 28), streamed or not."""
    plain = reconcile_response(
        meta_for("z-plain", False), 200, body_with(message, "length", ZERO_COMPLETION), BOOK
    )
    chunk = {"id": "chatcmpl-z", "object": "chat.completion.chunk", "model": "gpt-4o-2024-08-06"}
    events = [
        {**chunk, "choices": [{"index": 0, "delta": message, "finish_reason": None}]},
        {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]},
        {**chunk, "choices": [], "usage": ZERO_COMPLETION},
    ]
    sse = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    streamed = reconcile_stream(meta_for("z-stream", True), sse, BOOK)
    for result in (plain, streamed):
        assert (result.outcome, result.usage_source, result.charge_micros) == (
            Outcome.SETTLED,
            UsageSource.REPORTED,
            28,
        )


OUTPUTS = st.one_of(
    st.builds(lambda t: {"content": t}, st.text(min_size=1, max_size=20)),
    st.builds(lambda t: {"refusal": t}, st.text(min_size=1, max_size=20)),
    st.builds(
        lambda name: {
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": name, "arguments": "{}"}}
            ]
        },
        st.from_regex(r"[a-z_]{1,12}", fullmatch=True),
    ),
    st.builds(
        lambda name: {"function_call": {"name": name, "arguments": "{}"}},
        st.from_regex(r"[a-z_]{1,12}", fullmatch=True),
    ),
)


@settings(max_examples=60, deadline=None)
@given(
    output=OUTPUTS,
    finish=st.sampled_from(["stop", "length", "tool_calls", "function_call", "content_filter"]),
    prompt=st.integers(0, 5000),
)
def test_output_counted_as_zero_completion_tokens_is_never_settled(
    output: dict, finish: str, prompt: int
) -> None:
    usage = {"prompt_tokens": prompt, "completion_tokens": 0, "total_tokens": prompt}
    message = {"role": "assistant", "content": None, **output}
    result = reconcile_response(
        meta_for("z-out", False), 200, body_with(message, finish, usage), BOOK
    )
    assert (result.outcome, result.reason) == (Outcome.UNSETTLED, Reason.IMPLAUSIBLE_USAGE)
    assert result.charge_micros is None
    assert result.exposure_micros is not None


@pytest.mark.parametrize(
    "encode",
    [
        pytest.param(lambda text: b"\xef\xbb\xbf" + text.encode(), id="utf-8 byte order mark"),
        pytest.param(lambda text: text.encode("utf-16"), id="utf-16"),
        pytest.param(lambda text: text.encode("utf-32-le"), id="utf-32"),
        pytest.param(lambda text: text.replace("there", "\\ud800").encode(), id="lone surrogate"),
    ],
)
def test_a_response_body_only_pythons_json_reads_is_billed(encode) -> None:
    """Issue 35, leak 5: the gateway served this body to a client that reads it (Python's json);
    orjson refuses it, and the call was a dead letter. It settles at its reported usage."""
    import json
    from datetime import UTC, datetime

    from worker.core.money import Micros
    from worker.core.prices import load_price_book
    from worker.core.reconcile import reconcile_response
    from worker.core.request import RequestMeta
    from worker.core.result import Outcome

    book = load_price_book()
    meta = RequestMeta("r", "a", "gpt-4o", False, True, Micros(1000),
                       datetime(2026, 11, 30, tzinfo=UTC))  # fmt: skip
    text = json.dumps({
        "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello there"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    })  # fmt: skip
    plain = reconcile_response(meta, 200, text.encode(), book)
    odd = reconcile_response(meta, 200, encode(text), book)
    assert (odd.outcome, odd.charge_micros) == (Outcome.SETTLED, plain.charge_micros)
    assert odd.usage == plain.usage


def test_an_unpriced_component_is_exposed_at_the_priced_parts_else_the_estimate() -> None:
    """The test book of tests/providers (gpt-4o: input 2.50, output 10.00 per 1M, no audio
    price), so the exposure is the arithmetic below."""
    from providers.shapes import AT
    from providers.shapes import BOOK as PROVIDER_BOOK

    meta = request_from_dict(
        {
            "request_id": "unpriced-part",
            "account_id": "a",
            "model": "gpt-4o",
            "stream": False,
            "reserved_micros": 0,
            "created_at": AT.isoformat(),
            "messages": [{"role": "user", "content": "Hello"}],
        }
    )
    usage = {"prompt_tokens": 100, "completion_tokens": 10, "num_search_queries": 2}
    body = {
        "id": "chatcmpl-u",
        "object": "chat.completion",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}
        ],
        "usage": usage,
    }
    result = reconcile_response(meta, 200, body, PROVIDER_BOOK)
    assert (result.outcome, result.reason) == (Outcome.UNSETTLED, Reason.UNPRICED_COMPONENT)
    # 100 * 2.50 + 10 * 10.00 = 350: the searches left out, a lower bound
    assert (result.charge_micros, result.exposure_micros) == (None, 350)
    # audio in, which the book cannot price either: the estimate's price stands
    usage["prompt_tokens_details"] = {"audio_tokens": 20}
    result = reconcile_response(meta, 200, body, PROVIDER_BOOK)
    assert result.reason is Reason.UNPRICED_COMPONENT
    estimate = result.estimate.as_usage()
    assert result.exposure_micros == PROVIDER_BOOK.charge("gpt-4o", estimate, AT)
    assert result.exposure_micros is not None and result.exposure_micros > 0
