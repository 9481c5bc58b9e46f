import orjson
import pytest

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
