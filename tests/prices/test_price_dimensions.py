"""Issue 36, dimensions 1-3 and 8: time-of-day prices, per-request fees, 1-hour cache writes, images,
list-price history, and a book that keeps every pricing key of its source.

Expected charges are worked out by hand (USD per 1M tokens = micro-USD per token; half up, once),
from the published prices each test names:

* DeepSeek (https://api-docs.deepseek.com/quick_start/pricing, and its news of 2025-02-26, 2025-09-05
  and 2025-09-29): deepseek-chat 0.27 / 0.07 (cache hit) / 1.10 from 2025-02-08, with off-peak
  prices in 16:30-00:30 UTC from 2025-02-26 16:30 UTC, 50 % off (0.135 / 0.035 / 0.55), until the
  V3.1 prices of 2025-09-05 16:00 UTC (0.56 / 0.07 / 1.68, no off-peak hours).
* LiteLLM 1.110.2 (the bundled snapshot): ``deepseek-v4-pro`` 1.32e-06 / 4.4e-08 / 3.96e-06, off-peak
  6.6e-07 / 2.2e-08 / 1.98e-06 on weekdays 00:00-01:00, 04:00-06:00, 10:00-00:00 UTC and all day on
  Saturdays and Sundays; ``claude-sonnet-4-5`` ``cache_creation_input_token_cost_above_1hr`` 6e-06 and
  ``search_context_cost_per_query`` 0.01 at every size.
* Anthropic (https://docs.anthropic.com/en/docs/about-claude/pricing): 1-hour cache writes at 2x the
  input price (Sonnet 4.5: 6.00), web search "$10 per 1,000 searches".
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy.orm import Session

from worker.consumer.pricing import import_prices, stored_prices
from worker.core.errors import InputError, PriceBookError
from worker.core.prices import Price, PriceBook, load_price_book, prices_from_toml
from worker.core.prices.litellm import prices_from_litellm, unapplied_keys
from worker.core.prices.off_peak import OffPeak, Rule, rules_from
from worker.core.prices.price import EPOCH, dimensions_from_json, dimensions_to_json
from worker.core.result import Usage
from worker.core.usage import Verdict, read_usage

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
BOOK = load_price_book()


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# --- 1. time-of-day prices ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        # 800 * 0.27 + 200 * 0.07 + 500 * 1.10 = 216 + 14 + 550 = 780 (peak)
        ("2025-03-01T12:00", 780),
        ("2025-03-01T16:29", 780),
        # 800 * 0.135 + 200 * 0.035 + 500 * 0.55 = 108 + 7 + 275 = 390 (off-peak, start inclusive)
        ("2025-03-01T16:30", 390),
        ("2025-03-01T23:59", 390),
        ("2025-03-02T00:29", 390),  # the window wraps past midnight
        ("2025-03-02T00:30", 780),  # the end is exclusive
        # before the off-peak prices began (2025-02-26 16:30 UTC): the peak price at 17:00
        ("2025-02-25T17:00", 780),
        # V3.1 (from 2025-09-05 16:00 UTC): 800 * 0.56 + 200 * 0.07 + 500 * 1.68 = 448 + 14 + 840
        ("2025-09-06T17:00", 1302),
    ],
)
def test_deepseek_chat_is_priced_by_the_hour_it_was_created(when: str, expected: int) -> None:
    usage = Usage(1000, 500, cached_tokens=200)
    assert BOOK.charge("deepseek-chat", usage, at(when)) == expected


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        # 2026-12-07 is a Monday: 02:00 and 08:00 UTC are peak, 00:30, 05:00 and 12:00 off-peak
        # peak: 1M * 1.32 + 1M * 3.96 = 5,280,000; off-peak: 0.66 + 1.98 = 2,640,000
        ("2026-12-07T02:00", 5_280_000),
        ("2026-12-07T08:00", 5_280_000),
        ("2026-12-07T00:30", 2_640_000),
        ("2026-12-07T05:00", 2_640_000),
        ("2026-12-07T12:00", 2_640_000),
        ("2026-12-06T02:00", 2_640_000),  # a Sunday: off-peak all day
        ("2026-12-05T08:00", 2_640_000),  # a Saturday
    ],
)
def test_the_snapshots_off_peak_windows_price_deepseek_v4(when: str, expected: int) -> None:
    usage = Usage(1_000_000, 1_000_000)
    assert BOOK.charge("deepseek-v4-pro", usage, at(when), provider="deepseek") == expected


def test_a_hold_is_priced_at_the_peak_rates() -> None:
    price = BOOK.price_for("deepseek-v4-pro", at("2026-12-06T02:00"), provider="deepseek")
    assert price is not None and price.off_peak is not None
    usage = Usage(1_000_000, 1_000_000)
    assert price.charge(usage) == 5_280_000  # no time: the most the call can cost
    assert price.charge(usage, at("2026-12-06T02:00")) == 2_640_000


def test_weekdays_are_read_on_the_blocks_calendar() -> None:
    """2026-12-06 20:30 UTC is a Sunday in UTC and Monday 04:30 in Shanghai."""
    rules = rules_from(None, [{"hours_utc": "20:00-22:00", "weekdays": ["monday"]}], "test")
    shanghai = OffPeak(rules, "Asia/Shanghai", input=Decimal(1))
    utc = OffPeak(rules, "UTC", input=Decimal(1))
    assert shanghai.holds_at(at("2026-12-06T20:30"))
    assert not utc.holds_at(at("2026-12-06T20:30"))
    assert utc.holds_at(at("2026-12-07T20:30"))


def _oracle(windows: list[tuple[int, int]], minute: int) -> bool:
    """Minute ``minute`` of a day is in a window: an explicit set of the window's minutes."""
    covered: set[int] = set()
    for start, end in windows:
        length = (end - start) % 1440 or 1440
        covered.update((start + step) % 1440 for step in range(length))
    return minute in covered


@settings(max_examples=200, deadline=None)
@given(
    windows=st.lists(st.tuples(st.integers(0, 1439), st.integers(0, 1439)), min_size=1, max_size=3),
    minute=st.integers(0, 1439),
)
def test_a_window_holds_exactly_its_minutes(windows: list[tuple[int, int]], minute: int) -> None:
    text = [f"{s // 60:02d}:{s % 60:02d}-{e // 60:02d}:{e % 60:02d}" for s, e in windows]
    (rule,) = rules_from(text, None, "test")
    assert rule == Rule(tuple(windows))
    assert rule.holds(minute, 3) is _oracle(windows, minute)


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"hours_utc": "25:00-01:00"}, "HH:MM-HH:MM"),
        ({"hours_utc": "16:30"}, "HH:MM-HH:MM"),
        ({"windows": [{"hours_utc": "00:00-00:00", "weekdays": [8]}]}, "weekday"),
        ({"windows": [{"hours_utc": "00:00-00:00", "weekdays": "sat"}]}, "non-empty list"),
        ({"hours_utc": "16:30-00:30", "weekday_timezone": "Mars/Olympus"}, "IANA"),
        ({"hours_utc": "16:30-00:30", "discount": 0.5}, "cannot apply 'discount'"),
        ({"input_cost_per_token": 1e-7}, "at least one window"),
    ],
)
def test_an_off_peak_block_the_book_cannot_read_is_refused(block: dict, message: str) -> None:
    entry = {
        "litellm_provider": "deepseek",
        "mode": "chat",
        "input_cost_per_token": 2.8e-07,
        "output_cost_per_token": 4.2e-07,
        "off_peak_pricing": {"input_cost_per_token": 1.4e-07, **block},
    }
    with pytest.raises(PriceBookError, match=message):
        prices_from_litellm(json.dumps({"deepseek-x": entry}), "test", EPOCH)


def test_an_off_peak_prompt_in_a_band_is_unpriced_not_guessed() -> None:
    (row,) = prices_from_toml(
        """
[[price]]
model = "m"
input = "1"
output = "2"
[[price.band]]
above = 1000
input = "2"
output = "4"
[price.off_peak]
hours_utc = "00:00-00:00"
input = "0.5"
"""
    )
    assert row.charge(Usage(1000, 10), NOW) == 500 + 20  # at or below the band: off-peak input
    assert row.charge(Usage(1001, 10), NOW) is None
    assert "off-peak" in (row.unpriced_because(Usage(1001, 10), NOW) or "")
    assert row.charge(Usage(1001, 10)) == 1001 * 2 + 40  # a hold: the band's peak rates


# --- 2. per-request fees: web search --------------------------------------------------------


def test_a_web_search_is_charged_per_request_from_the_list() -> None:
    """claude-sonnet-4-5 (list): 1000 * 3.00 + 100 * 15.00 + 3 * 10000 = 34500."""
    usage = Usage(1000, 100, web_search_requests=3)
    assert BOOK.charge("claude-sonnet-4-5", usage, NOW, provider="anthropic") == 34_500


SIZED = """
[[price]]
model = "sonar-pro"
input = "3"
output = "15"
web_search = { low = "0.006", medium = "0.010", high = "0.014" }
"""


@pytest.mark.parametrize(
    ("size", "expected"),
    [("low", 100 * 3 + 6_000), ("medium", 100 * 3 + 10_000), ("high", 100 * 3 + 14_000)],
)
def test_a_search_is_priced_at_its_context_size(size: str, expected: int) -> None:
    (row,) = prices_from_toml(SIZED)
    assert row.charge(Usage(100, 0, web_search_requests=1, search_context_size=size)) == expected


def test_a_search_of_unknown_size_is_unpriced_when_sizes_differ() -> None:
    (row,) = prices_from_toml(SIZED)
    usage = Usage(100, 0, web_search_requests=1)
    assert row.charge(usage) is None
    assert "does not say its search context size" in (row.unpriced_because(usage) or "")
    (flat,) = prices_from_toml(SIZED.replace('low = "0.006"', 'low = "0.010"').replace("14", "10"))
    assert flat.charge(usage) == 300 + 10_000  # every size costs the same: no need to know it


def test_a_search_without_a_fee_is_unpriced() -> None:
    (row,) = prices_from_toml('[[price]]\nmodel = "m"\ninput = "1"\noutput = "1"\n')
    usage = Usage(10, 10, web_search_requests=2)
    assert row.charge(usage) is None
    assert "no web search price" in (row.unpriced_because(usage) or "")
    assert row.charge(Usage(10, 10)) == 20


def test_usage_reads_searches_and_ignores_web_fetches() -> None:
    block = {
        "input_tokens": 10,
        "output_tokens": 5,
        "server_tool_use": {"web_search_requests": 2, "web_fetch_requests": 4},
    }
    reading = read_usage(block)
    assert reading.verdict is Verdict.BILLABLE
    assert reading.usage == Usage(10, 5, web_search_requests=2)


def test_perplexity_reports_its_cost_as_an_object() -> None:
    """Perplexity's chat completions reference (docs.perplexity.ai/api-reference/chat-completions-post)
    gives ``usage.cost`` as an object of parts and ``total_cost`` in USD; the total is the provider's
    own charge for the cross-check, the object is not a count."""
    block = {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 15,
        "cost": {
            "input_tokens_cost": 0.00003,
            "output_tokens_cost": 0.000075,
            "request_cost": 0.006,
            "total_cost": 0.006105,
        },
    }
    reading = read_usage(block)
    assert reading.verdict is Verdict.BILLABLE
    assert reading.provider_cost_micros == 6105


# --- 3. 1-hour cache writes; images ---------------------------------------------------------


def test_one_hour_cache_writes_are_priced_from_the_list() -> None:
    """claude-sonnet-4-5 (list): 100 input, 400 5-minute writes, 500 1-hour writes, 10 output:
    100 * 3.00 + 400 * 3.75 + 500 * 6.00 + 10 * 15.00 = 300 + 1500 + 3000 + 150 = 4950."""
    usage = Usage(1000, 10, cache_write_tokens=900, cache_write_1h_tokens=500)
    assert BOOK.charge("claude-sonnet-4-5", usage, NOW, provider="anthropic") == 4950


def test_one_hour_writes_beyond_the_writes_are_refused() -> None:
    block = {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_creation_input_tokens": 100,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 101},
    }
    assert read_usage(block).verdict is Verdict.IMPLAUSIBLE


def test_image_tokens_cost_the_image_price_where_the_row_has_one() -> None:
    text = '[[price]]\nmodel = "m"\ninput = "2"\noutput = "10"\n'
    (plain,) = prices_from_toml(text)
    (imaged,) = prices_from_toml(text + 'image_input = "1.25"\n')
    usage = Usage(1000, 10, image_prompt_tokens=800)
    assert plain.charge(usage) == 1000 * 2 + 100  # images at the input price
    assert imaged.charge(usage) == 200 * 2 + 800 * 1.25 + 100  # 400 + 1000 + 100


# --- the book keeps every pricing key -------------------------------------------------------


def test_the_snapshot_keeps_pricing_keys_the_book_does_not_apply() -> None:
    price = BOOK.price_for("gpt-5.4", NOW)
    assert price is not None
    assert "fedramp_uplift_multiplier" in price.unapplied
    assert "regional_processing_uplift_multiplier_eu" in price.unapplied
    path = dict(price.dimensions_path(NOW))
    assert "source keys the book does not apply: fedramp_uplift_multiplier" in path["unapplied"]
    off_peak = dict(BOOK.resolve("deepseek-chat", at("2025-03-01T17:00")).path)
    assert off_peak["time_of_day"].startswith("off-peak at 2025-03-01T17:00:00+00:00")
    peak = dict(BOOK.resolve("deepseek-chat", at("2025-03-01T12:00")).path)
    assert peak["time_of_day"].startswith("peak at")


def test_a_new_pricing_key_is_unapplied_and_zero_or_descriptive_keys_are_not() -> None:
    entry = {
        "litellm_provider": "openai",
        "mode": "chat",
        "input_cost_per_token": 1e-06,
        "input_cost_per_token_ultrafast": 2e-06,  # a tier the book does not know
        "output_cost_per_token": 2e-06,
        "input_cost_per_image": 0,  # zero: prices nothing
        "input_cost_per_video_per_second": 1e-05,
        "deprecation_date": "2027-01-01",
        "supports_vision": True,
    }
    assert unapplied_keys(entry) == (
        "input_cost_per_token_ultrafast",
        "input_cost_per_video_per_second",
    )


# --- storage -------------------------------------------------------------------------------


ROW = """
[[price]]
model = "dims"
input = "1.32"
cached_input = "0.044"
output = "3.96"
cache_write = "1.65"
cache_write_1h = "2.64"
image_input = "0.5"
web_search = { low = "0.006", high = "0.014" }
[price.off_peak]
hours_utc = ["16:30-00:30"]
weekday_timezone = "Asia/Shanghai"
input = "0.66"
output = "1.98"
[[price.off_peak.window]]
hours_utc = "00:00-00:00"
weekdays = [6, 7]
"""


def test_dimensions_round_trip_through_json() -> None:
    (row,) = prices_from_toml(ROW)
    found = dimensions_from_json(dimensions_to_json(row), "test")
    assert found == {
        "cache_write_1h": Decimal("2.64"),
        "image_input": Decimal("0.5"),
        "web_search": row.web_search,
        "off_peak": row.off_peak,
    }
    with pytest.raises(PriceBookError):
        dimensions_from_json('{"surcharge": "1"}', "test")


def test_stored_rows_keep_their_dimensions(session: Session) -> None:
    rows = prices_from_toml(ROW, default_from=NOW)
    import_prices(session, rows, files=[], now=NOW)
    (stored,) = [p for p in stored_prices(session) if p.model == "dims"]
    assert stored == rows[0]
    usage = Usage(1000, 10, cache_write_tokens=300, cache_write_1h_tokens=100)
    saturday = at("2026-12-05T12:00")
    assert stored.charge(usage, saturday) == rows[0].charge(usage, saturday)
    # 700 * 0.66 + 200 * 1.65 + 100 * 2.64 + 10 * 1.98 = 462 + 330 + 264 + 19.8 = 1075.8
    assert stored.charge(usage, saturday) == 1076


def test_a_price_without_web_search_sizes_it_knows_is_refused() -> None:
    with pytest.raises(PriceBookError, match="web_search sizes"):
        prices_from_toml(SIZED.replace("low =", "ultra ="))
    with pytest.raises(PriceBookError, match="per request"):
        prices_from_toml(SIZED.replace('"0.006"', '"5000"'))


def test_unit_prices_say_which_rates_priced_the_call() -> None:
    price = BOOK.price_for("deepseek-chat", at("2025-03-01T17:00"))
    assert isinstance(price, Price)
    usage = Usage(1000, 500, cached_tokens=200)
    assert price.unit_prices(usage, at("2025-03-01T17:00")) == {
        "rates": "off-peak",
        "input": "0.135",
        "cached_input": "0.035",
        "output": "0.55",
    }
    assert price.unit_prices(usage, at("2025-03-01T12:00"))["rates"] == "row"
    with pytest.raises(InputError):
        price.unit_prices(Usage(10, 10, web_search_requests=1))


def test_a_book_of_history_prices_gpt_4o_by_its_alias_at_the_time() -> None:
    """gpt-4o pointed to gpt-4o-2024-05-13 (5.00 / 15.00) until 2024-10-02, then to
    gpt-4o-2024-08-06 (2.50 / 10.00): 1M in and 1M out."""
    usage = Usage(1_000_000, 1_000_000)
    assert BOOK.charge("gpt-4o", usage, at("2024-06-01T00:00")) == 20_000_000
    assert BOOK.charge("gpt-4o", usage, at("2024-10-02T00:00")) == 12_500_000


def test_a_book_is_history_the_same_key_with_new_dimensions_is_a_change() -> None:
    (row,) = prices_from_toml(ROW)
    (other,) = prices_from_toml(ROW.replace('input = "0.66"', 'input = "0.70"'))
    assert row.key == other.key and row.values() != other.values()
    assert PriceBook([row]).charge("dims", Usage(10, 0), NOW) is not None
