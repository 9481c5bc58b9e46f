"""Request metadata as a broken or hostile gateway sends it: hypothesis strategies for every field
that reaches a column, and what those columns accept on both engines (``tests/test_request.py``
checks the parser with them, ``tests/ledger/test_request_columns.py`` the database)."""

from __future__ import annotations

import math
from datetime import timedelta

from hypothesis import strategies as st

from worker.core.request import (
    EARLIEST_CREATED_AT,
    LATEST_CREATED_AT,
    MAX_CHOICES,
    MAX_ID_CHARS,
    MAX_RESERVED_MICROS,
    RequestMeta,
)

BASE = {
    "request_id": "req_1",
    "account_id": "acct_1",
    "model": "gpt-4o",
    "stream": True,
    "reserved_micros": 5000,
    "created_at": "2026-11-30T12:00:00Z",
    "messages": [{"role": "user", "content": "hi"}],
}

# Values each field may arrive with: plausible ones, and what a broken or hostile gateway sends.
_TEXT = st.one_of(
    st.text(max_size=5),
    st.text(min_size=195, max_size=205),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=250),
    st.sampled_from(["req\x00", "\ud800x", "\x1b[2J", "a" * 200, "a" * 201, "", "gpt-4o"]),
)
_INT = st.one_of(
    st.integers(min_value=-5, max_value=10**12 + 5),
    st.sampled_from([2**31, 2**63 - 1, 2**63, 2**64 - 1, -(2**63), -(2**63) - 1, 10**12]),
    st.integers(),
)
_ANY = st.one_of(
    st.none(), st.booleans(), _INT, st.floats(allow_nan=False), _TEXT, st.lists(st.integers())
)
_TIME = st.one_of(
    st.datetimes(timezones=st.timezones()).map(lambda t: t.isoformat()),
    st.sampled_from(["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-12:00", "2026-11-30"]),
    _TEXT,
)
FIELDS = {
    "request_id": st.one_of(_TEXT, _ANY),
    "account_id": st.one_of(_TEXT, _ANY),
    "client_request_id": st.one_of(_TEXT, _ANY),
    "model": st.one_of(_TEXT, _ANY),
    "stream": st.one_of(st.booleans(), _ANY),
    "reserved_micros": st.one_of(_INT, _ANY),
    "created_at": st.one_of(_TIME, _ANY),
    "n": st.one_of(_INT, _ANY),
    "max_tokens": st.one_of(_INT, _ANY),
    "seed": st.one_of(_INT, _ANY),
    "temperature": st.one_of(st.floats(), _INT, _ANY),
}


@st.composite
def hostile_metadata(draw: st.DrawFn) -> dict:
    """BASE with some fields replaced by arbitrary values (and some removed)."""
    data = dict(BASE)
    for name in draw(st.sets(st.sampled_from(sorted(FIELDS)), min_size=1, max_size=3)):
        if draw(st.integers(0, 9)) == 0:
            data.pop(name, None)
        else:
            data[name] = draw(FIELDS[name])
    return data


def assert_fits_every_column(meta: RequestMeta) -> None:
    """What the reservation, account, ledger-account and money_daily columns accept on both
    engines (VARCHAR(200), text without NUL, BIGINT sums, timestamps), and the stated limits."""
    ids = (meta.request_id, meta.account_id, meta.model)
    for value in (*ids, *((meta.client_request_id,) if meta.client_request_id else ())):
        assert isinstance(value, str) and 1 <= len(value) <= MAX_ID_CHARS
        assert "\x00" not in value
        value.encode("utf-8")  # what psycopg sends; a lone surrogate would raise here
    assert isinstance(meta.reserved_micros, int) and not isinstance(meta.reserved_micros, bool)
    assert 0 <= meta.reserved_micros <= MAX_RESERVED_MICROS
    assert EARLIEST_CREATED_AT <= meta.created_at < LATEST_CREATED_AT
    assert meta.created_at.utcoffset() == timedelta(0)
    assert 1 <= meta.n <= MAX_CHOICES
    for value in (meta.seed, meta.max_tokens):
        assert value is None or -(2**63) <= value < 2**63
    assert meta.temperature is None or math.isfinite(meta.temperature)
