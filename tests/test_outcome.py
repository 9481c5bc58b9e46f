"""The normative outcome rules, one shape at a time."""

import orjson
import pytest

from worker.core.assembly import assemble_response, assemble_stream
from worker.core.outcome import decide_response, decide_stream
from worker.core.result import Outcome, Reason, UsageSource


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


def decide(*frames: bytes, include_usage: bool = True):
    return decide_stream(assemble_stream(list(frames)), include_usage=include_usage)


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
    assert decide(*frames).reason is Reason.INCOMPLETE
    assert decide(*frames, delta(1, finish="stop")).outcome is Outcome.SETTLED


def test_a_gap_in_the_choices_is_incomplete() -> None:
    frames = [delta(0, finish="stop"), delta(2, finish="stop"), USAGE]
    assert decide(*frames).reason is Reason.INCOMPLETE


def test_insufficient_system_resource_is_an_error_finish() -> None:
    # DeepSeek's interrupted generation (its finish reasons: stop, length, content_filter,
    # tool_calls, insufficient_system_resource), with a usage block: never billed as clean.
    d = decide(ROLE, TEXT, delta(finish="insufficient_system_resource"), USAGE, DONE)
    assert (d.outcome, d.reason) == (Outcome.UNSETTLED, Reason.ERROR_FINISH)
    body = {
        **OK_BODY,
        "choices": [{**OK_BODY["choices"][0], "finish_reason": "insufficient_system_resource"}],
    }
    assert _response(200, body).reason is Reason.ERROR_FINISH


def test_a_provider_ignoring_n_gets_the_same_outcome_streamed_and_not() -> None:
    # n=2 requested, one choice came, finished, with usage: both paths settle (the reconciler adds
    # the n_ignored anomaly; tests/test_reconcile.py).
    assert decide(ROLE, TEXT, STOP, USAGE, DONE).outcome is Outcome.SETTLED
    assert _response(200, OK_BODY).outcome is Outcome.SETTLED


@pytest.mark.parametrize(
    ("block", "reason"),
    [
        ({"prompt_tokens": 5}, Reason.IMPLAUSIBLE_USAGE),
        ({"prompt_tokens": -5, "completion_tokens": 1}, Reason.IMPLAUSIBLE_USAGE),
        ({"prompt_tokens": "5", "completion_tokens": 1}, Reason.IMPLAUSIBLE_USAGE),
        ({"prompt_tokens": 5.5, "completion_tokens": 1}, Reason.IMPLAUSIBLE_USAGE),
        (
            {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 9},
            Reason.INCONSISTENT_USAGE,
        ),
    ],
)
def test_a_block_that_cannot_be_billed_is_never_estimated(block: dict, reason: Reason) -> None:
    frames = (ROLE, TEXT, STOP, chunk(choices=[], usage=block), DONE)
    for include_usage in (True, False):
        assert decide(*frames, include_usage=include_usage).reason is reason
    assert _response(200, {**OK_BODY, "usage": block}).reason is reason


def test_groq_usage_is_billed_even_when_usage_was_not_asked_for() -> None:
    # Groq puts usage in x_groq.usage on the final chunk (vercel/ai#1651): a reported block.
    groq = chunk(
        choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}],
        x_groq={
            "id": "req_1",
            "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
        },
    )
    d = decide(ROLE, TEXT, groq, DONE, include_usage=False)
    assert (d.outcome, d.usage_source) == (Outcome.SETTLED, UsageSource.REPORTED)


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


def test_a_usage_field_without_a_price_is_unsettled_streamed_and_not() -> None:
    """Perplexity's search queries (tests/fixtures/providers/perplexity): a count the book has no
    price for. The call is never settled without it, nor at the estimate; an error still wins."""
    block = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6, "num_search_queries": 1}
    frames = (ROLE, TEXT, STOP, chunk(choices=[], usage=block), DONE)
    for include_usage in (True, False):
        d = decide(*frames, include_usage=include_usage)
        assert (d.outcome, d.reason, d.usage_source) == (
            Outcome.UNSETTLED,
            Reason.UNPRICED_COMPONENT,
            None,
        )
    assert _response(200, {**OK_BODY, "usage": block}).reason is Reason.UNPRICED_COMPONENT
    errored = decide(ROLE, TEXT, delta(finish="error"), chunk(choices=[], usage=block), DONE)
    assert errored.reason is Reason.ERROR_FINISH
    assert _response(500, {**OK_BODY, "usage": block}).reason is Reason.ERROR_FINISH
