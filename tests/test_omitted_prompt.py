"""Where usage is absent, the estimate covers the whole request as sent, even when the gateway cut
the request entry to its budget (docs/gateway.md, *The request entry*), and says so when it cannot.

The oracle counts an agent transcript apart from ``worker.core.estimate``: tiktoken on every string
the model reads, plus the cookbook's constant tokens per message and per reply, for a transcript of
plain string contents and tool calls (no tools, names or media, where the cookbook's rules are
just that).
"""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest
import tiktoken
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worker.core.anomalies import AnomalyKind, classify
from worker.core.errors import RequestMetaError
from worker.core.estimate import estimate_prompt
from worker.core.prices import load_price_book
from worker.core.reconcile import reconcile_stream
from worker.core.request import request_from_dict
from worker.core.result import Outcome, Reason, UsageSource
from worker.core.vocab import load_encoding
from worker.gateway.request_budget import entry_body

BOOK = load_price_book()
MODEL = "gpt-4o-mini"
STREAM = (
    b'data: {"id":"c","object":"chat.completion.chunk","model":"gpt-4o-mini","choices":'
    b'[{"index":0,"delta":{"role":"assistant","content":"Done."},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


def oracle_prompt(messages: list[dict]) -> int:
    """The cookbook's count, written from its text: 3 per message, each string's tokens, the
    function name and arguments of each tool call, 3 for the reply's primer."""
    encoding: tiktoken.Encoding = load_encoding("o200k_base")  # gpt-4o-mini's
    total = 3
    for message in messages:
        total += 3
        for key, value in message.items():
            if isinstance(value, str):
                total += len(encoding.encode_ordinary(value))
            elif key == "tool_calls":
                for call in value:
                    function = call["function"]
                    total += len(encoding.encode_ordinary(function["name"]))
                    total += len(encoding.encode_ordinary(function["arguments"]))
    return total


def transcript(turns: int, words: int, seed: int) -> list[dict]:
    """An agent's transcript: a task, then turns of a tool call with long arguments, the tool's
    long answer and the assistant's note."""
    vocabulary = ["alpha", "beta", "gamma", "delta", "kernel", "thread", "42", "é", "日本"]

    def text(n: int, salt: int) -> str:
        return " ".join(vocabulary[(seed + salt + i * 7) % len(vocabulary)] for i in range(n))

    messages: list[dict] = [{"role": "user", "content": "Fix the build. " + text(words, 1)}]
    for turn in range(turns):
        call_id = f"call_{turn}"
        arguments = orjson.dumps({"path": f"src/{turn}.py", "patch": text(words, turn)}).decode()
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "apply_patch", "arguments": arguments},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": text(words, turn + 3)})
    return messages


def entry(messages: list[dict]) -> dict:
    return {
        "request_id": "req-omitted",
        "account_id": "acct",
        "model": MODEL,
        "stream": True,
        "include_usage": False,  # the client asked for none, and none came: estimated
        "reserved_micros": 0,
        "created_at": "2026-12-01T00:00:00Z",
        "messages": messages,
        "tools": [],
    }


def settle(published: bytes):
    return reconcile_stream(request_from_dict(orjson.loads(published)), STREAM, BOOK)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    turns=st.integers(1, 12),
    words=st.integers(50, 400),
    seed=st.integers(0, 100),
    share=st.sampled_from([0.9, 0.5, 0.2, 0.02]),
)
def test_a_cut_entry_is_estimated_at_the_whole_prompt(
    turns: int, words: int, seed: int, share: float
) -> None:
    messages = transcript(turns, words, seed)
    whole = orjson.dumps(entry(messages))
    budget = max(600, int(len(whole) * share))  # small: the cuts, even to no messages at all
    published = entry_body(entry(messages), budget)
    assert len(published) <= budget
    result = settle(published)
    assert (result.outcome, result.usage_source) == (Outcome.SETTLED, UsageSource.ESTIMATED)
    assert result.estimate.prompt_tokens == oracle_prompt(messages)
    assert result.usage is None and "prompt_uncounted" not in result.anomalies


def test_the_measured_agent_transcript_is_billed_whole() -> None:
    """The issue's case: a transcript of ~30,000 prompt tokens cut to the entry's budget, once
    billed at 3 prompt tokens."""
    messages = transcript(100, 120, 0)
    whole = oracle_prompt(messages)
    assert whole > 20_000
    published = entry_body(entry(messages), 2_000)
    assert orjson.loads(published)["omitted_messages"] is True
    result = settle(published)
    assert result.estimate.prompt_tokens == whole
    price = BOOK.price_for(MODEL, datetime(2026, 12, 1, tzinfo=UTC))
    assert price is not None
    assert result.charge_micros is not None
    assert result.charge_micros >= price.input * whole  # the prompt is charged (micros)


def test_cut_tool_arguments_are_scaled_without_the_gateways_count() -> None:
    """An entry cut by a gateway that publishes no ``prompt_estimate``: the worker scales each cut
    string, tool call arguments too, from what was kept (uniform text: close to the whole)."""
    messages = transcript(6, 2_000, 3)
    published = orjson.loads(entry_body(entry(messages), 40_000))
    assert "omitted_messages" not in published
    assert any(
        "omitted_chars" in call["function"]
        for m in published["messages"]
        for call in m.get("tool_calls") or ()
    )
    del published["prompt_estimate"]
    result = settle(orjson.dumps(published))
    whole = oracle_prompt(messages)
    assert abs(result.estimate.prompt_tokens - whole) <= whole * 0.05
    assert result.estimate.approximate


def test_a_prompt_left_out_uncounted_is_never_settled_silently() -> None:
    """``omitted_messages`` with no count (LiteLLM's entry for a request it could not read): no
    usage, no prompt: unsettled ``missing_usage``, the anomaly ``prompt_uncounted`` saying why."""
    bare = {**entry([]), "omitted_messages": True}
    result = settle(orjson.dumps(bare))
    assert (result.outcome, result.reason) == (Outcome.UNSETTLED, Reason.MISSING_USAGE)
    assert "prompt_uncounted" in result.anomalies
    assert AnomalyKind.PROMPT_UNCOUNTED in classify(result)
    # With the upstream's usage, the call settles at it; the estimate's gap is still said.
    usage = (
        b'data: {"id":"c","object":"chat.completion.chunk","model":"gpt-4o-mini","choices":[],'
        b'"usage":{"prompt_tokens":30007,"completion_tokens":2,"total_tokens":30009}}\n\n'
    )
    meta = request_from_dict({**bare, "include_usage": True})
    reported = reconcile_stream(
        meta, STREAM.replace(b"data: [DONE]", usage + b"data: [DONE]"), BOOK
    )
    assert (reported.outcome, reported.usage_source) == (Outcome.SETTLED, UsageSource.REPORTED)
    assert reported.usage is not None and reported.usage.prompt_tokens == 30007
    assert "prompt_uncounted" in reported.anomalies


def test_cut_tool_definitions_are_scaled_without_the_gateways_count() -> None:
    """A tool whose long description was cut: scaled up from what was kept, flagged approximate.
    The reference is the estimate of the uncut tools (the property checked is the scaling)."""
    description = " ".join(["Reads the file at the path and returns its lines."] * 3_000)
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"read_{i}",
                "description": description,
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            },
        }
        for i in range(4)
    ]
    whole = estimate_prompt(MODEL, [{"role": "user", "content": "go"}], tools)
    cut = orjson.loads(
        entry_body({**entry([{"role": "user", "content": "go"}]), "tools": tools}, 60_000)
    )
    assert all("omitted_chars" in tool["function"] for tool in cut["tools"])
    del cut["prompt_estimate"]
    result = settle(orjson.dumps(cut))
    assert abs(result.estimate.prompt_tokens - whole) <= whole * 0.05
    assert result.estimate.approximate
    assert settle(orjson.dumps({**cut, "prompt_estimate": whole})).estimate.prompt_tokens == whole


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("prompt_estimate", -1),
        ("prompt_estimate", 10**9 + 1),
        ("prompt_estimate", "30007"),
        ("prompt_estimate", True),
        ("omitted_messages", "yes"),
        ("omitted_messages", 1),
    ],
)
def test_the_counts_of_what_was_cut_are_checked_at_the_boundary(field: str, value: object) -> None:
    with pytest.raises(RequestMetaError, match=field):
        request_from_dict({**entry([]), field: value})
