"""The SSE split and frame decoding (worker/core/sse.py)."""

from __future__ import annotations

import pytest

from worker.core.errors import FrameError
from worker.core.sse import (
    BadFrame,
    Chunk,
    Done,
    SSEEvent,
    decode_event,
    decode_frames,
    iter_frames,
    parse_events,
)

BODY = 'data: {"a":1}\n\ndata: {"b":2}\n\ndata: [DONE]\n\n'
EXPECTED = [
    SSEEvent(0, None, '{"a":1}'),
    SSEEvent(1, None, '{"b":2}'),
    SSEEvent(2, None, "[DONE]"),
]


@pytest.mark.parametrize(
    "body",
    [
        BODY,
        BODY.replace("\n", "\r\n"),
        BODY.replace("\n", "\r"),
        BODY.replace("data: ", "data:"),
        BODY.rstrip("\n"),
        BODY.encode(),
        "\ufeff" + BODY,
        "\n\n" + BODY.replace("\n\n", "\n\n\n\n"),
    ],
    ids=["lf", "crlf", "cr", "no-space", "no-trailing-blank", "bytes", "bom", "extra-blank-lines"],
)
def test_line_ends_and_spacing_give_the_same_events(body: str | bytes) -> None:
    assert parse_events(body) == EXPECTED


def test_exactly_one_leading_space_is_stripped() -> None:
    assert parse_events("data:  two\n\ndata:none\n\n") == [
        SSEEvent(0, None, " two"),
        SSEEvent(1, None, "none"),
    ]


def test_comments_are_ignored_and_comment_only_events_yield_nothing() -> None:
    body = ": OPENROUTER PROCESSING\n\n: keep-alive\ndata: x\n: between\n\n:\n\n"
    assert parse_events(body) == [SSEEvent(0, None, "x")]


def test_event_name_is_kept_with_its_data() -> None:
    body = 'data: {"a":1}\n\nevent: error\ndata: {"error":{"message":"boom"}}\n\n'
    assert parse_events(body)[1] == SSEEvent(1, "error", '{"error":{"message":"boom"}}')


def test_event_without_data_is_kept_only_when_named() -> None:
    assert parse_events("event: error\n\nid: 7\nretry: 100\n\n") == [SSEEvent(0, "error", None)]


def test_several_data_lines_are_joined_with_newlines() -> None:
    assert parse_events("data: a\ndata:\ndata: c\n\n") == [SSEEvent(0, None, "a\n\nc")]


def test_a_data_field_without_colon_is_an_empty_line_of_data() -> None:
    assert parse_events("data\ndata: x\n\n") == [SSEEvent(0, None, "\nx")]


def test_unknown_fields_and_id_retry_are_ignored() -> None:
    assert parse_events("id: 1\nretry: 5\nfoo: bar\ndata: x\n\n") == [SSEEvent(0, None, "x")]


def test_first_index_continues_numbering() -> None:
    assert [e.index for e in parse_events(BODY, first_index=10)] == [10, 11, 12]


def test_empty_bodies() -> None:
    assert parse_events("") == []
    assert parse_events(b"\n\n\r\n") == []


# -- frames ------------------------------------------------------------------------------------------


def test_decode_frames_kinds() -> None:
    frames = list(decode_frames(parse_events(BODY)))
    assert frames == [Chunk(0, {"a": 1}), Chunk(1, {"b": 2}), Done(2)]


def test_done_tolerates_surrounding_whitespace() -> None:
    assert decode_event(3, None, " [DONE] ") == [Done(3)]


def _reason(frames: list) -> tuple[int, str]:
    (frame,) = frames
    assert isinstance(frame, BadFrame)
    assert isinstance(frame.error, FrameError)
    return frame.index, frame.error.reason


def test_not_json() -> None:
    index, reason = _reason(decode_event(4, None, '{"a":'))
    assert index == 4
    assert reason.startswith("not JSON: ")


def test_json_but_not_an_object() -> None:
    assert _reason(decode_event(1, None, "[1, 2]")) == (1, "not a JSON object (got list)")
    assert _reason(decode_event(2, None, '"x"')) == (2, "not a JSON object (got string)")
    assert _reason(decode_event(3, None, "null")) == (3, "not a JSON object (got null)")


def test_non_utf8_bytes_spoil_only_their_own_frame() -> None:
    body = b'data: {"a":1}\n\ndata: {"b":"caf\xe9"}\n\ndata: [DONE]\n\n'
    frames = list(iter_frames(body))
    assert frames[0] == Chunk(0, {"a": 1})
    assert _reason([frames[1]]) == (1, "not UTF-8 at byte 9")
    assert frames[2] == Done(2)


def test_invalid_utf8_in_a_comment_is_harmless() -> None:
    assert list(iter_frames(b": \xff\xfe\ndata: {}\n\n")) == [Chunk(0, {})]


def test_frames_on_single_newlines_are_read_one_per_line() -> None:
    # Leniency (see worker/core/sse.py): one SSE event, but every data line is a whole frame.
    body = 'data: {"a":1}\ndata: {"b":2}\ndata: [DONE]\n'
    assert list(iter_frames(body)) == [Chunk(0, {"a": 1}), Chunk(0, {"b": 2}), Done(0)]


def test_single_newline_leniency_needs_every_line_to_be_a_frame() -> None:
    index, reason = _reason(list(iter_frames('data: {"a":1}\ndata: oops\n')))
    assert index == 0
    assert reason.startswith("not JSON")
    _, reason = _reason(list(iter_frames('data: {"a":1}\ndata: [1]\n')))
    assert reason.startswith("not JSON")


def test_spec_multi_line_json_is_one_frame() -> None:
    assert list(iter_frames('data: {"a":\ndata: 1}\n\n')) == [Chunk(0, {"a": 1})]


def test_error_events() -> None:
    assert decode_event(0, "error", '{"error":{"message":"x"}}') == [
        Chunk(0, {"error": {"message": "x"}}, "error")
    ]
    assert decode_event(1, "error", "upstream reset") == [
        Chunk(1, {"message": "upstream reset"}, "error")
    ]
    assert decode_event(2, "error", "[1]") == [Chunk(2, {"message": "[1]"}, "error")]
    assert decode_event(3, "error", None) == [Chunk(3, {}, "error")]
    assert decode_event(4, "ping", None) == []


def test_error_event_with_bad_bytes_keeps_a_readable_message() -> None:
    (frame,) = list(iter_frames(b"event: error\ndata: bad \xff here\n\n"))
    assert isinstance(frame, Chunk)
    assert frame.event == "error"
    assert frame.obj["message"].encode("utf-8")  # encodable: no lone surrogates left


def test_other_event_names_are_kept_on_the_chunk() -> None:
    assert list(iter_frames("event: message\ndata: {}\n\n")) == [Chunk(0, {}, "message")]


def test_iter_frames_matches_decode_frames_of_parse_events() -> None:
    body = b'data: {"a":1}\r\n\r\n: c\r\ndata: [DONE]\r\n\r\ndata: x\r\n\r\nevent: error\r\n\r\n'
    assert list(iter_frames(body)) == list(decode_frames(parse_events(body)))


def test_a_frame_only_pythons_json_reads_is_a_chunk_with_the_replacement_character() -> None:
    """Issue 35, leak 5: a lone surrogate escape is refused by orjson and read by Python's json,
    as a Python client reads it; the worker reads it so too, the surrogate made U+FFFD (what the
    client shows; tiktoken and the databases refuse a lone one). Invalid UTF-8 stays a bad frame."""
    from worker.core.sse import Chunk, decode_event

    [frame] = decode_event(0, None, '{"choices":[{"index":0,"delta":{"content":"a \\ud800 b"}}]}')
    assert isinstance(frame, Chunk)
    assert frame.obj["choices"][0]["delta"]["content"] == "a \ufffd b"
    [frame] = decode_event(0, None, '{"\\udfff": 1}')
    assert isinstance(frame, Chunk) and frame.obj == {"\ufffd": 1}
    [bad] = decode_event(0, None, b'{"a": "\xff"}'.decode("utf-8", "surrogateescape"))
    assert not isinstance(bad, Chunk)
