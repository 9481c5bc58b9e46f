"""The request metadata's optional ``upstream_key``: a label naming a key, never the key itself."""

from __future__ import annotations

import pytest

from worker.core.errors import RequestMetaError
from worker.core.request import request_from_dict

BASE = {
    "request_id": "r1", "account_id": "a1", "model": "gpt-4o", "stream": True,
    "reserved_micros": 10, "created_at": "2026-01-01T00:00:00Z",
}  # fmt: skip


@pytest.mark.parametrize("label", ["key_abc123", "team-a", "apikey_01Rj2N8S", "proj:eu.1"])
def test_labels_are_kept(label: str) -> None:
    assert request_from_dict({**BASE, "upstream_key": label}).upstream_key == label


def test_absent_is_none() -> None:
    assert request_from_dict(BASE).upstream_key is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (7, "expected a string"),
        ("", "empty"),
        ("k" * 65, "longer than 64"),
        ("team a", "only letters, digits"),
        ("key\x1b[2J", "only letters, digits"),
        ("sk-proj-abcdefghijklmnop", "looks like an API key secret"),
        ("sk-ant-api03-abcdefgh", "looks like an API key secret"),
        ("SK_live_abc", "looks like an API key secret"),
    ],
)
def test_refused(value: object, message: str) -> None:
    with pytest.raises(RequestMetaError, match=message) as caught:
        request_from_dict({**BASE, "upstream_key": value})
    if isinstance(value, str) and value.lower().startswith("sk"):
        assert value not in str(caught.value)  # a secret is never echoed
