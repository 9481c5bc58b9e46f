"""The normative outcome rules, one shape at a time."""

import orjson
import pytest

from worker.assembly import assemble_response, assemble_stream
from worker.outcome import decide_response, decide_stream
from worker.result import Outcome, Reason, UsageSource


def chunk(**fields: object) -> bytes:
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-4o"}
    return b"data: " + orjson.dumps({**base, **fields}) + b"\n\n"


def delta(index: int = 0, finish: str | None = None, **d: object) -> bytes:
    return chunk(choices=[{"index": index, "delta": d, "finish_reason": finish}])


ROLE = delta(role="assistant", content="")
TEXT = delta(content="Hi")
STOP = delta(finish="stop")
USAGE = chunk(choices=[], usage={"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6})
DONE = b"data: [DONE]\n\n"


def decide(*frames: bytes, n: int = 1, include_usage: bool = True):
    return decide_stream(assemble_stream(list(frames)), n=n, include_usage=include_usage)


def test_finish_and_usage_settle_reported_even_without_done() -> None:
    d = decide(ROLE, TEXT, STOP, USAGE)
    assert (d.outcome, d.reason, d.usage_source) == (Outcome.SETTLED, None, UsageSource.REPORTED)


@pytest.mark.parametrize("finish", ["length", "content_filter", "tool_calls"])
def test_other_clean_finishes_settle(finish: str) -> None:
    assert decide(ROLE, TEXT, delta(finish=finish), USAGE, DONE).outcome is Outcome.SETTLED


def test_passthrough_without_usage_is_estimated() -> None:
    d = decide(ROLE, TEXT, STOP, DONE, include_usage=False)
    assert (d.outcome, d.usage_source) == (Outcome.SETTLED, UsageSource.ESTIMATED)


def test_missing_usage_when_it_was_asked_for() -> None:
    assert decide(ROLE, TEXT, STOP, DONE).reason is Reason.MISSING_USAGE


def test_error_finish_wins_over_a_usage_block() -> None:
    d = decide(ROLE, TEXT, delta(finish="error"), USAGE, DONE)
    assert (d.outcome, d.reason) == (Outcome.UNSETTLED, Reason.ERROR_FINISH)


def test_error_object_mid_stream_is_error_finish() -> None:
    error = b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n'
    assert decide(ROLE, TEXT, error, STOP, USAGE).reason is Reason.ERROR_FINISH


@pytest.mark.parametrize("frames", [(), (ROLE, TEXT), (ROLE, TEXT, USAGE, DONE)])
def test_no_finish_is_incomplete(frames: tuple[bytes, ...]) -> None:
    assert decide(*frames).reason is Reason.INCOMPLETE


def test_every_choice_of_n_must_finish() -> None:
    frames = [
        delta(0, role="assistant"),
        delta(1, role="assistant"),
        delta(0, finish="stop"),
        USAGE,
    ]
    assert decide(*frames, n=2).reason is Reason.INCOMPLETE
    assert decide(*frames, delta(1, finish="stop"), n=2).outcome is Outcome.SETTLED


def _response(status: int, body: dict):
    return decide_response(assemble_response(body), status=status)


OK_BODY = {
    "id": "chatcmpl-2",
    "object": "chat.completion",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
}


def test_non_streamed_paths() -> None:
    assert _response(200, OK_BODY).usage_source is UsageSource.REPORTED
    no_usage = {k: v for k, v in OK_BODY.items() if k != "usage"}
    assert _response(200, no_usage).usage_source is UsageSource.ESTIMATED
    assert _response(429, {"error": {"message": "slow down"}}).outcome is Outcome.VOID
    assert _response(500, {}).outcome is Outcome.VOID
    assert _response(200, {"error": {"message": "bad"}}).outcome is Outcome.VOID
    assert _response(500, OK_BODY).reason is Reason.ERROR_FINISH
