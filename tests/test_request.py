from datetime import UTC, datetime

import orjson
import pytest

from worker.errors import RequestMetaError
from worker.request import parse_request, request_from_dict

BASE = {
    "request_id": "req_1",
    "account_id": "acct_1",
    "model": "gpt-4o",
    "stream": True,
    "reserved_micros": 5000,
    "created_at": "2026-11-30T12:00:00Z",
    "messages": [{"role": "user", "content": "hi"}],
}


def test_defaults_and_unknown_keys() -> None:
    meta = request_from_dict({**BASE, "future_field": 1})
    assert meta.include_usage is True
    assert meta.n == 1
    assert meta.created_at == datetime(2026, 11, 30, 12, tzinfo=UTC)


def test_stream_options_include_usage_is_honoured() -> None:
    meta = request_from_dict({**BASE, "stream_options": {"include_usage": False}})
    assert meta.include_usage is False


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"request_id": None}, "request_id"),
        ({"stream": "yes"}, "stream"),
        ({"reserved_micros": 1.5}, "reserved_micros"),
        ({"reserved_micros": -1}, "reserved_micros"),
        ({"reserved_micros": True}, "reserved_micros"),
        ({"created_at": "yesterday"}, "created_at"),
        ({"messages": "hi"}, "messages"),
        ({"n": 0}, "n"),
    ],
)
def test_bad_fields_are_named(change: dict, message: str) -> None:
    with pytest.raises(RequestMetaError, match=message):
        request_from_dict({**BASE, **change})


def test_missing_field_and_bad_json() -> None:
    data = dict(BASE)
    del data["account_id"]
    with pytest.raises(RequestMetaError, match="account_id: missing"):
        parse_request(orjson.dumps(data))
    with pytest.raises(RequestMetaError, match="not JSON"):
        parse_request(b"{nope")
    with pytest.raises(RequestMetaError, match="JSON object"):
        parse_request(b"[1]")
