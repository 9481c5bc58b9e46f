from datetime import UTC, datetime

import orjson
import pytest
from hypothesis import given, settings
from metadata_values import assert_fits_every_column, hostile_metadata

from worker.core.errors import RequestMetaError
from worker.core.request import parse_request, request_from_dict

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


# --- the boundary: every value that reaches a column, checked once, the same for both engines ---


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"request_id": "req\x00nul"}, "request_id: holds a control character"),
        ({"account_id": "acct\x00nul"}, "account_id: holds a control character"),
        ({"model": "gpt-4o\x00"}, "model: holds a control character"),
        ({"model": "gpt\x1b[31m-4o"}, "model: holds a control character"),
        ({"account_id": "acct\x9b"}, "account_id: holds a control character"),
        ({"request_id": "r" * 201}, "request_id: longer than 200 characters"),
        ({"account_id": "a" * 201}, "account_id: longer than 200 characters"),
        ({"model": "m" * 201}, "model: longer than 200 characters"),
        ({"account_id": ""}, "account_id: empty"),
        ({"model": ""}, "model: empty"),
        ({"reserved_micros": 2**63 - 1}, "reserved_micros: more than 1000000000000"),
        ({"reserved_micros": 2**64 - 1}, "reserved_micros: more than"),
        ({"reserved_micros": 10**12 + 1}, "reserved_micros: more than"),
        ({"reserved_micros": "100"}, "reserved_micros: wrong type"),
        ({"created_at": "0001-01-01T00:00:00+01:00"}, "created_at: out of range"),
        ({"created_at": "9999-12-31T23:59:59-01:00"}, "created_at: out of range"),
        ({"created_at": "1999-12-31T23:59:59Z"}, "created_at: outside 2000 to 2099"),
        ({"created_at": "2100-01-01T00:00:00Z"}, "created_at: outside 2000 to 2099"),
        ({"n": 129}, "n: must be between 1 and 128"),
        ({"n": 2**63}, "n: must be between"),
        ({"seed": 2**63}, "seed: must be between"),
        ({"max_tokens": -1}, "max_tokens: must be between"),
        ({"temperature": float("inf")}, "temperature: must be finite"),
        ({"temperature": 10**400}, "temperature: must be finite"),
    ],
)
def test_values_no_column_can_hold_are_refused_naming_the_field(change: dict, message: str) -> None:
    with pytest.raises(RequestMetaError, match=message.replace("[", r"\[")):
        request_from_dict({**BASE, **change})


def test_the_limits_themselves_are_accepted() -> None:
    meta = request_from_dict(
        {
            **BASE,
            "request_id": "r" * 200,
            "account_id": "ä" * 200,  # characters, not bytes: VARCHAR(200) counts characters
            "model": "m" * 200,
            "reserved_micros": 10**12,
            "created_at": "2099-12-31T23:59:59.999999Z",
            "n": 128,
            "seed": -(2**63),
        }
    )
    assert meta.reserved_micros == 10**12
    assert meta.created_at == datetime(2099, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


def test_the_digest_names_the_request_entry_and_not_the_prompt() -> None:
    body = orjson.dumps(BASE)
    first = parse_request(body, b"1764504000000-0")
    again = parse_request(body, b"1764504000000-0")
    other_entry = parse_request(body, b"1764504000001-0")
    other_prompt = parse_request(
        orjson.dumps({**BASE, "messages": [{"role": "user", "content": "other"}]}),
        b"1764504000000-0",
    )
    assert parse_request(body).digest is None  # not read from a stream: unknown
    assert first.digest is not None and len(first.digest) == 64
    assert again.digest == first.digest  # a redelivery reads the same entry
    assert other_entry.digest != first.digest  # a second call is a second entry
    assert other_prompt.digest == first.digest  # the prompt is no part of what is stored


@settings(max_examples=300, deadline=None)
@given(hostile_metadata())
def test_arbitrary_metadata_parses_into_column_values_or_is_a_named_refusal(data: dict) -> None:
    try:
        meta = request_from_dict(data)
    except RequestMetaError:
        return
    assert_fits_every_column(meta)


def test_account_fallback_is_a_note_made_harmless() -> None:
    from worker.core.errors import RequestMetaError
    from worker.core.request import MAX_NOTE_CHARS, request_from_dict

    base = {"request_id": "r", "account_id": "a", "model": "m", "stream": False,
            "reserved_micros": 0, "created_at": "2026-11-30T00:00:00Z"}  # fmt: skip
    assert request_from_dict(base).account_fallback is None
    meta = request_from_dict({**base, "account_fallback": "bad\x00id\ud800" + "x" * 900})
    assert meta.account_fallback is not None
    assert meta.account_fallback.startswith("bad\ufffdid\ufffd")
    assert len(meta.account_fallback) == MAX_NOTE_CHARS
    with pytest.raises(RequestMetaError, match="account_fallback"):
        request_from_dict({**base, "account_fallback": 7})


def test_client_request_id_is_an_optional_identifier() -> None:
    """The client's own reference (its X-Request-Id), by the same rule as the billing id."""
    assert request_from_dict(BASE).client_request_id is None
    assert request_from_dict({**BASE, "client_request_id": "abc-1"}).client_request_id == "abc-1"
    for bad in ("", " abc", "a\x00b", "x" * 201, 7):
        with pytest.raises(RequestMetaError, match="client_request_id"):
            request_from_dict({**BASE, "client_request_id": bad})
