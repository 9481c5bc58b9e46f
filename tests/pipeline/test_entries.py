from unittest.mock import patch

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.errors import InputError
from worker.pipeline import entries as E
from worker.pipeline.entries import decode_call, parse_notification

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
