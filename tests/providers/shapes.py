"""Provider-shaped calls from ``tests/fixtures/providers/<provider>/*.json``.

Each fixture is one call as a provider really shaped it: ``source`` (the public page, SDK test or
issue the shape comes from, and what in it is verbatim), ``request`` (the gateway's metadata, as in
docs/events.md), then ``frames`` (a stream: chunk objects and ``"[DONE]"``, written one SSE data
event each) or ``status`` and ``body`` (a non-streamed response).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from worker.core.prices import PriceBook, prices_from_toml
from worker.core.reconcile import reconcile_response, reconcile_stream
from worker.core.request import RequestMeta, request_from_dict
from worker.core.result import Result

PROVIDERS = Path(__file__).parent.parent / "fixtures" / "providers"
AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)

# USD per 1M tokens = micro-USD per token. The test's own book, so every expected charge below is
# the arithmetic written next to it and nothing else.
BOOK_TOML = """
[[price]]
model = "gpt-4o-2024-08-06"
input = "2.50"
cached_input = "1.25"
output = "10.00"
[[price]]
model = "gpt-4o"
input = "2.50"
cached_input = "1.25"
output = "10.00"
[[price]]
model = "gpt-4o-mini"
input = "0.15"
cached_input = "0.075"
output = "0.60"
[[price]]
model = "gpt-3.5-turbo-0613"
input = "1.50"
output = "2.00"
[[price]]
model = "llama3-8b-8192"
input = "0.05"
output = "0.08"
[[price]]
model = "deepseek-chat"
input = "0.27"
cached_input = "0.07"
output = "1.10"
[[price]]
model = "deepseek-reasoner"
input = "0.55"
cached_input = "0.14"
output = "2.19"
# OpenAI's pricing page (platform.openai.com/docs/pricing): gpt-4o-search-preview 2.50 / 10.00, web
# search tool calls "$25.00 / 1K calls" (0.025 a call), the dated snapshot priced the same.
[[price]]
model = "gpt-4o-search-preview"
snapshots = true
input = "2.50"
output = "10.00"
web_search = "0.025"
# Anthropic's pricing page (docs.anthropic.com/en/docs/about-claude/pricing): Sonnet 4.5 "1h Cache
# Writes $6 / MTok"; web search "$10 per 1,000 searches" (0.01 USD a request).
[[price]]
model = "claude-sonnet-4-5"
input = "3.00"
cached_input = "0.30"
output = "15.00"
cache_write = "3.75"
cache_write_1h = "6.00"
web_search = "0.01"
[[price]]
model = "claude-3-5-sonnet-20240620"
input = "3.00"
cached_input = "0.30"
output = "15.00"
cache_write = "3.75"
[[price]]
model = "anthropic/claude-3.7-sonnet"
input = "3.00"
cached_input = "0.30"
output = "15.00"
cache_write = "3.75"
[[price]]
model = "gemini-3-flash-preview"
input = "0.50"
cached_input = "0.05"
output = "3.00"
[[price]]
model = "gemini-2.5-flash"
input = "0.30"
cached_input = "0.03"
output = "2.50"
[[price]]
model = "grok-4.20"
input = "1.25"
cached_input = "0.20"
output = "2.50"
[[price]]
model = "grok-3-mini"
input = "0.30"
cached_input = "0.075"
output = "0.50"
[[price]]
model = "mistral-small-latest"
input = "0.10"
output = "0.30"
[[price]]
model = "magistral-medium-2509"
input = "2.00"
output = "5.00"
[[price]]
model = "meta-llama/Meta-Llama-3-8B-Instruct"
input = "0.20"
output = "0.20"
[[price]]
model = "mistralai/Mixtral-8x7B-Instruct-v0.1"
input = "0.60"
output = "0.60"
[[price]]
model = "accounts/fireworks/models/kimi-k2-instruct"
input = "0.60"
cached_input = "0.30"
output = "2.50"
[[price]]
model = "llama3.1:8b-instruct-q8_0"
input = "0.10"
output = "0.10"
[[price]]
model = "gpt-4.1-2025-04-14"
input = "2.00"
cached_input = "0.50"
output = "8.00"
[[price]]
model = "o4-mini"
input = "1.10"
cached_input = "0.275"
output = "4.40"
[[price]]
model = "sonar"
input = "1.00"
output = "1.00"
"""
BOOK = PriceBook(prices_from_toml(BOOK_TOML, "provider test book"))
# The same book without Sonnet 4.5's 1-hour cache write and web search prices: a call with either
# is unsettled unpriced_component, exposed at the rest (tests/providers/test_record.py, test_report.py).
WITHOUT_DIMENSIONS = PriceBook(
    prices_from_toml(
        BOOK_TOML.replace('cache_write_1h = "6.00"\n', "").replace('web_search = "0.01"\n', ""),
        "provider test book without dimensions",
    )
)


def fixture_names() -> list[str]:
    return sorted(str(path.relative_to(PROVIDERS)) for path in PROVIDERS.glob("*/*.json"))


def load(name: str) -> dict[str, Any]:
    return orjson.loads((PROVIDERS / name).read_bytes())


def meta_of(document: dict[str, Any], name: str, **override: Any) -> RequestMeta:
    request = {
        "request_id": f"prov-{name}",
        "account_id": "acct_prov",
        "reserved_micros": 1_000_000,
        "created_at": AT.isoformat(),
        "messages": [{"role": "user", "content": "Hello"}],
        **document["request"],
        **override,
    }
    return request_from_dict(request)


def sse(frames: list[Any]) -> bytes:
    out = []
    for frame in frames:
        data = b"[DONE]" if frame == "[DONE]" else orjson.dumps(frame)
        out.append(b"data: " + data + b"\n\n")
    return b"".join(out)


def reconcile(name: str, book: PriceBook = BOOK, **override: Any) -> Result:
    document = load(name)
    meta = meta_of(document, name, **override)
    if "frames" in document:
        return reconcile_stream(meta, sse(document["frames"]), book)
    return reconcile_response(meta, document["status"], document["body"], book)
