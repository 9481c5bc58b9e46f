from unittest.mock import patch

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from worker.contract import entries as E
from worker.contract import publisher as P
from worker.contract.entries import decode_call, parse_notification
from worker.contract.keys import Keys
from worker.contract.publisher import XAdd, frame_commands, response_commands
from worker.core.errors import InputError

META = {
    "request_id": "req_1",
    "account_id": "acct_1",
    "model": "gpt-4o",
    "stream": True,
    "reserved_micros": 100,
    "created_at": "2026-11-30T00:00:00Z",
}


def entry(n: int, **fields: object) -> tuple[bytes, dict[bytes, bytes]]:
    encoded = {
        k.encode(): (v if isinstance(v, bytes) else str(v).encode()) for k, v in fields.items()
    }
    return (f"{n}-0".encode(), encoded)


def request_entry(meta: dict | None = None) -> tuple[bytes, dict[bytes, bytes]]:
    return entry(1, kind="request", body=orjson.dumps(meta or META))


def test_notification_fields() -> None:
    note = parse_notification(
        b"1-0", {b"kind": b"close", b"request_id": b"r", b"ts": b"17", b"reason": b"done"}
    )
    assert (note.kind, note.request_id, note.ts, note.reason) == ("close", "r", 17, "done")


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({b"kind": b"bogus", b"request_id": b"r"}, "unknown notification kind"),
        ({b"request_id": b"r"}, "unknown notification kind"),
        ({b"kind": b"open"}, "without request_id"),
        ({b"kind": b"open", b"request_id": b"x" * 201}, "longer than 200"),
    ],
)
def test_bad_notifications(fields: dict, reason: str) -> None:
    with pytest.raises(InputError, match=reason):
        parse_notification(b"1-0", fields)


def test_streamed_call_decodes_frames_in_order() -> None:
    record = decode_call(
        [
            request_entry(),
            entry(2, kind="frame", body="data: a"),
            entry(3, kind="frame", body="data: b"),
        ],
        "req_1",
    )
    assert record.streamed and record.frames == [b"data: a", b"data: b"]
    assert record.last_entry_id == b"3-0"


def test_response_call() -> None:
    meta = {**META, "stream": False}
    record = decode_call([request_entry(meta), entry(2, kind="response", status=503, body="{}")])
    assert not record.streamed and record.response_status == 503


@pytest.mark.parametrize(
    ("stream", "reason"),
    [
        ([], "no request entry"),
        ([entry(1, kind="frame", body="x")], "no request entry"),
        ([entry(1, kind="request", body="{not json")], "unparsable metadata"),
        ([request_entry(), entry(2, kind="odd", body="x")], "unknown entry kind"),
        ([request_entry(), request_entry()], "second request entry"),
        (
            [request_entry(), entry(2, kind="response", status=200, body="{}")],
            "non-streamed response",
        ),
        (
            [request_entry(), entry(2, kind="frame", body="x" * (E.MAX_ENTRY_BYTES + 1))],
            "larger than",
        ),
    ],
)
def test_unusable_streams_are_input_errors(stream: list, reason: str) -> None:
    with pytest.raises(InputError, match=reason):
        decode_call(stream, "req_1")


def test_request_id_must_match_the_stream() -> None:
    with pytest.raises(InputError, match="not the stream's"):
        decode_call([request_entry()], "req_2")


def test_too_many_entries_refused() -> None:
    many = [request_entry()] + [entry(i + 2, kind="frame", body="d") for i in range(E.MAX_ENTRIES)]
    with pytest.raises(InputError, match="more than"):
        decode_call(many, "req_1")


def test_dead_letter_keeps_original_fields_and_reason() -> None:
    fields = E.dead_letter_fields("notification", "why", {b"kind": b"x"}, 5, b"9-0")
    assert fields == {
        "source": "notification",
        "reason": "why",
        "ts": 5,
        "entry_id": b"9-0",
        "orig.kind": b"x",
    }


# --- raw entries ([id, [name, value, …]], as the consumer reads call streams): the C-loop path ----

# Bodies about the size of the limits lowered below (the request entry must stay within them).
bodies = st.one_of(st.binary(max_size=12), st.integers(0, 400).map(lambda n: b"d" * n))
frame_fields = bodies.map(lambda body: [b"kind", b"frame", b"body", body])
raw_field_lists = st.one_of(
    frame_fields, frame_fields, frame_fields, frame_fields, frame_fields, frame_fields,
    st.tuples(st.sampled_from([b"response", b"odd"]),
              bodies).map(lambda kb: [b"kind", kb[0], b"body", kb[1]]),
    bodies.map(lambda body: [b"body", body, b"kind", b"frame"]),
    bodies.map(lambda body: [b"kind", b"frame", b"body", body, b"x", b"1"]),
    st.just([b"kind", b"response", b"status", b"200", b"body", b"{}"]),
)  # fmt: skip
LIMITS = (300, 700)  # MAX_ENTRY_BYTES, MAX_CALL_BYTES


def lowered_limits() -> object:
    entry_bytes, call_bytes = LIMITS
    return patch.multiple(E, MAX_ENTRY_BYTES=entry_bytes, MAX_CALL_BYTES=call_bytes)


def _as_dict(entry: list) -> tuple[bytes, dict[bytes, bytes]]:
    entry_id, fields = entry
    return entry_id, dict(zip(fields[::2], fields[1::2], strict=True))


def _outcome(stream: list) -> object:
    try:
        record = decode_call(stream, "req_1")
    except InputError as exc:
        return ("refused", str(exc))
    return (record.frames, record.response_status, record.response_body, record.last_entry_id)


@settings(max_examples=300, deadline=None)
@given(st.lists(raw_field_lists, max_size=8), st.booleans())
def test_raw_entries_decode_as_parsed_entries_do(fields: list, streamed: bool) -> None:
    """Whatever the entries, read raw or as redis-py parses them, a call decodes the same: the same
    frames, or the same refusal (with sizes near the limits, lowered here)."""
    meta = orjson.dumps({**META, "stream": streamed})
    raw = [[b"1-0", [b"kind", b"request", b"body", meta]]]
    raw += [[f"{n + 2}-0".encode(), list(f)] for n, f in enumerate(fields)]
    with lowered_limits():
        assert _outcome(raw) == _outcome([_as_dict(entry) for entry in raw])


def test_the_raw_path_is_taken_for_frames_and_not_for_others() -> None:
    """Not vacuous: plain frame entries take the C-loop path; any other entry, the loop."""
    frames = [[b"2-0", [b"kind", b"frame", b"body", b"data: a"]]]
    assert E._raw_frames(frames) == [b"data: a"]
    request = [b"1-0", [b"kind", b"request", b"body", orjson.dumps(META)]]
    with lowered_limits():
        assert _outcome([request, *frames])[0] == [b"data: a"]
        big = [[f"{n}-0".encode(), [b"kind", b"frame", b"body", b"d" * 300]] for n in (2, 3, 4)]
        assert E._raw_frames(big) is None
        assert _outcome([request, *big]) == ("refused", "call stream larger than 700 bytes")
        assert E._raw_frames([[b"2-0", [b"kind", b"frame", b"body", b"d" * 301]]]) is None
    for odd in ([b"kind", b"response", b"body", b"x"], [b"kind", b"frame", b"body", b"x", b"a", b"b"],
                {b"kind": b"frame", b"body": b"x"}, [b"kind", b"frame", b"body"]):  # fmt: skip
        assert E._raw_frames([*frames, [b"3-0", odd]]) is None, odd


# --- bodies in parts: a frame or response with more=1, then part entries (docs/events.md §1) -------

M = E.MAX_ENTRY_BYTES


def raw(n: int, *fields: bytes) -> list:
    return [f"{n}-0".encode(), list(fields)]


def both_ways(stream: list) -> list:
    """``stream`` (raw entries) as Redis sends them and as redis-py parses them: the same call."""
    return [stream, [_as_dict(e) for e in stream]]


def test_a_frame_in_parts_is_joined_into_one_frame() -> None:
    request = raw(1, b"kind", b"request", b"body", orjson.dumps(META))
    stream = [
        request,
        raw(2, b"kind", b"frame", b"body", b"data: a\n\n"),
        raw(3, b"kind", b"frame", b"body", b'data: {"x":', b"more", b"1"),
        raw(4, b"kind", b"part", b"body", b'"yy', b"more", b"1"),
        raw(5, b"kind", b"part", b"body", b'y"}\n\n'),
        raw(6, b"kind", b"frame", b"body", b"data: [DONE]\n\n"),
    ]
    for entries in both_ways(stream):
        record = decode_call(entries, "req_1")
        assert record.frames == [b"data: a\n\n", b'data: {"x":"yyy"}\n\n', b"data: [DONE]\n\n"]
        assert record.last_entry_id == b"6-0"


def test_a_response_in_parts_is_joined_into_its_body() -> None:
    request = raw(1, b"kind", b"request", b"body", orjson.dumps({**META, "stream": False}))
    stream = [
        request,
        raw(2, b"kind", b"response", b"status", b"200", b"body", b'{"a":', b"more", b"1"),
        raw(3, b"kind", b"part", b"body", b"1}"),
    ]
    for entries in both_ways(stream):
        record = decode_call(entries, "req_1")
        assert (record.response_status, record.response_body) == (200, b'{"a":1}')


@pytest.mark.parametrize(
    ("after", "frames"),
    [
        ([], [b"data: {\"cut"]),  # the stream ends: the body was cut
        ([raw(4, b"kind", b"frame", b"body", b"data: [DONE]\n\n")],
         [b"data: {\"cut", b"data: [DONE]\n\n"]),  # another frame follows
    ],
)  # fmt: skip
def test_a_body_whose_part_never_came_is_what_came(after: list, frames: list) -> None:
    stream = [
        raw(1, b"kind", b"request", b"body", orjson.dumps(META)),
        raw(2, b"kind", b"frame", b"body", b"data: {", b"more", b"1"),
        raw(3, b"kind", b"part", b"body", b'"cut', b"more", b"1"),
        *after,
    ]
    for entries in both_ways(stream):
        assert decode_call(entries, "req_1").frames == frames


@pytest.mark.parametrize(
    ("entries", "reason"),
    [
        ([raw(2, b"kind", b"part", b"body", b"x")], "entry 2-0 is a part that continues no entry"),
        ([raw(2, b"kind", b"frame", b"body", b"a", b"more", b"1"),
          raw(3, b"kind", b"part", b"body", b"b"),
          raw(4, b"kind", b"part", b"body", b"c")],
         "entry 4-0 is a part that continues no entry"),  # the part before it had no more=1
        ([raw(2, b"kind", b"frame", b"body", b"a"),
          raw(3, b"kind", b"part", b"body", b"b")],
         "entry 3-0 is a part that continues no entry"),
        ([raw(2, b"kind", b"frame", b"body", b"a", b"more", b"yes")], "entry 2-0 with bad more"),
        ([raw(2, b"kind", b"frame", b"body", b"a", b"more", b"1"),
          raw(3, b"kind", b"part", b"body", b"b" * (M + 1))],
         f"entry 3-0 larger than {M} bytes"),  # each part within the entry limit
    ],
)  # fmt: skip
def test_stray_parts_and_oversized_parts_are_refused_naming_the_entry(
    entries: list, reason: str
) -> None:
    request = raw(1, b"kind", b"request", b"body", orjson.dumps(META))
    for stream in both_ways([request, *entries]):
        with pytest.raises(InputError, match=reason):
            decode_call(stream, "req_1")


def test_parts_count_toward_the_call_limit() -> None:
    """32 MiB for the call, every part counted: a body in parts is no way around it."""
    request = raw(1, b"kind", b"request", b"body", orjson.dumps(META))
    piece = b"d" * M
    count = E.MAX_CALL_BYTES // M  # exactly the call limit, then one byte more
    inside = [raw(2, b"kind", b"frame", b"body", piece, b"more", b"1")]
    inside += [raw(n, b"kind", b"part", b"body", piece, b"more", b"1") for n in range(3, count + 2)]
    assert len(decode_call([request, *inside], "req_1").frames[0]) == E.MAX_CALL_BYTES
    over = [*inside, raw(count + 2, b"kind", b"part", b"body", b"d")]
    with pytest.raises(InputError, match=f"call stream larger than {E.MAX_CALL_BYTES} bytes"):
        decode_call([request, *over], "req_1")


def _decoded(commands: list, streamed: bool) -> E.CallRecord:
    """``commands`` (a call's ``XAdd``s after its request entry) as the worker reads them back."""
    stream = [raw(1, b"kind", b"request", b"body", orjson.dumps({**META, "stream": streamed}))]
    for n, command in enumerate(commands, start=2):
        assert isinstance(command, XAdd)
        assert len(command.fields["body"]) <= E.MAX_ENTRY_BYTES  # each entry within the limit
        fields = [part for name, value in command.fields.items() for part in (name.encode(), value)]
        stream.append(raw(n, *fields))
    records = [decode_call(entries, "req_1") for entries in both_ways(stream)]
    assert records[0] == records[1]
    return records[0]


def sized(seed: bytes, size: int) -> bytes:
    return (seed * (size // len(seed) + 1))[:size]


# Sizes about the entry limit and its multiples, and small ones: bodies of up to 3 MiB and a bit.
sizes = st.one_of(
    st.integers(0, 40),
    st.sampled_from([M - 1, M, M + 1, 2 * M - 1, 2 * M, 2 * M + 1]),
    st.integers(M - 3, 3 * M + 3),
)
big_bodies = st.builds(sized, st.binary(min_size=1, max_size=7), sizes)


@settings(max_examples=40, deadline=None)
@given(st.lists(big_bodies, max_size=4), st.sampled_from([None, "ids"]))
@example([b"data: x\n\n", sized(b"ab", 2 * M + 1), b"", sized(b"\n", M)], "ids")
def test_the_publishers_split_decodes_to_the_events_written(events: list, ids: str | None) -> None:
    """Whatever the events' sizes (over the entry limit too): the publisher's entries decode to
    exactly the events it was given, one frame each, and every entry is within the limit (and,
    with ids, under an id of its own: a piece too)."""
    counter = iter(range(1, 10**6))
    next_id = (lambda: f"1-{next(counter)}") if ids else None
    commands = frame_commands(Keys("k"), "req_1", events, next_id)
    assert _decoded(commands, True).frames == events
    if ids:
        assert len({c.entry_id for c in commands if isinstance(c, XAdd)}) == len(commands)


@settings(max_examples=40, deadline=None)
@given(big_bodies, st.integers(100, 599))
@example(sized(b'{"a":', 3 * M + 3), 200)
def test_the_publishers_split_decodes_to_the_response_written(body: bytes, status: int) -> None:
    record = _decoded(response_commands(Keys("k"), "req_1", status, body), False)
    assert (record.response_status, record.response_body) == (status, body)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=1000), max_size=5), st.binary(max_size=1000))
def test_the_split_of_any_bytes_decodes_to_them(events: list, body: bytes) -> None:
    """Any bytes at all, with the entry limit lowered to 300 (in the publisher and the worker)."""
    with patch.multiple(E, MAX_ENTRY_BYTES=300), patch.multiple(P, MAX_ENTRY_BYTES=300):
        assert _decoded(P.frame_commands(Keys("k"), "req_1", events), True).frames == events
        record = _decoded(P.response_commands(Keys("k"), "req_1", 200, body), False)
        assert record.response_body == body
