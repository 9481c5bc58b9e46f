"""Issue 36, price-book dimensions 5 (fine-tuned ids) and 7 (tiers across time).

Expected charges are worked out by hand (USD per 1M tokens = micro-USD per token). The published
prices come from the bundled LiteLLM list, ``worker/data/litellm_prices.json``: LiteLLM 1.110.2's
``model_prices_and_context_window.json`` (PyPI wheel, retrieved 2026-12-02; per-token USD, so
``3e-07`` is 0.30 per 1M):

* ``ft:gpt-4o-mini-2024-07-18``: input 3e-07, cache read 1.5e-07, output 1.2e-06; batches: input
  1.5e-07, cache read 7.5e-08, output 6e-07. The same 0.30 / 0.15 / 1.20 per 1M for a fine-tuned
  GPT-4o mini is on https://pecollective.com/tools/gpt-4o-mini-pricing (April 2026), against
  0.15 / 0.075 / 0.60 for the base model.
* ``ft:gpt-4o-2024-08-06``: input 3.75e-06, output 1.5e-05: OpenAI's 3.75 / 15 per 1M announced
  with GPT-4o fine-tuning on 2024-08-20 (https://everythingthreads.com/wire/01J5QKN980BHKP2V9P0XWPEFVD).
* ``ft:gpt-3.5-turbo-0613``: input 3e-06, output 6e-06.

The tier-history books are made up for the test; their prices are in them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from worker.core.prices import Layer, Price, PriceBook, load_price_book, prices_from_toml
from worker.core.prices.price import EPOCH
from worker.core.result import Usage

AT = datetime(2026, 1, 1, tzinfo=UTC)
MILLION = Usage(1_000_000, 1_000_000, cached_tokens=400_000)
THOUSAND = Usage(1000, 1000)


def _at(day: str) -> datetime:
    return datetime.fromisoformat(day).replace(tzinfo=UTC)


@pytest.fixture(scope="module")
def bundled() -> PriceBook:
    return load_price_book()


# --- dimension 5: fine-tuned ids ------------------------------------------------------------


def test_fine_tuned_ids_name_their_base() -> None:
    from worker.core.prices.book import fine_tune_base  # here: the other tests run without it

    assert fine_tune_base("ft:gpt-4o-mini-2024-07-18:acme::AbC123") == "gpt-4o-mini-2024-07-18"
    assert fine_tune_base("ft:gpt-4o-2024-08-06:acme:support:XyZ") == "gpt-4o-2024-08-06"
    assert fine_tune_base("ft:gpt-4o-mini-2024-07-18:acme::AbC123:ckpt-step-88") == (
        "gpt-4o-mini-2024-07-18"
    )
    for other in ("ft:gpt-4o-mini-2024-07-18", "gpt-4o-mini", "ft::acme::x", "ft:gpt-4o:"):
        assert fine_tune_base(other) is None, other


def test_a_fine_tuned_id_is_priced_by_its_bases_fine_tune_row(bundled: PriceBook) -> None:
    tuned = "ft:gpt-4o-mini-2024-07-18:acme::AbC123"
    row = bundled.price_for(tuned, AT)
    assert row is not None and row.model == "ft:gpt-4o-mini-2024-07-18"
    # 600,000 text x 0.30 + 400,000 cache reads x 0.15 + 1,000,000 output x 1.20
    assert bundled.charge(tuned, MILLION, AT) == 180_000 + 60_000 + 1_200_000
    # the base model's own price would be 90,000 + 30,000 + 600,000: never that
    assert bundled.charge("gpt-4o-mini-2024-07-18", MILLION, AT) == 720_000
    # batch: 600,000 x 0.15 + 400,000 x 0.075 + 1,000,000 x 0.60
    assert bundled.charge(tuned, MILLION, AT, tier="batch") == 90_000 + 30_000 + 600_000
    # a checkpoint of the fine-tune, another suffix, another base with a fine-tune row
    assert bundled.charge(f"{tuned}:ckpt-step-88", MILLION, AT) == 1_440_000
    # 1000 x 3.75 + 1000 x 15
    assert bundled.charge("ft:gpt-4o-2024-08-06:acme:support:XyZ", THOUSAND, AT) == 18_750
    # 1000 x 3 + 1000 x 6
    assert bundled.charge("ft:gpt-3.5-turbo-0613:acme::8abc", THOUSAND, AT) == 9_000
    assert bundled.context_window(tuned, AT) == 128_000 + 16_384
    why = bundled.resolve(tuned, AT).why
    assert "fine-tuned id of gpt-4o-mini-2024-07-18" in why
    assert "ft:gpt-4o-mini-2024-07-18 is the exact name of its rows" in why


def test_a_fine_tune_without_a_fine_tune_row_is_unpriced_never_the_base_price(
    bundled: PriceBook,
) -> None:
    # gpt-4o-mini is priced, but the list has no ft:gpt-4o-mini row (only the dated one)
    assert bundled.price_for("gpt-4o-mini", AT) is not None
    found = bundled.resolve("ft:gpt-4o-mini:acme::AbC123", AT)
    assert found.price is None and found.why.startswith("unpriced")
    assert "no fine-tune row prices it" in found.why
    assert "gpt-4o-mini's own rows never price a fine-tune" in found.why
    # nor through an alias that makes a plain model's rows the fine-tune's
    aliased = Price("m", EPOCH, Decimal(1), Decimal(1), Decimal(2), aliases=("ft:m",))
    book = PriceBook([aliased])
    assert book.price_for("ft:m", AT) is aliased  # the alias itself, asked for by name
    assert book.price_for("ft:m:acme::x", AT) is None
    assert "not a fine-tune row" in book.resolve("ft:m:acme::x", AT).why


def test_a_row_for_the_full_id_overrides_the_fine_tune_row_where_it_applies() -> None:
    tuned = "ft:gpt-4o-mini-2024-07-18:acme::AbC123"
    negotiated = prices_from_toml(
        f'[[price]]\nmodel = "{tuned}"\neffective_from = 2026-03-01T00:00:00Z\n'
        'input = "0.25"\noutput = "1.00"\n'
    )
    book = PriceBook([*load_price_book().prices, *negotiated])
    after, before = _at("2026-04-01"), _at("2026-02-01")
    assert book.charge(tuned, THOUSAND, after) == 250 + 1000  # the id's own row
    assert book.charge(tuned, THOUSAND, before) == 300 + 1200  # before it: the fine-tune row
    assert book.charge(f"{tuned[:-1]}4", THOUSAND, after) == 1500  # another id: fine-tune row
    # the id's row dates its default tier from 2026-03-01 and has no batch row: a batch call
    # then is unpriced, not the fine-tune row's batch price; before it, that price (150 + 600)
    assert book.charge(tuned, THOUSAND, after, tier="batch") is None
    assert book.charge(tuned, THOUSAND, before, tier="batch") == 750


# --- dimension 7: tiers across time ---------------------------------------------------------

T1, T2 = _at("2025-01-01"), _at("2025-03-01")


def _row(
    tier: str,
    start: datetime,
    inp: str,
    out: str,
    layer: Layer,
    *,
    until: datetime | None = None,
    provider: str | None = None,
) -> Price:
    return Price(
        "m",
        start,
        Decimal(inp),
        Decimal(inp),
        Decimal(out),
        tier=tier,
        layer=layer,
        until=until,
        provider=provider,
    )


def test_a_tier_call_before_its_tier_row_is_unpriced_not_the_list_price_from_1970() -> None:
    book = PriceBook(
        [
            _row("default", EPOCH, "2.00", "8.00", Layer.LIST),
            _row("flex", EPOCH, "1.00", "4.00", Layer.LIST),
            _row("default", T1, "3.00", "12.00", Layer.OVERRIDE),
            _row("flex", T2, "1.50", "6.00", Layer.OVERRIDE),
        ]
    )
    between = _at("2025-02-01")
    # the override's default row prices the default tier from T1: 1000 x 3 + 1000 x 12
    assert book.charge("m", THOUSAND, between) == 15_000
    # a flex call then has no override flex row yet (it starts at T2): unpriced, never the list's
    # flex row from 1970 (1000 x 1 + 1000 x 4 = 5000)
    assert book.charge("m", THOUSAND, between, tier="flex") is None
    found = book.resolve("m", between, tier="flex")
    assert "no override flex row of m is in force" in found.why
    assert "default-tier row from 2025-01-01" in found.why
    # from T2 its own row: 1000 x 1.50 + 1000 x 6
    assert book.charge("m", THOUSAND, T2, tier="flex") == 7_500
    # before T1 the override says nothing about m: the list prices every tier
    assert book.charge("m", THOUSAND, _at("2024-12-01"), tier="flex") == 5_000
    assert book.charge("m", THOUSAND, _at("2024-12-01")) == 10_000
    # rows that date no default tier (a negotiated batch row only) hand other tiers on
    batch_only = PriceBook(
        [
            _row("default", EPOCH, "2.00", "8.00", Layer.LIST),
            _row("flex", EPOCH, "1.00", "4.00", Layer.LIST),
            _row("batch", T1, "0.50", "2.00", Layer.OVERRIDE),
        ]
    )
    assert batch_only.charge("m", THOUSAND, T2, tier="batch") == 2_500  # 500 + 2000
    assert batch_only.charge("m", THOUSAND, T2, tier="flex") == 5_000  # 1000 + 4000
    assert batch_only.charge("m", THOUSAND, T2) == 10_000  # 2000 + 8000


def test_a_dated_default_row_without_tier_rows_leaves_tier_calls_unpriced_while_in_force() -> None:
    # the shape of the bundled o3 rows: a launch price for the default tier, with an end
    launch = _row("default", T1, "10", "40", Layer.OVERRIDE, until=T2)
    azure = _row("default", T1, "10", "40", Layer.OVERRIDE, until=T2, provider="azure")
    listed = [
        _row(tier, EPOCH, inp, out, Layer.LIST, provider=provider)
        for tier, inp, out in (("default", "2", "8"), ("flex", "1", "4"))
        for provider in (None, "azure")
    ]
    book = PriceBook([launch, azure, *listed])
    during = _at("2025-02-01")
    assert book.charge("m", THOUSAND, during) == 50_000  # 1000 x 10 + 1000 x 40
    assert book.charge("m", THOUSAND, during, tier="flex") is None
    assert book.charge("m", THOUSAND, during, tier="flex", provider="azure") is None
    assert "override rows of m have no flex tier" in book.resolve("m", during, tier="flex").why
    # after the launch row ends, the list prices both tiers again: 1000 x 1 + 1000 x 4
    assert book.charge("m", THOUSAND, T2, tier="flex") == 5_000
    assert book.charge("m", THOUSAND, T2, tier="flex", provider="azure") == 5_000


def test_the_bundled_o3_tiers_have_their_launch_prices_before_the_cut(bundled: PriceBook) -> None:
    # worker/data/prices.toml: o3 cost 10 / 40 from 2025-04-16 until the cut of 2025-06-10, flex
    # and batch half of it (OpenAI's flex processing and Batch API guides); the list's o3 flex row
    # (1 / 4, from 1970) is the price after the cut
    may = _at("2025-05-01")
    assert bundled.charge("o3", THOUSAND, may) == 50_000  # 1000 x 10 + 1000 x 40
    for name in ("o3", "o3-2025-04-16"):
        for tier in ("flex", "batch"):
            assert bundled.charge(name, THOUSAND, may, tier=tier) == 25_000  # 1000 x 5 + 1000 x 20
        # a tier without a launch row stays unpriced, never at another tier's price
        assert bundled.charge(name, THOUSAND, may, tier="priority") is None
    assert bundled.charge("o3", THOUSAND, _at("2025-06-10"), tier="flex") == 5_000


# --- the resolution path --------------------------------------------------------------------


def test_resolve_names_every_dimension_it_applied(bundled: PriceBook) -> None:
    found = bundled.resolve(
        "ft:gpt-4o-mini-2024-07-18:acme::AbC123", AT, tier="batches", provider="openai"
    )
    path = dict(found.path)
    assert list(path) == ["name", "layer", "provider", "tier", "time", "kinds", "fees", "unapplied"]
    assert "fine-tuned id of gpt-4o-mini-2024-07-18" in path["name"]
    assert path["layer"] == "list rows of ft:gpt-4o-mini-2024-07-18"
    assert path["provider"] == (
        "the call names provider openai: rows for any provider (none for provider openai)"
    )
    assert path["tier"].startswith("service tier 'batches': the batch tier")
    assert "from 1970-01-01T00:00:00+00:00 with no end" in path["time"]
    assert path["kinds"] == (
        "prices input 0.15, cached_input 0.075, output 0.6, reasoning at the output price 0.6, "
        "image_input at the input price 0.15; leaves unpriced cache_write, cache_write_1h, "
        "audio_input, audio_output, citation, image_output (a call with such tokens is unsettled unpriced_component)"
    )
    assert path["fees"].startswith("no web search price")
    assert "fedramp_uplift_multiplier" in path["unapplied"]
    stopped = dict(bundled.resolve("o3", _at("2025-05-01"), tier="priority").path)
    assert "default-tier row from 2025-04-16" in stopped["unpriced"]
