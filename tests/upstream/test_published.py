"""The exports as the providers publish them (issue 37): every documented grouping and tier read,
dated ids matched to their alias, leaks priced at the tier the export names, the Anthropic cost
report, incomplete pages, and errors that name file, path and field. Pure and fast."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import orjson
import pytest

from worker.core.prices import load_price_book
from worker.core.result import Usage
from worker.reports.upstream import margin_totals
from worker.upstream.exports import ExportError, line_item_model, read_export
from worker.upstream.matching import (
    Ledger,
    Margin,
    Reconciliation,
    match_model,
    priced_upstream,
    reconcile,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "upstream"
BOOK = load_price_book()
DAY = date(2025, 10, 1)
AT = datetime(2025, 10, 1, tzinfo=UTC)


def load(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def test_an_anthropic_dated_id_is_matched_to_its_alias() -> None:
    # the gateway sent the alias, the usage report names the snapshot the alias resolved to
    assert match_model(BOOK, "claude-sonnet-4-5-20250929", DAY) == "claude-sonnet-4-5"
    assert match_model(BOOK, "claude-haiku-4-5-20251001", DAY) == "claude-haiku-4-5"
    assert match_model(BOOK, "claude-sonnet-4-5-20251399", DAY) == "claude-sonnet-4-5-20251399"
    ledger = {
        (
            "2025-10-01",
            "anthropic",
            match_model(BOOK, "claude-sonnet-4-5", DAY),
            "",
            "default",
        ): Ledger(calls=1, billed_calls=1, billed_input=1000, billed_output=100)
    }
    served = "claude-sonnet-4-5-20250929"
    upstream = {
        (
            "2025-10-01",
            "anthropic",
            match_model(BOOK, served, DAY),
            "k",
            "default",
        ): priced_upstream(BOOK, "anthropic", served, DAY, "standard", Usage(1000, 100), None)
    }
    (row,) = reconcile(ledger, upstream, {}, BOOK).rows
    assert (row.leak_input, row.leak_output, row.over_input, row.over_output) == (0, 0, 0, 0)


def _all_leaked(model: str, tier: str | None, usage: Usage, provider: str = "openai") -> object:
    up = priced_upstream(BOOK, provider, model, DAY, tier, usage, None)
    grain = ("2025-10-01", provider, model, "k", tier or "default")
    (row,) = reconcile({}, {grain: up}, {}, BOOK).rows
    return row.leak_cost


def test_a_leak_is_priced_at_the_tier_the_export_names() -> None:
    usage = Usage(prompt_tokens=10_000, completion_tokens=2_000)
    default = BOOK.price_for("gpt-4o", AT)
    batch = BOOK.price_for("gpt-4o", AT, tier="batch")
    assert default is not None and batch is not None and batch.input < default.input
    assert _all_leaked("gpt-4o", None, usage) == 10_000 * default.input + 2_000 * default.output
    assert _all_leaked("gpt-4o", "batch", usage) == 10_000 * batch.input + 2_000 * batch.output
    # a tier the book has no row for is unpriced, never priced at the default tier's price
    assert BOOK.price_for("gpt-4o", AT, tier="flex") is None
    assert _all_leaked("gpt-4o", "flex", usage) is None


def test_cache_reads_and_writes_are_priced_by_kind_and_lifetime() -> None:
    price = BOOK.price_for("claude-sonnet-4-5", AT, provider="anthropic")
    assert price is not None and price.cache_write is not None and price.cache_write_1h is not None
    # 1000 uncached, 2000 cache reads, 300 5-minute writes, 400 1-hour writes; 500 output
    usage = Usage(3700, 500, cached_tokens=2000, cache_write_tokens=700, cache_write_1h_tokens=400)
    expected = (
        1000 * price.input + 2000 * price.cached_input + 300 * price.cache_write
        + 400 * price.cache_write_1h + 500 * price.output
    )  # fmt: skip
    cost = _all_leaked("claude-sonnet-4-5", "standard", usage, "anthropic")
    assert cost == int(expected.to_integral_value(rounding="ROUND_HALF_UP"))


def test_every_openai_grouping_reads_and_parts_of_a_row_are_summed() -> None:
    export = read_export("openai", load("openai_usage_grouped.json"), "g.json")
    rows = {(r.batch, r.service_tier): r for r in export.usage}
    assert set(rows) == {("false", "default"), ("true", "default"), ("false", "priority")}
    summed = rows[("false", "default")]  # user_a/responses + user_b/chat_completions
    assert (summed.requests, summed.input_tokens, summed.cached_tokens, summed.output_tokens) == (
        3, 4000, 400, 400,
    )  # fmt: skip
    assert summed.bucket_end - summed.bucket_start == datetime(1970, 1, 1, 1) - datetime(1970, 1, 1)
    # has_more true and no next page in the file: the export says it is incomplete
    (gap,) = export.gaps
    assert (gap.provider, gap.kind, gap.after) == (
        "openai",
        "usage",
        datetime(2025, 7, 1, 1, tzinfo=UTC),
    )


@pytest.mark.parametrize(
    ("line_item", "model"),
    [
        ("priority | gpt-4o-2024-08-06, input", "gpt-4o-2024-08-06"),
        ("flex | o3-2025-04-16, output", "o3-2025-04-16"),
        ("gpt-4.1-2025-04-14, input, long context", "gpt-4.1-2025-04-14"),
        ("gpt-4o-2024-08-06, cached input", "gpt-4o-2024-08-06"),
        ("priority | gpt-4o, cached input, long context", "gpt-4o"),
        ("web search tool calls", ""),
    ],
)
def test_a_cost_line_item_names_its_model_whatever_its_tier_and_qualifiers(
    line_item: str, model: str
) -> None:
    assert line_item_model(line_item) == model


def test_the_anthropic_cost_report_is_read_in_cents() -> None:
    export = read_export("anthropic", load("anthropic_cost_report.json"), "cost.json")
    assert export.usage == ()
    (cost,) = export.costs
    assert cost.amount == Decimal("1.2378912")
    assert (cost.amount_micros, cost.rounded) == (1_237_891, True)  # half-even, documented
    assert (cost.model, cost.project_id) == (
        "claude-sonnet-4-20250514",
        "wrkspc_01JwQvzr7rXLA5AGx3HKfFUJ",
    )
    assert cost.line_item.startswith("Claude Sonnet 4 Usage - Input Tokens | ")


@pytest.mark.parametrize(
    "tier", ["standard", "batch", "priority", "priority_on_demand", "flex", "flex_discount"]
)
def test_every_anthropic_service_tier_reads(tier: str) -> None:
    page = orjson.loads(load("anthropic_messages_usage.json"))
    page["data"][0]["results"][0].update(service_tier=tier, inference_geo="us", speed="fast")
    (row,) = read_export("anthropic", orjson.dumps(page), "t.json").usage
    assert row.service_tier == tier
    assert (row.cache_write_tokens, row.cache_write_1h_tokens) == (1500, 1000)


def _bad(provider: str, page: dict) -> str:
    with pytest.raises(ExportError) as caught:
        read_export(provider, orjson.dumps(page), "f.json")
    return str(caught.value)


def test_a_label_longer_than_its_column_is_refused_on_every_engine() -> None:
    page = orjson.loads(load("openai_usage_completions.json"))
    page["data"][0]["results"][0]["service_tier"] = "t" * 32
    assert read_export("openai", orjson.dumps(page), "f.json").usage[0].service_tier == "t" * 32
    page["data"][0]["results"][0]["service_tier"] = "t" * 33
    assert _bad("openai", page) == (
        "f.json: $.data[0].results[0].service_tier: expected a printable string of at most 32 "
        "characters"
    )


def test_errors_name_file_path_and_field_without_a_python_repr() -> None:
    page = orjson.loads(load("anthropic_cost_report.json"))
    page["data"][0]["results"][0]["amount"] = 123.5
    assert _bad("anthropic", page) == (
        "f.json: $.data[0].results[0].amount: expected a decimal string of cents, got number"
    )
    page["data"][0]["results"][0].update(amount="12", currency=["EUR"])
    message = _bad("anthropic", page)
    assert message == "f.json: $.data[0].results[0].currency: only USD is read, got array"
    assert "[" not in message.split(": ", 2)[2] and "'" not in message


def test_a_dashboard_csv_is_refused_in_one_line() -> None:
    raw = b"date,project,model,cost\n2025-07-01,proj_abc,gpt-4o,1.23\n"
    with pytest.raises(ExportError) as caught:
        read_export("openai", raw, "usage.csv")
    message = str(caught.value)
    assert message.startswith("usage.csv: not a JSON export; a dashboard CSV download is not read")
    assert "\n" not in message


def test_the_margin_total_is_charged_minus_cost_as_its_rows() -> None:
    costed = Margin("2025-10-01", "openai", "gpt-4o", 900, 500)  # type: ignore[arg-type]
    uncosted = Margin("2025-10-01", "openai", "o3", 300, None)  # type: ignore[arg-type]
    total = margin_totals(Reconciliation((), (costed, costed)))
    assert total == {"charged": 1800, "upstream_cost": 1000, "margin": 800}
    total = margin_totals(Reconciliation((), (costed, uncosted)))
    # never the costed rows' margin (400) beside a charge of all rows (1200)
    assert total["charged"] == 1200 and total["margin"] is None
