"""Assembling completions from stream fixtures, chunk rules, malformed pieces (worker/core/assembly.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from worker.core.assembly import Assembled, StreamAssembler, assemble_response, assemble_stream
from worker.core.errors import FrameError
from worker.core.result import ToolCall
from worker.core.sse import BadFrame, Chunk, Done, iter_frames
from worker.core.usage import usage_from_block

STREAMS = Path(__file__).parent / "fixtures" / "streams"
HELLO_USAGE = {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}


def load(name: str) -> bytes:
    return (STREAMS / name).read_bytes()


def contents(result: Assembled) -> list[str | None]:
    return [choice.content for choice in result.choices]


def finishes(result: Assembled) -> list[str | None]:
    return [choice.finish_reason for choice in result.choices]


def reasons(result: Assembled) -> list[tuple[int, str]]:
    return [(error.index, error.reason) for error in result.frame_errors]


# Per fixture: the fields that matter for it (all others are checked by `test_every_fixture_...`).
FIXTURES: dict[str, dict[str, Any]] = {
    "seed_000_hello_there.sse": {"content": ["Hello there."], "usage": None, "chunks": 5},
    "seed_000_usage_only_chunk.sse": {"content": ["Hello there."], "usage": HELLO_USAGE},
    "seed_001_one.sse": {"content": ["One"], "id": "chatcmpl-…", "chunks": 3, "model": None},
    "seed_001_one_with_usage.sse": {
        "content": ["One"],
        "usage": {"prompt_tokens": 14, "completion_tokens": 9, "total_tokens": 23},
    },
    "crlf.sse": {"content": ["Hello there."], "usage": HELLO_USAGE},
    "cr.sse": {"content": ["Hello there."], "usage": HELLO_USAGE},
    "no_trailing_blank.sse": {"content": ["Hello there."], "usage": HELLO_USAGE, "done": True},
    "data_no_space.sse": {"content": ["Hello there."], "usage": HELLO_USAGE},
    "comments_openrouter.sse": {"content": ["Hello there."], "usage": HELLO_USAGE, "chunks": 6},
    "multi_data_lines.sse": {"content": ["Hello there."], "usage": HELLO_USAGE},
    "event_error.sse": {
        "content": ["Partial"],
        "finish": [None],
        "error": {"message": "upstream overloaded", "type": "server_error", "code": 502},
        "done": False,
    },
    "event_error_text.sse": {
        "content": ["Partial"],
        "finish": [None],
        "error": {"message": "upstream connection reset"},
        "done": False,
    },
    "refusal.sse": {"content": [None], "refusal": ["I'm sorry, I can't help with that."]},
    "tool_calls_parallel.sse": {
        "content": [None],
        "finish": ["tool_calls"],
        "tool_calls": [
            ToolCall(0, "call_abc", "function", "get_weather", '{"location": "Paris"}'),
            ToolCall(1, "call_def", "function", "get_time", '{"tz": "Europe/Paris"}'),
        ],
    },
    "tool_calls_whole_by_index.sse": {
        "content": [None],
        "finish": ["tool_calls"],
        "tool_calls": [
            ToolCall(0, "call_1", "function", "get_weather", '{"location": "Paris"}'),
            ToolCall(1, "call_2", "function", "get_weather", '{"location": "Rome"}'),
        ],
    },
    "tool_calls_whole_index0.sse": {
        "content": [None],
        "finish": ["tool_calls"],
        "tool_calls": [
            ToolCall(0, "call_1", "function", "get_weather", '{"location": "Paris"}'),
            ToolCall(1, "call_2", "function", "get_weather", '{"location": "Rome"}'),
        ],
    },
    "n2_interleaved.sse": {
        "content": ["Red apples.", "Green pears today."],
        "finish": ["length", "stop"],
        "chunks": 12,
    },
    "logprobs.sse": {"content": ["Yes, sure"]},
    "reasoning_content.sse": {"content": ["4."], "reasoning": ["Two plus two is four."]},
    "mistral_usage_on_finish.sse": {
        "content": ["Bonjour!"],
        "usage": {"prompt_tokens": 8, "total_tokens": 12, "completion_tokens": 4},
        "fingerprint": None,
    },
    "vllm_continuous_usage.sse": {
        "content": ["One, two"],
        "usage": {"prompt_tokens": 14, "total_tokens": 17, "completion_tokens": 3},
    },
    "azure_prompt_filter.sse": {
        "content": ["Hi!"],
        "id": "chatcmpl-AZ1",
        "mixed": 0,
        "chunks": 6,
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
    },
    "error_finish.sse": {"content": ["Once upon a"], "finish": ["error"], "usage": None},
    "error_object_midstream.sse": {
        "content": ["Once upon a"],
        "finish": [None],
        "error": {
            "message": "The server had an error while processing your request.",
            "type": "server_error",
            "code": None,
        },
        "done": False,
    },
    "dropped.sse": {"content": ["Once upon a time"], "finish": [None], "done": False},
    "mixed_ids.sse": {"content": ["Hello there."], "id": "chatcmpl-A7", "mixed": 2},
    "usage_details.sse": {"content": ["Hello there."]},
    "finish_length.sse": {"content": ["The history of"], "finish": ["length"]},
    "finish_content_filter.sse": {"content": ["I"], "finish": ["content_filter"]},
    "missing_done.sse": {"content": ["Hello there."], "usage": HELLO_USAGE, "done": False},
    "not_json_line.sse": {"content": ["Hello there."], "errors": 1},
    "non_utf8.sse": {"content": ["Hello there."], "errors": 1},
    "seed_000_verbatim.sse": {"content": [], "errors": 5, "chunks": 0, "id": None},
    "function_call_legacy.sse": {"content": [None], "finish": ["function_call"]},
}


def test_every_fixture_has_expectations() -> None:
    assert sorted(p.name for p in STREAMS.glob("*.sse")) == sorted(FIXTURES)


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_fixture(name: str) -> None:
    want = FIXTURES[name]
    result = assemble_stream(load(name))
    assert contents(result) == want["content"]
    if want["content"]:
        assert [c.role for c in result.choices] == ["assistant"] * len(want["content"])
        assert finishes(result) == want.get("finish", ["stop"] * len(want["content"]))
    if "usage" in want:
        assert result.usage_raw == want["usage"]
    assert result.error == want.get("error")
    assert result.saw_done is want.get("done", True)
    assert len(result.frame_errors) == want.get("errors", 0)
    assert result.mixed_id_count == want.get("mixed", 0)
    assert result.foreign_objects == 0
    if "chunks" in want:
        assert result.chunk_count == want["chunks"]
    if "id" in want:
        assert result.completion_id == want["id"]
    if "model" in want:
        assert result.model == want["model"]
    if "fingerprint" in want:
        assert result.system_fingerprint == want["fingerprint"]
    if "refusal" in want:
        assert [c.refusal for c in result.choices] == want["refusal"]
    if "reasoning" in want:
        assert [c.reasoning_content for c in result.choices] == want["reasoning"]
    if "tool_calls" in want:
        assert result.choices[0].tool_calls == want["tool_calls"]


def test_seed_000_completion_level_fields() -> None:
    result = assemble_stream(load("seed_000_usage_only_chunk.sse"))
    assert (result.completion_id, result.model, result.created, result.system_fingerprint) == (
        "chatcmpl-A7",
        "gpt-4o-2024-08-06",
        1770000000,
        "fp_4e2b1c",
    )
    assert usage_from_block(result.usage_raw) is not None


def test_seed_000_as_displayed_is_five_bad_frames_and_a_done() -> None:
    # The article pretty-prints each chunk over several lines and elides fields with "...": as a
    # wire body that is not JSON. We pin that it is reported frame by frame, not guessed at.
    result = assemble_stream(load("seed_000_verbatim.sse"))
    assert [index for index, _ in reasons(result)] == [0, 1, 2, 3, 4]
    assert all(reason.startswith("not JSON: ") for _, reason in reasons(result))
    assert result.saw_done


def test_usage_details_survive_as_reported() -> None:
    usage = usage_from_block(assemble_stream(load("usage_details.sse")).usage_raw)
    assert usage is not None
    assert (usage.cached_tokens, usage.reasoning_tokens) == (1920, 256)


def test_logprobs_are_extended_per_chunk() -> None:
    (choice,) = assemble_stream(load("logprobs.sse")).choices
    assert [entry["token"] for entry in choice.logprobs_content] == ["Yes", ",", " sure"]
    assert choice.logprobs_refusal is None


def test_bad_frames_are_named() -> None:
    [(index, reason)] = reasons(assemble_stream(load("not_json_line.sse")))
    assert index == 2
    assert reason.startswith("not JSON: ")
    assert reasons(assemble_stream(load("non_utf8.sse"))) == [(2, "not UTF-8 at byte 65")]


# -- records -----------------------------------------------------------------------------------------


def test_records_assemble_like_one_body() -> None:
    body = load("n2_interleaved.sse")
    records = [event + b"\n\n" for event in body.split(b"\n\n") if event]
    grouped = [b"".join(records[i : i + 3]) for i in range(0, len(records), 3)]
    whole = assemble_stream(body)
    assert assemble_stream(records) == whole
    assert assemble_stream(grouped) == whole
    assert assemble_stream([r.decode() for r in grouped]) == whole


def test_frame_positions_continue_across_records() -> None:
    records = [b'data: {"choices":[]}\n\n', b"data: {oops\n\n", 'data: {"x":\n\ndata: [DONE]']
    assert [index for index, _ in reasons(assemble_stream(records))] == [1, 2]


def test_a_record_that_is_not_text_is_a_bad_frame() -> None:
    result = assemble_stream([b"data: {}\n\n", 42])  # type: ignore[list-item]
    assert reasons(result) == [(1, "record is not bytes or text (got integer)")]


def test_empty_stream() -> None:
    result = assemble_stream(b"")
    assert result == assemble_stream([])
    assert (result.choices, result.chunk_count, result.saw_done) == ([], 0, False)


# -- chunk rules -------------------------------------------------------------------------------------


def chunk(*choices: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"id": "c1", "object": "chat.completion.chunk", "choices": list(choices), **top}


def delta(index: int | None = 0, finish: str | None = None, **fields: Any) -> dict[str, Any]:
    choice: dict[str, Any] = {"delta": fields, "finish_reason": finish}
    if index is not None:
        choice["index"] = index
    return choice


def run(*objs: Any) -> Assembled:
    assembler = StreamAssembler()
    for obj in objs:
        assembler.feed_chunk(obj)
    return assembler.finish()


def test_role_is_taken_from_the_first_delta_only() -> None:
    result = run(chunk(delta(role="assistant")), chunk(delta(role="tool", content="x")))
    assert result.choices[0].role == "assistant"


def test_empty_first_fragment_makes_an_empty_string_and_null_stays_none() -> None:
    result = run(chunk(delta(content="", refusal=None)))
    assert (result.choices[0].content, result.choices[0].refusal) == ("", None)


def test_missing_choice_index_is_zero() -> None:
    result = run(chunk(delta(None, content="a")), chunk(delta(0, content="b")))
    assert contents(result) == ["ab"]


def test_finish_reason_keeps_the_last_non_null() -> None:
    result = run(chunk(delta(finish="length")), chunk(delta(finish=None)), chunk(delta(finish="")))
    assert finishes(result) == ["length"]


def test_usage_null_is_not_usage_and_the_last_block_wins() -> None:
    first = {"prompt_tokens": 5, "completion_tokens": 1}
    last = {"prompt_tokens": 5, "completion_tokens": 2}
    result = run(chunk(delta(content="a"), usage=first), chunk(usage=last), chunk(usage=None))
    assert result.usage_raw == last


def test_usage_is_read_from_a_chunk_with_malformed_choices() -> None:
    result = run(chunk(usage={"prompt_tokens": 1}, choices="nope"))
    assert result.usage_raw == {"prompt_tokens": 1}
    assert reasons(result) == [(0, "choices is not a list (got string)")]


def test_azure_filter_chunk_does_not_start_the_stream() -> None:
    azure = {"id": "", "object": "", "model": "", "created": 0, "choices": []}
    result = run(azure, chunk(delta(content="a"), model="m", created=5), azure)
    assert (result.completion_id, result.model, result.created) == ("c1", "m", 5)
    assert (result.mixed_id_count, result.foreign_objects, result.chunk_count) == (0, 0, 3)


def test_mixed_ids_are_counted_and_still_assembled() -> None:
    result = run(chunk(delta(content="a")), chunk(delta(content="b"), id="c2"))
    assert (result.completion_id, result.mixed_id_count, contents(result)) == ("c1", 1, ["ab"])


def test_foreign_objects_are_counted_and_still_assembled() -> None:
    result = run(chunk(delta(content="a"), object="chat.completion"), chunk(delta(content="b")))
    assert (result.foreign_objects, contents(result)) == (1, ["ab"])


def test_first_error_object_is_kept() -> None:
    result = run(chunk(delta(content="a")), {"error": {"code": 1}}, {"error": {"code": 2}})
    assert result.error == {"code": 1}
    assert run({"error": "overloaded"}).error == {"message": "overloaded"}
    assert run({"error": None}).error is None


def test_error_event_is_recorded_not_assembled() -> None:
    assembler = StreamAssembler()
    assembler.feed(Chunk(0, {"choices": [delta(content="x")]}, "error"))
    result = assembler.finish()
    assert (result.error, result.choices, result.chunk_count) == (
        {"choices": [delta(content="x")]},
        [],
        0,
    )


def test_legacy_function_call_is_assembled_like_the_sdk() -> None:
    (choice,) = assemble_stream(load("function_call_legacy.sse")).choices
    assert choice.function_call is not None
    assert choice.function_call.name == "get_current_weather"
    assert choice.function_call.arguments.startswith('{\n  "location": "Boston, MA"')
    assert choice.tool_calls == []


def test_frames_after_done_are_not_part_of_the_call() -> None:
    assembler = StreamAssembler()
    for frame in iter_frames(
        'data: [DONE]\n\ndata: {"choices":[{"delta":{"content":"late"}}]}\n\n'
        'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}\n\ndata: x\n\n'
    ):
        assembler.feed(frame)
    result = assembler.finish()
    assert (result.saw_done, contents(result), result.usage_raw) == (True, [], None)
    assert (result.frames_after_done, result.usage_after_done) == (3, True)
    assert result.frame_errors == []


def test_frames_after_done_take_neither_fast_path() -> None:
    # Plain content chunks of an identified completion take the bytes and compiled fast paths; after
    # [DONE] they must not, whether the frames come one per record or all in one.
    meta = {"model": "gpt-4o", "created": 1, "system_fingerprint": "fp"}
    frames = [
        b"data: " + orjson.dumps(chunk(delta(content="a"), **meta)) + b"\n\n",
        b"data: " + orjson.dumps(chunk(delta(content="b"), **meta)) + b"\n\n",
        b"data: [DONE]\n\n",
        b"data: " + orjson.dumps(chunk(delta(content="late"), **meta)) + b"\n\n",
    ]
    for records in (frames, [b"".join(frames)]):
        result = assemble_stream(records)
        assert (contents(result), result.frames_after_done) == (["ab"], 1)


def test_feed_accepts_every_frame_kind() -> None:
    assembler = StreamAssembler()
    assembler.feed(Chunk(0, chunk(delta(content="a"))))
    assembler.feed(BadFrame(FrameError(1, "not JSON: x")))
    assembler.feed(Done(2))
    result = assembler.finish()
    assert (contents(result), reasons(result), result.saw_done) == (
        ["a"],
        [(1, "not JSON: x")],
        True,
    )
    assert assembler.finish() == result


def test_finish_does_not_freeze_the_assembler() -> None:
    assembler = StreamAssembler()
    assembler.feed_chunk(chunk(delta(content="a")))
    first = assembler.finish()
    assembler.feed_chunk(chunk(delta(content="b")))
    assert contents(first) == ["a"]
    assert contents(assembler.finish()) == ["ab"]


# -- tool calls --------------------------------------------------------------------------------------


def call(index: int | None = 0, id: str | None = None, name: str | None = None, args=None):
    fragment: dict[str, Any] = {"function": {}}
    if index is not None:
        fragment["index"] = index
    if id is not None:
        fragment.update(id=id, type="function")
    if name is not None:
        fragment["function"]["name"] = name
    if args is not None:
        fragment["function"]["arguments"] = args
    return fragment


def calls(*fragment_lists: list[dict[str, Any]]) -> list[ToolCall]:
    return (
        run(*(chunk(delta(tool_calls=fragments)) for fragments in fragment_lists))
        .choices[0]
        .tool_calls
    )


def test_a_repeated_id_continues_the_same_call() -> None:
    assert calls([call(0, "a", "f", "{")], [call(0, "a", args="}")]) == [
        ToolCall(0, "a", "function", "f", "{}")
    ]


def test_an_id_arriving_late_is_kept() -> None:
    assert calls([call(0, name="f", args="{")], [call(0, "a", args="}")]) == [
        ToolCall(0, "a", "function", "f", "{}")
    ]


def test_whole_calls_without_index_are_told_apart_by_id() -> None:
    assert calls([call(None, "a", "f", "1")], [call(None, "b", "g", "2")]) == [
        ToolCall(0, "a", "function", "f", "1"),
        ToolCall(1, "b", "function", "g", "2"),
    ]


def test_several_fragments_of_one_call_in_one_chunk() -> None:
    assert calls([call(0, "a", "f", '{"x"'), call(0, args=": 1}")]) == [
        ToolCall(0, "a", "function", "f", '{"x": 1}')
    ]


def test_name_pieces_are_joined_and_repeats_ignored() -> None:
    assert (
        calls([call(0, "a", "get_")], [call(0, name="weather")], [call(0, name="get_weather")])[
            0
        ].name
        == "get_weather"
    )


def test_calls_are_ordered_by_index() -> None:
    result = calls([call(1, "b", "g", "2")], [call(0, "a", "f", "1")])
    assert [(c.index, c.id) for c in result] == [(0, "a"), (1, "b")]


# -- malformed pieces --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "reason"),
    [
        (chunk(choices={}), "choices is not a list (got object)"),
        (chunk("x"), "choices[0] is not an object (got string)"),
        (chunk(delta(-1)), "choices[0].index is not a non-negative integer (got -1)"),
        (chunk(delta(True)), "choices[0].index is not a non-negative integer (got True)"),
        (chunk({"index": 0, "delta": []}), "choices[0].delta is not an object (got list)"),
        (chunk({"index": 0, "delta": ""}), "choices[0].delta is not an object (got string)"),
        (chunk(delta(content=5)), "choices[0].delta.content is not a string (got integer)"),
        (chunk(delta(refusal=[])), "choices[0].delta.refusal is not a string (got list)"),
        (chunk(delta(role=1)), "choices[0].delta.role is not a string (got integer)"),
        (
            chunk(delta(reasoning_content={})),
            "choices[0].delta.reasoning_content is not a string (got object)",
        ),
        (chunk(delta(tool_calls={})), "choices[0].delta.tool_calls is not a list (got object)"),
        (
            chunk(delta(tool_calls=[1])),
            "choices[0].delta.tool_calls[0] is not an object (got integer)",
        ),
        (
            chunk(delta(tool_calls=[{"index": "0"}])),
            "choices[0].delta.tool_calls[0].index is not a non-negative integer (got '0')",
        ),
        (
            chunk(delta(tool_calls=[{"index": 0, "function": "f"}])),
            "choices[0].delta.tool_calls[0].function is not an object (got string)",
        ),
        (
            chunk(delta(tool_calls=[{"index": 0, "function": {"arguments": {"x": 1}}}])),
            "choices[0].delta.tool_calls[0].function.arguments is not a string (got object)",
        ),
        (
            chunk(delta(tool_calls=[{"index": 0, "function": {"name": 3}}])),
            "choices[0].delta.tool_calls[0].function.name is not a string (got integer)",
        ),
        (
            chunk(delta(tool_calls=[{"index": 0, "id": 3}])),
            "choices[0].delta.tool_calls[0].id is not a string (got integer)",
        ),
        (
            chunk(delta(tool_calls=[{"index": 0, "type": 3}])),
            "choices[0].delta.tool_calls[0].type is not a string (got integer)",
        ),
        (chunk({"index": 0, "logprobs": []}), "choices[0].logprobs is not an object (got list)"),
        (
            chunk({"index": 0, "logprobs": {"content": "x"}}),
            "choices[0].logprobs.content is not a list (got string)",
        ),
        (
            chunk({"index": 0, "logprobs": {"refusal": 1}}),
            "choices[0].logprobs.refusal is not a list (got integer)",
        ),
        (chunk(delta(finish=7)), "choices[0].finish_reason is not a string (got integer)"),
        (chunk(usage=[1]), "usage is not an object (got list)"),
    ],
)
def test_malformed_pieces_are_skipped_and_named(obj: dict[str, Any], reason: str) -> None:
    assembler = StreamAssembler()
    assembler.feed_chunk(chunk(delta(content="ok")), 0)
    assembler.feed_chunk(obj, 1)
    result = assembler.finish()
    assert reasons(result) == [(1, reason)]
    assert result.choices[0].content == "ok"


def test_a_bad_choice_does_not_spoil_its_neighbours() -> None:
    result = run(
        chunk("junk", delta(1, content="b"), {"index": 2, "delta": 3}, delta(0, content="a"))
    )
    assert contents(result) == ["a", "b", None]
    assert len(result.frame_errors) == 2


def test_feed_chunk_tolerates_a_non_object() -> None:
    result = run([1, 2])
    assert reasons(result) == [(0, "not a JSON object (got list)")]


# -- non-streamed ------------------------------------------------------------------------------------

RESPONSE = {
    "id": "chatcmpl-R1",
    "object": "chat.completion",
    "created": 1770000500,
    "model": "gpt-4o-mini",
    "system_fingerprint": "fp_r1",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "refusal": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"a":1}'},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "g", "arguments": "{}"},
                    },
                ],
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
        },
        {
            "index": 1,
            "message": {"role": "assistant", "content": "Hi.", "reasoning_content": "Greet."},
            "logprobs": {"content": [{"token": "Hi", "logprob": -0.1}], "refusal": None},
            "finish_reason": "stop",
        },
    ],
    "usage": {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42},
}


def test_assemble_response() -> None:
    result = assemble_response(RESPONSE)
    first, second = result.choices
    assert first.tool_calls == [
        ToolCall(0, "call_1", "function", "f", '{"a":1}'),
        ToolCall(1, "call_2", "function", "g", "{}"),
    ]
    assert (first.content, first.finish_reason, first.role) == (None, "tool_calls", "assistant")
    assert (second.content, second.reasoning_content, second.finish_reason) == (
        "Hi.",
        "Greet.",
        "stop",
    )
    assert second.logprobs_content == [{"token": "Hi", "logprob": -0.1}]
    assert (result.completion_id, result.model, result.created, result.system_fingerprint) == (
        "chatcmpl-R1",
        "gpt-4o-mini",
        1770000500,
        "fp_r1",
    )
    assert result.usage_raw == RESPONSE["usage"]
    assert (result.chunk_count, result.foreign_objects, result.saw_done) == (0, 0, False)
    assert result.frame_errors == []


def test_assemble_response_error_body() -> None:
    body = {"error": {"message": "Rate limit", "type": "rate_limit_error", "code": 429}}
    result = assemble_response(body)
    assert (result.error, result.choices) == (body["error"], [])


def test_assemble_response_refusal() -> None:
    body = {"choices": [{"message": {"refusal": "No."}, "finish_reason": "stop"}]}
    assert assemble_response(body).choices[0].refusal == "No."


def test_assemble_response_not_an_object() -> None:
    assert reasons(assemble_response([1])) == [(0, "not a JSON object (got list)")]


def test_typed_content_chunks_are_read_as_text_and_thinking() -> None:
    """Magistral streams content as typed chunks (tests/fixtures/providers/mistral/
    magistral_thinking_chunks.json names the source): thinking goes to the reasoning, text to the
    content; a reference chunk carries no text; any other chunk is a frame error, never dropped
    silently."""
    frames = [
        {"choices": [{"index": 0, "delta": {"content": [
            {"type": "thinking", "thinking": [{"type": "text", "text": "Think "},
                                              {"type": "text", "text": "twice."}]}]}}]},
        {"choices": [{"index": 0, "delta": {"content": [
            {"type": "text", "text": "Answer"}, {"type": "reference", "reference_ids": [1]}]}}]},
        {"choices": [{"index": 0, "delta": {"content": [{"type": "image", "url": "x"}]},
                      "finish_reason": "stop"}]},
    ]  # fmt: skip
    body = b"".join(b"data: " + orjson.dumps(f) + b"\n\n" for f in frames)
    assembled = assemble_stream(body)
    (choice,) = assembled.choices
    assert (choice.reasoning_content, choice.content) == ("Think twice.", "Answer")
    assert [e.reason for e in assembled.frame_errors] == [
        "choices[0].delta.content[0] is not a text or thinking chunk"
    ]
