"""The endpoint readers (``worker.core.readers``): every endpoint's stream and body, from the
recordings in tests/fixtures/endpoints (each naming its source), read into the one ``Assembled``
the outcome rules and the reconciler use; streamed and non-streamed twins charged the same."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.core.errors import RequestMetaError
from worker.core.prices import load_price_book
from worker.core.readers import ENDPOINTS, read_body, read_stream
from worker.core.reconcile import reconcile_response, reconcile_stream
from worker.core.request import request_from_dict
from worker.core.result import Outcome, Reason, UsageSource

RECORDINGS = Path(__file__).parent / "fixtures" / "endpoints"
BOOK = load_price_book()
AT = "2026-11-01T12:00:00Z"


def recording(name: str) -> dict[str, Any]:
    return json.loads((RECORDINGS / f"{name}.json").read_text())


def sse(events: list[Any]) -> list[bytes]:
    """Each event as the gateway records it: one SSE event per record."""
    out = []
    for event in events:
        if isinstance(event, dict) and event.keys() == {"event", "data"}:
            out.append(f"event: {event['event']}\ndata: {json.dumps(event['data'])}\n\n".encode())
        else:
            data = event if isinstance(event, str) else json.dumps(event)
            out.append(f"data: {data}\n\n".encode())
    return out


def meta(endpoint: str, model: str, *, stream: bool, **more: Any):
    return request_from_dict({
        "request_id": f"req-{endpoint}-{stream:d}", "account_id": "acct", "model": model,
        "stream": stream, "include_usage": True, "reserved_micros": 0, "created_at": AT,
        "endpoint": endpoint, **more,
    })  # fmt: skip


STREAMED = ["responses_text", "completions_text", "messages_text"]


@pytest.mark.parametrize("name", STREAMED)
def test_a_recordings_stream_and_body_settle_at_the_same_charge(name: str) -> None:
    doc = recording(name)
    model = doc["request"]["model"]
    streamed = reconcile_stream(meta(doc["endpoint"], model, stream=True), sse(doc["events"]), BOOK)
    plain = reconcile_response(meta(doc["endpoint"], model, stream=False), 200, doc["body"], BOOK)
    for result in (streamed, plain):
        assert (result.outcome, result.usage_source) == (Outcome.SETTLED, UsageSource.REPORTED)
        assert result.charge_micros is not None and result.charge_micros > 0
    assert (streamed.usage, streamed.charge_micros) == (plain.usage, plain.charge_micros)


def test_each_reader_reads_its_usage_as_the_provider_documents_it() -> None:
    # Responses: input 36 (cached 0) + output 87 (reasoning 0) = 123, verbatim from the reference
    r = read_body("responses", recording("responses_text")["body"])
    assert r.usage_raw["input_tokens"] == 36 and r.choices[0].finish_reason == "stop"
    assert r.choices[0].content.startswith("In a peaceful grove")
    # Anthropic: message_start's input 25, message_delta's cumulative output 15 (not 1, not 16)
    m = read_stream("messages", sse(recording("messages_text")["events"]))
    assert (m.usage_raw["input_tokens"], m.usage_raw["output_tokens"]) == (25, 15)
    assert (m.choices[0].content, m.choices[0].finish_reason, m.saw_done) == (
        "Hello!",
        "end_turn",
        True,
    )
    # Completions: text fragments joined, finish length, usage from the choices: [] chunk
    c = read_stream("completions", sse(recording("completions_text")["events"]))
    assert c.choices[0].content == "\n\nThis is indeed a test" and c.saw_done
    assert c.usage_raw == {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}
    # Embeddings: one finished answer, no output tokens
    e = read_body("embeddings", recording("embeddings_array")["body"])
    assert [ch.finish_reason for ch in e.choices] == ["stop"]
    assert e.usage_raw["completion_tokens"] == 0


def test_a_responses_stream_cut_before_its_final_event_is_incomplete() -> None:
    events = sse(recording("responses_text")["events"])[:-1]
    result = reconcile_stream(meta("responses", "gpt-4o-mini", stream=True), events, BOOK)
    assert (result.outcome, result.reason) == (Outcome.UNSETTLED, Reason.INCOMPLETE)
    assert result.exposure_micros is not None and result.exposure_micros > 0


def test_a_failed_response_with_usage_is_an_error_finish_exposed_at_that_usage() -> None:
    body = {**recording("responses_text")["body"], "status": "failed",
            "error": {"code": "server_error", "message": "The model failed."}}  # fmt: skip
    result = reconcile_response(meta("responses", "gpt-4o-mini", stream=False), 200, body, BOOK)
    assert (result.outcome, result.reason) == (Outcome.UNSETTLED, Reason.ERROR_FINISH)
    assert "usage_before_error" in result.anomalies


def test_an_incomplete_response_is_billed_as_a_cut_answer() -> None:
    body = {**recording("responses_text")["body"], "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"}}  # fmt: skip
    result = reconcile_response(meta("responses", "gpt-4o-mini", stream=False), 200, body, BOOK)
    assert (result.outcome, result.usage_source) == (Outcome.SETTLED, UsageSource.REPORTED)


def test_a_per_call_tool_the_book_cannot_price_keeps_the_call_unsettled() -> None:
    body = recording("responses_text")["body"]
    body = {**body, "output": [{"type": "web_search_call", "id": "ws_1", "status": "completed"},
                               *body["output"]]}  # fmt: skip
    result = reconcile_response(meta("responses", "gpt-4o-mini", stream=False), 200, body, BOOK)
    assert (result.outcome, result.reason) == (Outcome.UNSETTLED, Reason.UNPRICED_COMPONENT)


def test_an_anthropic_error_event_mid_stream_is_an_error_finish() -> None:
    events = [
        *recording("messages_text")["events"][:4],
        {"event": "error", "data": {"type": "error",
                                    "error": {"type": "overloaded_error", "message": "Overloaded"}}},
    ]  # fmt: skip
    result = reconcile_stream(meta("messages", "claude-sonnet-4-5", stream=True), sse(events), BOOK)
    assert (result.outcome, result.reason) == (Outcome.UNSETTLED, Reason.ERROR_FINISH)


def test_an_embeddings_total_that_is_not_its_prompt_is_inconsistent() -> None:
    body = {**recording("embeddings_one")["body"], "usage": {"prompt_tokens": 8, "total_tokens": 9}}
    result = reconcile_response(
        meta("embeddings", "text-embedding-3-small", stream=False), 200, body, BOOK
    )
    assert (result.outcome, result.reason) == (Outcome.UNSETTLED, Reason.INCONSISTENT_USAGE)


def test_an_unknown_endpoint_is_refused_at_the_boundary() -> None:
    with pytest.raises(RequestMetaError, match="endpoint"):
        meta("speech", "tts-1", stream=False)
    assert meta("chat_completions", "gpt-4o", stream=False).endpoint == "chat_completions"


# -- properties -----------------------------------------------------------------------------------

text = st.text(min_size=1, max_size=40)
counts = st.integers(min_value=0, max_value=50_000)


@settings(max_examples=150, deadline=None)
@given(pieces=st.lists(text, min_size=1, max_size=8), prompt=counts, output=counts,
       cached=st.integers(0, 100))  # fmt: skip
def test_a_responses_stream_and_its_body_are_charged_the_same(
    pieces: list[str], prompt: int, output: int, cached: int
) -> None:
    cached = min(cached, prompt)
    usage = {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached},
             "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": prompt + output}  # fmt: skip
    item = {"type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": "".join(pieces)}]}  # fmt: skip
    body = {"id": "resp_1", "object": "response", "status": "completed", "model": "gpt-4o-mini",
            "output": [item], "usage": usage}  # fmt: skip
    events = [
        {
            "event": "response.created",
            "data": {
                "type": "response.created",
                "response": {**body, "status": "in_progress", "output": [], "usage": None},
            },
        }
    ]
    events += [
        {
            "event": "response.output_text.delta",
            "data": {"type": "response.output_text.delta", "delta": p},
        }
        for p in pieces
    ]
    events += [
        {"event": "response.completed", "data": {"type": "response.completed", "response": body}}
    ]
    streamed = reconcile_stream(meta("responses", "gpt-4o-mini", stream=True), sse(events), BOOK)
    plain = reconcile_response(meta("responses", "gpt-4o-mini", stream=False), 200, body, BOOK)
    twin = (plain.outcome, plain.reason, plain.usage, plain.charge_micros, plain.exposure_micros)
    assert (streamed.outcome, streamed.reason, streamed.usage, streamed.charge_micros,
            streamed.exposure_micros) == twin  # fmt: skip
    # an answer with text and 0 output tokens is implausible usage, whichever way it came
    assert (plain.outcome is Outcome.SETTLED) == (output > 0)


@settings(max_examples=150, deadline=None)
@given(pieces=st.lists(text, min_size=1, max_size=8), prompt=counts, output=counts,
       read=counts, write=counts)  # fmt: skip
def test_an_anthropic_stream_and_its_body_are_charged_the_same(
    pieces: list[str], prompt: int, output: int, read: int, write: int
) -> None:
    usage = {"input_tokens": prompt, "cache_read_input_tokens": read,
             "cache_creation_input_tokens": write, "output_tokens": output}  # fmt: skip
    body = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "".join(pieces)}], "stop_reason": "end_turn",
            "usage": usage}  # fmt: skip
    start = {"type": "message_start", "message": {**body, "content": [], "stop_reason": None,
             "usage": {**usage, "output_tokens": 1}}}  # fmt: skip
    events = [{"event": "message_start", "data": start},
              {"event": "content_block_start", "data": {"type": "content_block_start", "index": 0,
               "content_block": {"type": "text", "text": ""}}}]  # fmt: skip
    events += [{"event": "content_block_delta", "data": {"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": p}}} for p in pieces]  # fmt: skip
    events += [{"event": "message_delta", "data": {"type": "message_delta",
                "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": output}}},
               {"event": "message_stop", "data": {"type": "message_stop"}}]  # fmt: skip
    streamed = reconcile_stream(
        meta("messages", "claude-sonnet-4-5", stream=True), sse(events), BOOK
    )
    plain = reconcile_response(meta("messages", "claude-sonnet-4-5", stream=False), 200, body, BOOK)
    twin = (plain.outcome, plain.reason, plain.usage, plain.charge_micros, plain.exposure_micros)
    assert (streamed.outcome, streamed.reason, streamed.usage, streamed.charge_micros,
            streamed.exposure_micros) == twin  # fmt: skip
    # an answer with text and 0 output tokens is implausible usage, whichever way it came
    assert (plain.outcome is Outcome.SETTLED) == (output > 0)
    if output > 0:  # Anthropic's input_tokens leaves the cache reads and writes out
        assert streamed.usage.prompt_tokens == prompt + read + write


@settings(max_examples=300, deadline=None)
@given(endpoint=st.sampled_from(ENDPOINTS),
       records=st.lists(st.one_of(st.binary(max_size=80), st.text(max_size=80)), max_size=6),
       body=st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                         lambda inner: st.lists(inner, max_size=3)
                         | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                         max_leaves=12))  # fmt: skip
def test_no_reader_raises_on_any_input(endpoint: str, records: list[Any], body: Any) -> None:
    read_stream(endpoint, records)
    read_body(endpoint, body)
