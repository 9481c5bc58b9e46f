"""Reading the providers' exports: the fixtures written from their API references, the rounding of
costs, and a clear error naming the file and the JSON path for everything else."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.upstream.exports import ExportError, line_item_model, micros_half_even, read_export

FIXTURES = Path(__file__).parent.parent / "fixtures" / "upstream"


def load(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def test_every_fixture_says_where_its_shape_comes_from() -> None:
    for export in FIXTURES.glob("*.json"):
        note = export.with_suffix(".source.txt")
        assert note.exists(), export.name
        assert export.name in note.read_text()


def test_openai_usage_page() -> None:
    export = read_export("openai", load("openai_usage_completions.json"), "usage.json")
    assert export.costs == ()
    first, second = export.usage
    assert first.bucket_start == datetime(2025, 7, 1, tzinfo=UTC)
    assert first.bucket_end == datetime(2025, 7, 2, tzinfo=UTC)
    assert (first.model, first.project_id, first.api_key_id) == (
        "gpt-4o-mini-2024-07-18", "proj_abc", "key_abc",
    )  # fmt: skip
    assert (first.requests, first.input_tokens, first.cached_tokens, first.output_tokens) == (
        5, 5000, 4000, 1000,
    )  # fmt: skip
    assert (first.batch, first.service_tier) == ("false", "default")
    assert (second.model, second.api_key_id, second.requests) == ("gpt-4o-2024-08-06", "key_def", 2)


def test_openai_costs_page_rounds_half_even_and_says_so() -> None:
    export = read_export("openai", load("openai_costs.json"), "costs.json")
    assert export.usage == ()
    amounts = [(c.line_item, c.model, c.amount, c.amount_micros, c.rounded) for c in export.costs]
    assert amounts == [
        ("gpt-4o-mini-2024-07-18, input", "gpt-4o-mini-2024-07-18", Decimal("0.06"), 60_000, False),
        ("gpt-4o-mini-2024-07-18, output", "gpt-4o-mini-2024-07-18", Decimal("0.0123456789"), 12_346, True),
        ("gpt-4o-2024-08-06, input", "gpt-4o-2024-08-06", Decimal("0.0060005"), 6_000, True),
    ]  # fmt: skip


def test_anthropic_messages_usage_report() -> None:
    export = read_export("anthropic", load("anthropic_messages_usage.json"), "claude.json")
    (row,) = export.usage
    assert row.requests is None  # the report counts no requests
    # input = uncached 1500 + cache reads 200 + cache writes 1000 (1h) + 500 (5m)
    assert (row.input_tokens, row.cached_tokens, row.cache_write_tokens, row.output_tokens) == (
        3200, 200, 1500, 500,
    )  # fmt: skip
    assert (row.model, row.project_id, row.api_key_id) == (
        "claude-sonnet-4-20250514", "wrkspc_01JwQvzr7rXLA5AGx3HKfFUJ", "apikey_01Rj2N8SVvo6BePZj99NhmiT",
    )  # fmt: skip
    assert row.bucket_start == datetime(2025, 8, 1, tzinfo=UTC)


def test_a_list_of_pages_is_read_as_one_export() -> None:
    page = orjson.loads(load("openai_usage_completions.json"))
    second = {
        **page,
        "data": [{**page["data"][0], "start_time": 1751500800, "end_time": 1751587200}],
    }
    export = read_export("openai", orjson.dumps([page, second]), "two.json")
    assert len(export.usage) == 4
    # the same page twice (two downloads of one period in one file) is one page, never summed
    export = read_export("openai", orjson.dumps([page, page]), "same.json")
    assert len(export.usage) == 2 and sum(r.input_tokens for r in export.usage) == 6200


def _usage_page(**row: object) -> bytes:
    base = {
        "object": "organization.usage.completions.result", "input_tokens": 10,
        "output_tokens": 2, "num_model_requests": 1, "model": "gpt-4o",
    }  # fmt: skip
    bucket = {"object": "bucket", "start_time": 0, "end_time": 86400, "results": [{**base, **row}]}
    return orjson.dumps({"object": "page", "data": [bucket]})


@pytest.mark.parametrize(
    ("provider", "raw", "message"),
    [
        ("openai", b"{not json", "f.json: not JSON"),
        ("openai", b'{"object": "list", "data": []}', "f.json: $.object: expected 'page'"),
        ("openai", _usage_page(input_tokens=-1), "$.data[0].results[0].input_tokens: count -1"),
        ("openai", _usage_page(output_tokens="2"), "$.data[0].results[0].output_tokens: expected an integer"),
        ("openai", _usage_page(num_model_requests=None), "$.data[0].results[0].num_model_requests: missing"),
        ("openai", _usage_page(input_cached_tokens=11), "input_cached_tokens: larger than input_tokens"),
        ("openai", _usage_page(object="organization.usage.embeddings.result"), "results[0].object: not a completions"),
        ("openai", _usage_page(model="gpt\x1b[2J"), "results[0].model: expected a printable string"),
        (
            "openai",
            orjson.dumps({"object": "page", "data": [{"object": "bucket", "start_time": 5, "end_time": 5, "results": []}]}),
            "$.data[0]: end_time is not after start_time",
        ),
        (
            "openai",
            orjson.dumps({"object": "page", "data": [{"object": "bucket", "start_time": 0, "end_time": 86400, "results": [
                {"object": "organization.costs.result", "amount": {"value": 1.5, "currency": "eur"}}]}]}),
            "$.data[0].results[0].amount.currency: only USD",
        ),
        (
            "openai",
            orjson.dumps({"object": "page", "data": [{"object": "bucket", "start_time": 0, "end_time": 86400, "results": [
                {"object": "organization.costs.result", "amount": {"value": "NaN", "currency": "usd"}}]}]}),
            "$.data[0].results[0].amount.value: out of range",
        ),
        ("anthropic", orjson.dumps({"data": [{"starting_at": "yesterday", "ending_at": "2025-08-02T00:00:00Z", "results": []}]}), "$.data[0].starting_at"),
        ("anthropic", orjson.dumps([{"data": [{"starting_at": "2025-08-01T00:00:00Z", "ending_at": "2025-08-02T00:00:00Z", "results": [{"output_tokens": 1}]}]}]), "$[0].data[0].results[0].uncached_input_tokens: missing"),
    ],
)  # fmt: skip
def test_bad_input_names_the_file_and_the_json_path(
    provider: str, raw: bytes, message: str
) -> None:
    with pytest.raises(ExportError) as caught:
        read_export(provider, raw, "f.json")
    assert str(caught.value).startswith("f.json")
    assert message in str(caught.value)


@given(st.decimals(min_value=-1000, max_value=1000, places=12, allow_nan=False))
def test_half_even_rounding_against_exact_fractions(amount: Decimal) -> None:
    exact = Fraction(amount) * 1_000_000
    floor = exact.numerator // exact.denominator
    rest = exact - floor
    expected = floor + (1 if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and floor % 2) else 0)
    assert micros_half_even(amount) == expected


@pytest.mark.parametrize(
    ("line_item", "model"),
    [("gpt-4o-2024-08-06, input", "gpt-4o-2024-08-06"), ("ft:gpt-4o-mini:org::x, output", "ft:gpt-4o-mini:org::x"),
     ("web search tool calls", ""), ("", "")],
)  # fmt: skip
def test_line_item_model(line_item: str, model: str) -> None:
    assert line_item_model(line_item) == model
