"""LiteLLM's price file, read exactly: a fixture excerpted byte for byte from the real file
(tests/fixtures/prices/litellm_excerpt.source.txt says which), prices worked out by hand."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from worker.core.errors import PriceBookError
from worker.core.prices import Layer, PriceBook
from worker.core.prices.litellm import prices_from_litellm
from worker.core.result import Usage

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "prices" / "litellm_excerpt.json"
START = datetime(2026, 12, 1, tzinfo=UTC)
AT = datetime(2026, 12, 2, tzinfo=UTC)


@pytest.fixture(scope="module")
def parsed():
    return prices_from_litellm(FIXTURE.read_bytes(), "excerpt", START)


@pytest.fixture(scope="module")
def book(parsed) -> PriceBook:
    return PriceBook(parsed.prices)


def _row(parsed, model: str, tier: str = "default", provider: str | None = None):
    (row,) = [p for p in parsed.prices if (p.model, p.tier, p.provider) == (model, tier, provider)]
    return row


def test_per_token_usd_becomes_usd_per_million_exactly(parsed) -> None:
    mini = _row(parsed, "gpt-4o-mini")
    # "input_cost_per_token": 1.5e-07 in the file: exactly 0.15 USD per 1M tokens
    assert mini.input == Decimal("0.15") and str(mini.input) == "0.15"
    assert (mini.cached_input, mini.output) == (Decimal("0.075"), Decimal("0.6"))
    assert (mini.max_input_tokens, mini.max_output_tokens) == (128_000, 16_384)
    assert mini.layer is Layer.LIST and mini.effective_from == START
    assert mini.source == "excerpt gpt-4o-mini"


def test_numbers_never_pass_through_a_float() -> None:
    # 1.0000000000000001e-07 is 1e-07 as a float; as a decimal it keeps its last digit
    text = (
        '{"m": {"mode": "chat", "litellm_provider": "openai",'
        ' "input_cost_per_token": 1.0000000000000001e-07, "output_cost_per_token": 3e-7}}'
    )
    (row,) = prices_from_litellm(text, "t", START).prices
    assert row.input == Decimal("0.10000000000000001")
    assert row.output == Decimal("0.3")


def test_every_tier_the_entry_states(parsed) -> None:
    tiers = {p.tier for p in parsed.prices if p.model == "gpt-4o" and p.provider is None}
    assert tiers == {"default", "priority", "batch"}  # the file has no gpt-4o flex price
    priority = _row(parsed, "gpt-4o", "priority")
    assert (priority.input, priority.cached_input, priority.output) == (
        Decimal("4.25"),
        Decimal("2.125"),
        Decimal("17"),
    )
    batch = _row(parsed, "gpt-4o", "batch")
    # no cache_read_input_token_cost_batches: a batch cache read costs the batch input price
    assert (batch.input, batch.cached_input, batch.output) == (
        Decimal("1.25"),
        Decimal("1.25"),
        Decimal("5"),
    )
    flex = _row(parsed, "o3", "flex")
    assert (flex.input, flex.cached_input, flex.output) == (
        Decimal("1"),
        Decimal("0.25"),
        Decimal("4"),
    )


def test_hand_worked_charges_per_tier(book: PriceBook) -> None:
    usage = Usage(10_000, 2_000, cached_tokens=4_000, reasoning_tokens=1_500)
    # o3 default: 6000 x 2 + 4000 x 0.5 + 2000 x 8 = 12000 + 2000 + 16000
    assert book.charge("o3", usage, AT) == 30_000
    # flex: 6000 x 1 + 4000 x 0.25 + 2000 x 4 = 6000 + 1000 + 8000
    assert book.charge("o3", usage, AT, tier="flex") == 15_000
    # priority: 6000 x 3.5 + 4000 x 0.875 + 2000 x 14 = 21000 + 3500 + 28000
    assert book.charge("o3", usage, AT, tier="priority") == 52_500
    # batch (no batch cache price): 10000 x 1 + 2000 x 4 = 10000 + 8000
    assert book.charge("o3", usage, AT, tier="batch") == 18_000
    # o3-mini has no flex row: unpriced, not o3's nor the default rate
    assert book.charge("o3-mini", usage, AT, tier="flex") is None
    # o3-mini default: 6000 x 1.1 + 4000 x 0.55 + 2000 x 4.4 = 6600 + 2200 + 8800
    assert book.charge("o3-mini", usage, AT) == 17_600


def test_cache_writes_audio_and_providers(parsed, book: PriceBook) -> None:
    claude = _row(parsed, "claude-sonnet-4-5")
    assert (claude.cache_write, claude.cached_input) == (Decimal("3.75"), Decimal("0.3"))
    assert _row(parsed, "claude-sonnet-4-5", "batch").cache_write == Decimal("1.875")
    # 1000 prompt = 200 text + 300 cache reads + 500 cache writes; 100 output:
    # 200 x 3 + 300 x 0.3 + 500 x 3.75 + 100 x 15 = 600 + 90 + 1875 + 1500
    usage = Usage(1000, 100, cached_tokens=300, cache_write_tokens=500)
    assert book.charge("claude-sonnet-4-5", usage, AT) == 4065
    # the audio snapshot: 1000 prompt of which 600 audio, 500 completion of which 400 audio:
    # 400 x 2.5 + 600 x 40 + 100 x 10 + 400 x 80 = 1000 + 24000 + 1000 + 32000
    audio = Usage(1000, 500, audio_prompt_tokens=600, audio_completion_tokens=400)
    assert book.charge("gpt-4o-audio-preview-2024-12-17", audio, AT) == 58_000
    # gpt-4o prices no audio: its audio tokens are unpriced, never charged as text
    assert book.charge("gpt-4o", audio, AT) is None
    # DeepSeek states cache writes free and the cache-hit price: 0.028 per cache read
    deepseek = _row(parsed, "deepseek-chat", provider="deepseek")
    assert (deepseek.cached_input, deepseek.cache_write) == (Decimal("0.028"), Decimal("0"))
    # provider-prefixed keys price only their provider
    assert _row(parsed, "gpt-4o", provider="azure").source == "excerpt azure/gpt-4o"
    assert book.price_for("openai/gpt-oss-120b", AT) is None
    assert book.charge("openai/gpt-oss-120b", Usage(1000, 1000), AT, provider="groq") == 750


def test_long_context_prices_make_a_prompt_limit_and_a_band(book: PriceBook) -> None:
    row = book.price_for("gemini-2.5-pro", AT, provider="gemini")
    assert row is not None and row.prompt_limit == 200_000
    # input_cost_per_token_above_200k_tokens 2.5e-06: 2.5 per 1M from 200,001 prompt tokens on
    (band,) = row.bands
    assert (band.above, band.input, band.cached_input, band.output) == (
        200_000,
        Decimal("2.5"),
        Decimal("0.25"),
        Decimal("15"),
    )
    # 200000 x 1.25 = 250000; 200001 x 2.5 = 500002.5, half up
    assert book.charge("gemini-2.5-pro", Usage(200_000, 0), AT, provider="gemini") == 250_000
    assert book.charge("gemini-2.5-pro", Usage(200_001, 0), AT, provider="gemini") == 500_003


def test_what_is_not_a_chat_price_is_skipped(parsed, book: PriceBook) -> None:
    assert parsed.skipped == {
        "sample_spec": "not a model",
        "text-embedding-3-small": "mode 'embedding'",
    }
    assert book.price_for("text-embedding-3-small", AT) is None
    assert book.price_for("o3-pro", AT).output == Decimal("80")  # type: ignore[union-attr]


def test_the_over_match_cases_resolve_by_the_rule(book: PriceBook) -> None:
    assert book.price_for("o3-mini", AT).model == "o3-mini"  # type: ignore[union-attr]
    assert book.price_for("o3-pro", AT).model == "o3-pro"  # type: ignore[union-attr]
    assert book.price_for("gpt-4o-2024-08-06", AT).model == "gpt-4o-2024-08-06"  # type: ignore[union-attr]
    assert book.price_for("gpt-4o-audio-preview", AT) is None
    assert book.price_for("o3-mini-2025-01-31", AT) is None  # not in the excerpt: not guessed
    assert book.context_window("gpt-4o", AT) == 128_000 + 16_384


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('"input_cost_per_token": 1E+30', "above the bound"),
        ('"input_cost_per_token": 0.0100001', "above the bound"),
        ('"input_cost_per_token": -1e-7', "non-negative"),
        ('"input_cost_per_token": NaN', "not a number"),
        ('"input_cost_per_token": Infinity', "not a number"),
        ('"input_cost_per_token": "1e-7"', "must be a number"),
        ('"input_cost_per_token": true', "must be a number"),
    ],
)
def test_bad_values_are_refused_naming_the_entry(entry: str, message: str) -> None:
    text = (
        '{"bad-model": {"mode": "chat", "litellm_provider": "openai", "output_cost_per_token": 1e-6, '
        + entry
        + "}}"
    )
    with pytest.raises(PriceBookError, match=message):
        prices_from_litellm(text, "f.json", START)


def test_a_file_that_is_not_json_is_one_clear_error() -> None:
    with pytest.raises(PriceBookError, match="not valid JSON"):
        prices_from_litellm("{", "f", START)
    with pytest.raises(PriceBookError, match="litellm_provider"):
        prices_from_litellm(
            '{"m": {"mode": "chat", "input_cost_per_token": 1e-6, "output_cost_per_token": 1e-6}}',
            "f",
            START,
        )
