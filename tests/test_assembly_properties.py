"""Properties of parsing and assembly over open-ended inputs (hypothesis)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any
from unittest.mock import patch

import orjson
from generated_streams import events, grouped, openai_streams
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.core.assembly import StreamAssembler, _data_payloads, assemble_response, assemble_stream
from worker.core.errors import FrameError
from worker.core.sse import BadFrame, Chunk, Done, decode_frames, iter_frames, parse_events
from worker.plain_chunk import take_run

# Moderate example counts: the suite shares a small machine.
moderate = settings(max_examples=200, deadline=None)

text = st.text(st.characters(codec="utf-8"), max_size=60)


def assert_same(fast: Any, general: Any) -> None:
    """Two assemblies are the same: equal but for their frame errors, which name the same frames
    and reasons (exceptions compare by identity)."""
    assert [(e.index, e.reason) for e in fast.frame_errors] == [
        (e.index, e.reason) for e in general.frame_errors
    ]
    assert replace(fast, frame_errors=[]) == replace(general, frame_errors=[])


def fragments(whole: str, cuts: list[int]) -> list[str]:
    points = sorted({min(cut, len(whole)) for cut in cuts})
    pieces, start = [], 0
    for point in [*points, len(whole)]:
        pieces.append(whole[start:point])
        start = point
    return pieces


def sse(objs: list[dict[str, Any]], newline: str = "\n", done: bool = True) -> bytes:
    frames = [b"data: " + orjson.dumps(obj) for obj in objs]
    if done:
        frames.append(b"data: [DONE]")
    sep = newline.encode()
    return (sep * 2).join(frames) + sep * 2


def content_chunk(choice: int, field: str, piece: str) -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "choices": [{"index": choice, "delta": {field: piece}, "finish_reason": None}],
    }


@moderate
@given(
    whole=text,
    cuts=st.lists(st.integers(0, 60), max_size=12),
    newline=st.sampled_from(["\n", "\r\n", "\r"]),
)
def test_any_split_of_a_text_assembles_to_the_text(whole: str, cuts: list[int], newline: str):
    pieces = fragments(whole, cuts)
    for field in ("content", "refusal", "reasoning_content"):
        result = assemble_stream(sse([content_chunk(0, field, p) for p in pieces], newline))
        assert getattr(result.choices[0], field) == whole
        assert result.frame_errors == []


@moderate
@given(whole=text, cuts=st.lists(st.integers(0, 60), max_size=12))
def test_any_split_of_tool_arguments_assembles_to_the_arguments(whole: str, cuts: list[int]):
    pieces = fragments(whole, cuts)
    objs = [
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                **({"id": "call_1", "type": "function"} if i == 0 else {}),
                                "function": {
                                    **({"name": "f"} if i == 0 else {}),
                                    "arguments": piece,
                                },
                            }
                        ]
                    },
                }
            ]
        }
        for i, piece in enumerate(pieces)
    ]
    (call,) = assemble_stream(sse(objs)).choices[0].tool_calls
    assert (call.id, call.name, call.arguments) == ("call_1", "f", whole)


@st.composite
def interleavings(draw: st.DrawFn) -> tuple[list[list[dict[str, Any]]], list[dict[str, Any]]]:
    """Per-choice chunk sequences, and one random interleaving that keeps each choice's order."""
    n = draw(st.integers(1, 4))
    per_choice = []
    for index in range(n):
        pieces = draw(st.lists(text, max_size=6))
        seq = [{"choices": [{"index": index, "delta": {"role": "assistant", "content": ""}}]}]
        seq += [{"choices": [{"index": index, "delta": {"content": p}}]} for p in pieces]
        if draw(st.booleans()):
            seq.append(
                {
                    "choices": [
                        {
                            "index": index,
                            "delta": {
                                "tool_calls": [
                                    {
                                        "index": 0,
                                        "id": f"call_{index}",
                                        "type": "function",
                                        "function": {"name": "f", "arguments": draw(text)},
                                    }
                                ]
                            },
                        }
                    ]
                }
            )
        seq.append({"choices": [{"index": index, "delta": {}, "finish_reason": "stop"}]})
        per_choice.append(seq)
    queues = [list(seq) for seq in per_choice]
    merged = []
    while any(queues):
        live = [q for q in queues if q]
        merged.append(draw(st.sampled_from(live)).pop(0))
    return per_choice, merged


@moderate
@given(interleavings())
def test_interleaving_choices_changes_no_choice(case) -> None:
    per_choice, merged = case
    together = assemble_stream(sse(merged)).choices
    alone = [assemble_stream(sse(seq)).choices[0] for seq in per_choice]
    assert together == alone


@moderate
@given(st.binary(max_size=400))
def test_arbitrary_bytes_never_crash_the_parser(body: bytes) -> None:
    events = parse_events(body)
    frames = list(decode_frames(events))
    assert frames == list(iter_frames(body))
    for frame in frames:
        assert isinstance(frame, Done | Chunk | BadFrame)
        if isinstance(frame, BadFrame):
            assert isinstance(frame.error, FrameError)
    assemble_stream(body)


sse_ish = st.lists(
    st.sampled_from(
        [
            "data: ",
            "data:",
            "event: error\n",
            ": c\n",
            "\n",
            "\r\n",
            "\r",
            "[DONE]",
            "{",
            "}",
            '{"choices":[{"delta":{"content":"x"}}]}',
            '"a"',
            "\xff",
            "é",
            "id: 1\n",
        ]
    ),
    max_size=30,
).map("".join)


@moderate
@given(sse_ish, st.sampled_from(["utf-8", "latin-1"]))
def test_sse_like_noise_never_crashes(body: str, codec: str) -> None:
    raw = body.encode(codec, "replace")
    assert list(iter_frames(raw)) == list(decode_frames(parse_events(raw)))
    assemble_stream([raw, body])


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(text, children, max_size=4),
    max_leaves=20,
)
keys = st.sampled_from(
    [
        "id",
        "object",
        "model",
        "created",
        "system_fingerprint",
        "usage",
        "error",
        "choices",
        "index",
        "delta",
        "message",
        "content",
        "refusal",
        "role",
        "reasoning_content",
        "tool_calls",
        "function",
        "name",
        "arguments",
        "type",
        "logprobs",
        "finish_reason",
    ]
)
# Objects built from the keys chunks use, with values of any JSON type at any depth.
chunk_like = st.recursive(
    json_values,
    lambda children: st.dictionaries(keys, children, max_size=6) | st.lists(children, max_size=3),
    max_leaves=30,
)


@moderate
@given(st.lists(st.dictionaries(keys, chunk_like, max_size=6), max_size=8))
def test_arbitrary_objects_never_crash_the_assembler(objs: list[dict[str, Any]]) -> None:
    assembler = StreamAssembler()
    for index, obj in enumerate(objs):
        assembler.feed_chunk(obj, index)
        assembler.feed_chunk(obj, index, "error")
    result = assembler.finish()
    assert result.chunk_count == len(objs)
    for obj in objs:
        assemble_response(obj)
    assemble_stream(sse(objs))


@moderate
@given(st.dictionaries(text, json_values, max_size=6))
def test_arbitrary_json_objects_never_crash_the_assembler(obj: dict[str, Any]) -> None:
    assemble_stream(sse([obj]))
    assemble_response(obj)


# A record as the gateway writes one frame, and the near misses around that shape.
record_shapes = st.sampled_from(
    [b"data: %s\n\n", b"data: %s", b"data: %s\n", b"data:%s\n\n", b"data: %s\r\n\r\n",
     b"data: %s\n\ndata: [DONE]\n\n", b"data: %s\n\n\n\n", b"\xef\xbb\xbfdata: %s\n\n",
     b"event: error\ndata: %s\n\n", b"data: %s\xff\n\n", b"data: %s\r\n\n",
     b'data: {"id":\r%s}\n\n', b'data: {"id":\n%s}\n\n',
     # Several events in one record (coalesced frames), and near misses of that.
     b"data: %s\n\ndata: {}\n\n", b"data: {}\n\ndata: %s\n\n", b"data: %s\n\n: keep-alive\n\n",
     b"data: %s\n\ndata: 5\n\n", b"data: %s\n\n\ndata: {}\n\n", b"data: %s\n\ndata: [DONE]x\n\n",
     b"data: %s\n\nevent: error\ndata: {}\n\n", b"data: [DONE]\n\ndata: %s\n\n", b"data: [DONE]%.0s",
     b'data: {"id":\n%s}\n\ndata: {\n}\n\n']
)  # fmt: skip
frame_records = st.tuples(
    record_shapes,
    st.one_of(
        st.dictionaries(keys, chunk_like, max_size=6).map(orjson.dumps),
        json_values.map(orjson.dumps),
        st.binary(max_size=12),
    ),
).map(lambda pair: pair[0] % pair[1])


@moderate
@given(st.lists(frame_records, max_size=8))
def test_the_one_event_record_fast_path_changes_nothing(records: list[bytes]) -> None:
    # Text records never take the bytes fast path: both must assemble alike, errors included.
    texts = [record.decode("utf-8", "surrogateescape") for record in records]
    fast, general = assemble_stream(records), assemble_stream(texts)
    # FrameError is an exception (equal only to itself): compare what it says.
    assert_same(fast, general)


# --- the plain chunk (worker.plain_chunk): msgspec structs, held to the dict path -----------------

FIRST = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
         "system_fingerprint": "fp",
         "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}  # fmt: skip
odd_values = st.sampled_from(
    [None, 0, 1, -1, 2**32, 2**40, 2**63, 2**64, 2**70, -(2**63) - 1, True, False, 1.0, 1.5,
     1e300, "", "c2", "0", "\u00e9", [], {}, [1], [1.5], {"a": 1}, {"a": {"b": 2**70}}]
)  # fmt: skip
# Each perturbation takes a plain chunk one step towards (or across) the edge of "plain".
perturbation = st.one_of(
    st.tuples(st.just("top"), st.sampled_from(["id", "object", "usage", "error", "choices",
              "created", "model", "service_tier", "obfuscation", "provider", "unknown"]), odd_values),
    st.tuples(st.just("choice"), st.sampled_from(["index", "delta", "logprobs", "finish_reason",
              "native_finish_reason", "stop_reason", "unknown"]), odd_values),
    st.tuples(st.just("delta"), st.sampled_from(["content", "role", "refusal", "reasoning",
              "reasoning_content", "tool_calls", "function_call", "unknown"]), odd_values),
    st.tuples(st.just("choices"), st.sampled_from(["none", "two", "empty"]), st.none()),
)  # fmt: skip


def plain_like(content: str, steps: list[tuple[str, str, Any]]) -> dict[str, Any]:
    delta: dict[str, Any] = {"content": content}
    choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
    chunk: dict[str, Any] = {"id": "c1", "object": "chat.completion.chunk", "choices": [choice]}
    for where, key, value in steps:
        if where == "choices":
            chunk["choices"] = {"none": None, "two": [choice, dict(choice)], "empty": []}[key]
        else:
            {"top": chunk, "choice": choice, "delta": delta}[where][key] = value
    return chunk


def dumps(obj: Any) -> bytes:
    # The standard library, unlike orjson, writes integers beyond 64 bits (an edge to hold too).
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def dict_path(records: list[bytes]) -> Any:
    """The general path alone: SSE parsing, orjson, then the assembler's dict code (no msgspec)."""
    assembler = StreamAssembler()
    following = 0
    for record in records:
        text = record.decode("utf-8", "surrogateescape")
        for frame in decode_frames(parse_events(text)):
            if isinstance(frame, Chunk):
                assembler.feed_chunk(frame.obj, following, frame.event)
            elif isinstance(frame, BadFrame):
                assembler.feed_bad(FrameError(following, frame.error.reason))
            else:
                assembler.feed(replace(frame, index=following))
            following += 1
    return assembler.finish()


@moderate
@given(
    st.lists(
        st.tuples(text, st.lists(perturbation, max_size=2), st.sampled_from([b"\n\n", b""])),
        min_size=1,
        max_size=8,
    )
)
def test_plain_chunks_assemble_as_the_dict_path_does(frames) -> None:
    records = [b"data: " + dumps(FIRST) + b"\n\n"]
    for content, steps, end in frames:
        records.append(b"data: " + dumps(plain_like(content, steps)) + end)
    fast, general = assemble_stream(records), dict_path(records)
    assert_same(fast, general)


def test_the_plain_path_is_taken_and_its_edges_are_not() -> None:
    """Not vacuous: a plain chunk is absorbed by feed_plain; each near miss is refused by it."""
    assembler = StreamAssembler()
    assembler.feed_chunk(FIRST)
    assert assembler.feed_plain(dumps(plain_like("hi", [])))
    for step in [("top", "usage", {}), ("top", "unknown", 1), ("choice", "index", 2**40),
                 ("choice", "index", True), ("delta", "role", "assistant"), ("top", "id", "c2"),
                 ("choices", "two", None), ("delta", "content", None)]:  # fmt: skip
        assert not assembler.feed_plain(dumps(plain_like("hi", [step]))), step
    assert assembler.finish().choices[0].content == "hi"


# The JSON text of a plain chunk, changed where a compiled decoder and orjson could disagree: a key
# given twice, a key or a string written with escapes, whitespace, a value's syntax broken.
text_edit = st.sampled_from(
    [
        (b'"content":', b'"content":"x","content":'),
        (b'"index":0', b'"index":0,"index":1'),
        (b'"object":', b'"object":"chat.completion","object":'),
        (b'"content"', b'"\\u0063ontent"'),
        (b'"delta"', b'"d\\u0065lta"'),
        (b'"id":"c1"', b'"id":"\\u0063\\u0031"'),
        (b'"id":"c1"', b'"id":"c\\ud800"'),
        (b'"id":"c1"', b'"id" : "c1" '),
        (b'"logprobs":null', b'"logprobs":null,"native_finish_reason":1e999'),
        (b'"logprobs":null', b'"logprobs":null,"stop_reason":NaN'),
        (b'"logprobs":null', b'"logprobs":null,"stop_reason":[1,]'),
        (b'"logprobs":null', b'"logprobs":null,"stop_reason":{"a":1,"a":2}'),
        (b'"logprobs":null', b'"logprobs":null,"stop_reason":-0'),
        (b'"logprobs":null', b'"logprobs":null,"stop_reason":123456789012345678901234567890'),
        (b'"logprobs":null', b'"logprobs":Null'),
        (b"}]}", b"}]} "),
        (b"}]}", b"}]}x"),
        (b"}]}", b"}],}"),
        (b"{", b"\t{"),
    ]
)


@moderate
@given(st.lists(st.tuples(text, st.lists(text_edit, max_size=2)), min_size=1, max_size=6))
def test_plain_chunks_written_oddly_assemble_as_the_dict_path_does(frames) -> None:
    records = [b"data: " + dumps(FIRST) + b"\n\n"]
    for content, edits in frames:
        payload = dumps(plain_like(content, []))
        for old, new in edits:
            payload = payload.replace(old, new, 1)
        records.append(b"data: " + payload + b"\n\n")
    fast, general = assemble_stream(records), dict_path(records)
    assert_same(fast, general)


# What may stand between a content-only frame's bytes before and after its content (the compiled
# path's template): one JSON string, or anything that is not one.
middles = st.sampled_from(
    [b'""', b'"a"', b' "a" ', b'"\\u00e9\\n"', b'"a\\"b"', b'"a","refusal":"b"', b'"a","x":1',
     b'"a"}', b'"a" "b"', b"null", b"1", b'["a"]', b'"a', b'"\\ud800"', b'"\x01"', b'"\xff"',
     b'"a","content":"b"', b'"a"\t', b"\"\xe2\x82\xac\""]
)  # fmt: skip


@moderate
@given(st.lists(st.one_of(text.map(lambda t: ("text", t)), middles.map(lambda m: ("raw", m))),
                min_size=1, max_size=8))  # fmt: skip
def test_frames_cut_like_a_template_assemble_as_the_dict_path_does(frames) -> None:
    records = [b"data: " + dumps(FIRST) + b"\n\n", b"data: " + dumps(plain_like("t", [])) + b"\n\n"]
    cut = dumps(plain_like("t", []))
    head, tail = cut.split(b'"content":"t"')
    for kind, value in frames:
        payload = (
            dumps(plain_like(value, [])) if kind == "text" else head + b'"content":' + value + tail
        )
        records.append(b"data: " + payload + b"\n\n")
    fast, general = assemble_stream(records), dict_path(records)
    assert_same(fast, general)


def test_the_plain_path_refuses_what_a_decoder_might_read_otherwise() -> None:
    """Not vacuous: each of these is refused by the compiled path (the general path decides it)."""
    assembler = StreamAssembler()
    assembler.feed_chunk(FIRST)
    plain = dumps(plain_like("hi", []))
    assert assembler.feed_plain(plain)
    assert assembler.feed_plain(plain.decode())
    for old, new in [
        (b'"content":', b'"content":"x","content":'),
        (b'"logprobs":null', b'"logprobs":null,"stop_reason":1.5'),
        (b'"logprobs":null', b'"logprobs":null,"stop_reason":18446744073709551616'),
        (b'"id":"c1"', b'"id":"c\\ud800"'),
        (b"}]}", b"}]}x"),
    ]:
        assert not assembler.feed_plain(plain.replace(old, new, 1)), new
    assert not assembler.feed_plain(plain.decode() + "\udc80")
    assert assembler.finish().choices[0].content == "hihi"


# --- argument fragments of a call already begun: the plain path's other shape -------------------

HEAD = {"id": "c1", "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "call_a", "type": "function",
             "function": {"name": "f", "arguments": ""}}]}}]}  # fmt: skip
fragment_step = st.tuples(
    st.sampled_from(["index", "id", "type", "name", "arguments", "function", "unknown", "no index",
                     "no function", "two", "content", "choice index"]),
    odd_values,
)  # fmt: skip


def fragment_like(arguments: str, steps: list[tuple[str, Any]]) -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": arguments}
    fragment: dict[str, Any] = {"index": 0, "function": function}
    delta: dict[str, Any] = {"tool_calls": [fragment]}
    choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
    for key, value in steps:
        if key in ("name", "arguments"):
            function[key] = value
        elif key == "function":
            fragment["function"] = value
        elif key == "no index":
            fragment.pop("index", None)
        elif key == "no function":
            fragment.pop("function", None)
        elif key == "two":
            delta["tool_calls"] = [fragment, {"index": 1, "function": {"arguments": arguments}}]
        elif key == "content":
            delta["content"] = value
        elif key == "choice index":
            choice["index"] = value
        else:
            fragment[key] = value
    return {"id": "c1", "object": "chat.completion.chunk", "choices": [choice]}


@moderate
@given(
    st.lists(st.tuples(text, st.lists(fragment_step, max_size=2)), min_size=1, max_size=8),
    st.booleans(),
)
def test_argument_fragments_assemble_as_the_dict_path_does(frames, one_body) -> None:
    records = [b"data: " + dumps(FIRST) + b"\n\n", b"data: " + dumps(HEAD) + b"\n\n"]
    for arguments, steps in frames:
        records.append(b"data: " + dumps(fragment_like(arguments, steps)) + b"\n\n")
    fed = b"".join(records) if one_body else records
    fast, general = assemble_stream(fed), dict_path(records)
    assert_same(fast, general)


def test_the_argument_fragment_path_is_taken_and_its_edges_are_not() -> None:
    """Not vacuous: an argument fragment of a begun call is absorbed by feed_plain; a fragment that
    begins, names or retypes a call, or continues one never begun, is refused by it."""
    assembler = StreamAssembler()
    assembler.feed_chunk(FIRST)
    assembler.feed_chunk(HEAD)
    assert assembler.feed_plain(dumps(fragment_like('{"a"', [])))
    assert assembler.feed_plain(dumps(fragment_like(":1}", [("no index", None)])))
    for step in [("index", 1), ("id", "call_b"), ("type", "function"), ("name", "g"),
                 ("arguments", None), ("unknown", 1), ("two", None), ("choice index", 1),
                 ("index", True), ("no function", None)]:  # fmt: skip
        assert not assembler.feed_plain(dumps(fragment_like("x", [step]))), step
    (call,) = assembler.finish().choices[0].tool_calls
    assert (call.id, call.name, call.arguments) == ("call_a", "f", '{"a":1}')


# --- records joined: a call's records taken as one body when each is made of one-line events -----

near_misses = st.sampled_from(
    [b": keep-alive\n\n", b"data: {}\n", b"data: {}", b"data: {}\n\n", b"\n\n", b"",
     b": keep-alive", b"data: {}\n\ndata: {}", b"data: {}\r", b"\xef\xbb\xbfdata: {}", b"data: {\"a\"\r:1}\n\n",
     b"data:{}\n\n", b"\xef\xbb\xbfdata: {}\n\n", b"data: {\x00}\n\n", b"data: [DONE] \n\n",
     b"event: error\ndata: {}\n\n", b"data: {\"id\":\n1}\n\n", b"data: \n\n", b"data: 7\n\n"]
)  # fmt: skip


@moderate
@given(openai_streams(), st.data())
def test_joined_records_assemble_as_the_general_path_does(chunks, data) -> None:
    """Whatever the grouping of events into records, and whatever near miss sits among them, the
    bytes records (joined and taken at once when they allow it) assemble as their text does
    (records parsed one by one by the SSE parser)."""
    records = grouped(data.draw, events(chunks))
    # Not vacuous: records of one-line events are taken at once, as the data of every event.
    assert _data_payloads(records) == [*map(orjson.dumps, chunks), b"[DONE]"]
    for _ in range(data.draw(st.integers(0, 2))):
        records.insert(data.draw(st.integers(0, len(records))), data.draw(near_misses))
    texts = [record.decode("utf-8", "surrogateescape") for record in records]
    # Records are joined a group at a time; small groups put group edges among these few records.
    with patch("worker.core.assembly.GROUP_RECORDS", data.draw(st.sampled_from([1, 2, 3, 1024]))):
        fast = assemble_stream(records)
    general = assemble_stream(texts)
    assert_same(fast, general)


# --- long runs: the compiled path reads the frames a window at a time (32, then 64, 128, …) -------

WINDOW_EDGES = [0, 1, 31, 32, 33, 95, 96, 97, 223, 224, 225, 299]


@moderate
@given(st.lists(st.sampled_from(WINDOW_EDGES), max_size=3), st.sampled_from(WINDOW_EDGES))
def test_long_runs_assemble_as_the_dict_path_does(breaks: list[int], tier_at: int) -> None:
    """300 plain frames, a frame the general path must decide at each of ``breaks`` (around the
    windows' edges), a service tier named on one: the same assembly as the dict path's."""
    records = [b"data: " + dumps(FIRST) + b"\n\n"]
    for number in range(300):
        steps = [("top", "service_tier", "flex")] if number == tier_at else []
        if number in breaks:
            steps.append(("delta", "role", "assistant"))
        records.append(b"data: " + dumps(plain_like(f"<{number}>", steps)) + b"\n\n")
    fast, general = assemble_stream(records), dict_path(records)
    assert_same(fast, general)
    assert fast.choices[0].content == "".join(f"<{number}>" for number in range(300))


def test_a_run_stops_at_what_is_not_bytes_past_the_first_window() -> None:
    """Not vacuous: whole windows are taken on, and a run stops exactly where a frame is not
    plain or not bytes, whichever window it falls in."""
    plain = dumps(plain_like("x", []))
    for stop in (0, 31, 32, 100, 250):
        payloads: list[Any] = [plain] * 300
        payloads[stop] = plain.decode()
        taken, _tier, pieces = take_run(payloads, 0, "c1", {0: []})
        assert taken == stop and pieces == ([(0, -1, "x" * stop)] if stop else [])
        payloads[stop] = b"{}"
        assert take_run(payloads, 0, "c1", {0: []})[0] == stop
    assert take_run([plain] * 300, 7, "c1", {0: []})[0] == 293
