"""The price book: which row prices a call, and the charge for every kind of token and every tier.

Every expected charge is worked out by hand in the test (USD per 1M tokens = micro-USD per token).
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.core.errors import InputError, PriceBookError
from worker.core.prices import MAX_PRICE, Layer, Price, PriceBook, load_price_book, prices_from_toml
from worker.core.result import Usage

AT = datetime(2026, 1, 1, tzinfo=UTC)

BOOK = """
[[price]]
model = "m-text"
effective_from = 2025-01-01T00:00:00Z
input = "2.50"
cached_input = "1.25"
output = "10.00"

[[price]]
model = "m-all"
effective_from = 2025-01-01T00:00:00Z
input = "3.00"
cached_input = "0.30"
cache_write = "3.75"
output = "15.00"
reasoning = "20.00"
audio_input = "40.00"
audio_output = "80.00"
max_input_tokens = 200000
max_output_tokens = 64000

[[price]]
model = "m-all"
tier = "flex"
effective_from = 2025-01-01T00:00:00Z
input = "1.50"
cached_input = "0.15"
output = "7.50"

[[price]]
model = "m-all"
tier = "priority"
effective_from = 2025-01-01T00:00:00Z
input = "5.00"
cached_input = "0.50"
output = "25.00"

[[price]]
model = "m-all"
tier = "batch"
effective_from = 2025-01-01T00:00:00Z
input = "1.50"
output = "7.50"

[[price]]
model = "m-text"
provider = "azure"
effective_from = 2025-01-01T00:00:00Z
input = "2.00"
output = "8.00"

[[price]]
model = "m-groq"
provider = "groq"
effective_from = 2025-01-01T00:00:00Z
input = "0.05"
output = "0.08"

[[price]]
model = "m-together"
provider = "together_ai"
effective_from = 2025-01-01T00:00:00Z
input = "0.20"
output = "0.20"

[[price]]
model = "base"
aliases = ["base-latest"]
snapshots = true
effective_from = 2025-01-01T00:00:00Z
input = "1.00"
output = "2.00"

[[price]]
model = "plain"
effective_from = 2025-01-01T00:00:00Z
input = "1.00"
output = "2.00"

[[price]]
model = "m-cut"
effective_from = 2025-01-01T00:00:00Z
until = 2025-06-10T00:00:00Z
input = "10.00"
output = "40.00"

[[price]]
model = "m-cut"
effective_from = 2025-06-10T00:00:00Z
input = "2.00"
output = "8.00"

[[price]]
model = "m-point-4"
effective_from = 2025-01-01T00:00:00Z
input = "0.40"
output = "0.40"
"""


@pytest.fixture(scope="module")
def book() -> PriceBook:
    return PriceBook(prices_from_toml(BOOK, "test book"))


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (Usage(1000, 0), 3000),  # 1000 text input x 3.00
        (Usage(1000, 0, cached_tokens=1000), 300),  # 1000 cache reads x 0.30
        (Usage(1000, 0, cache_write_tokens=1000), 3750),  # 1000 cache writes x 3.75
        (Usage(0, 1000), 15000),  # 1000 visible output x 15.00
        (Usage(0, 1000, reasoning_tokens=1000), 20000),  # 1000 reasoning x 20.00
        (Usage(1000, 0, audio_prompt_tokens=1000), 40000),  # 1000 audio in x 40.00
        (Usage(0, 1000, audio_completion_tokens=1000), 80000),  # 1000 audio out x 80.00
        # all at once: 650 x 3 + 200 x 0.3 + 100 x 3.75 + 50 x 40 + 160 x 15 + 300 x 20 + 40 x 80
        #            = 1950 + 60 + 375 + 2000 + 2400 + 6000 + 3200
        (
            Usage(
                1000,
                500,
                cached_tokens=200,
                cache_write_tokens=100,
                audio_prompt_tokens=50,
                reasoning_tokens=300,
                audio_completion_tokens=40,
            ),
            15985,
        ),
    ],
)
def test_each_kind_of_token_at_its_own_price(book: PriceBook, usage: Usage, expected: int) -> None:
    assert book.charge("m-all", usage, AT) == expected


def test_reasoning_not_priced_apart_is_output_and_unpriced_kinds_are_not_text(
    book: PriceBook,
) -> None:
    # m-text has no reasoning price: 1000 completion tokens (600 of them reasoning) x 10.00
    assert book.charge("m-text", Usage(0, 1000, reasoning_tokens=600), AT) == 10_000
    # m-text prices no audio and no cache writes: such calls are unpriced, never charged as text
    assert book.charge("m-text", Usage(100, 0, audio_prompt_tokens=10), AT) is None
    assert book.charge("m-text", Usage(0, 100, audio_completion_tokens=10), AT) is None
    assert book.charge("m-text", Usage(100, 0, cache_write_tokens=10), AT) is None
    assert "audio input" in (
        book.price_for("m-text", AT).unpriced_because(  # type: ignore[union-attr]
            Usage(100, 0, audio_prompt_tokens=10)
        )
        or ""
    )


@pytest.mark.parametrize(
    ("tier", "expected"),
    [
        # Usage(1000 prompt of which 400 cached, 100 completion)
        (None, 3420),  # 600 x 3.00 + 400 x 0.30 + 100 x 15.00 = 1800 + 120 + 1500
        ("default", 3420),
        ("on_demand", 3420),  # Groq's name of its default tier
        ("flex", 1710),  # 600 x 1.50 + 400 x 0.15 + 100 x 7.50 = 900 + 60 + 750
        ("priority", 5700),  # 600 x 5.00 + 400 x 0.50 + 100 x 25.00 = 3000 + 200 + 2500
        ("batch", 2250),  # no cache discount stated: 1000 x 1.50 + 100 x 7.50 = 1500 + 750
        ("batches", 2250),  # LiteLLM's name of the batch tier
        ("FLEX", 1710),
        ("scale", None),  # no scale row: unpriced, never the default price
        ("auto", None),
    ],
)
def test_each_service_tier_at_its_own_rate(
    book: PriceBook, tier: str | None, expected: int | None
) -> None:
    assert book.charge("m-all", Usage(1000, 100, cached_tokens=400), AT, tier=tier) == expected


def test_a_tier_the_model_has_no_row_for_is_unpriced_and_says_so(book: PriceBook) -> None:
    found = book.resolve("m-text", AT, tier="flex")
    assert found.price is None
    assert "no flex tier" in found.why and found.why.startswith("unpriced")


def test_provider_rows_price_only_their_provider(book: PriceBook) -> None:
    usage = Usage(1000, 1000)
    assert book.charge("m-text", usage, AT) == 12_500  # any provider: 2500 + 10000
    assert book.charge("m-text", usage, AT, provider="openai") == 12_500  # no openai row
    assert book.charge("m-text", usage, AT, provider="azure") == 10_000  # 2000 + 8000
    assert book.charge("m-text", usage, AT, provider=" Azure ") == 10_000
    # rows for groq only: a call routed elsewhere, or to no named provider, is unpriced
    assert book.charge("m-groq", usage, AT) is None
    assert book.charge("m-groq", usage, AT, provider="openrouter") is None
    assert book.charge("m-groq", usage, AT, provider="groq") == 130  # 50 + 80
    assert "providers groq only" in book.resolve("m-groq", AT).why
    # LiteLLM's together_ai is the book's together
    assert book.charge("m-together", usage, AT, provider="together") == 400
    assert book.charge("m-together", usage, AT, provider="together_ai") == 400


def test_names_are_exact_aliases_listed_snapshots_only_when_the_row_says_so(
    book: PriceBook,
) -> None:
    assert book.price_for("base", AT).model == "base"  # type: ignore[union-attr]
    assert book.price_for("base-latest", AT).model == "base"  # type: ignore[union-attr]
    assert book.price_for("base-2025-01-31", AT).model == "base"  # type: ignore[union-attr]
    assert book.price_for("base-0131", AT).model == "base"  # type: ignore[union-attr]
    assert "dated snapshot of base" in book.resolve("base-2025-01-31", AT).why
    for unpriced in (
        "base-2025-02-30",  # not a date
        "base-1301",  # not a month
        "base-audio-2025-01-31",  # a different model's snapshot
        "base-latest-2025-01-31",  # snapshots of an alias's own name are not the row's
        "bas",
        "base-x",
        "BASE",
        "plain-2025-01-31",  # plain does not say snapshots = true
        "m-text-mini",
    ):
        assert book.price_for(unpriced, AT) is None, unpriced
    why = book.resolve("plain-2025-01-31", AT).why
    assert "looks like a dated snapshot of plain" in why and "snapshots = true" in why


def test_an_alias_two_models_claim_prices_neither() -> None:
    text = (
        BOOK
        + '\n[[price]]\nmodel = "other"\naliases = ["base-latest"]\ninput = "9"\noutput = "9"\n'
    )
    book = PriceBook(prices_from_toml(text))
    assert book.price_for("base-latest", AT) is None
    assert book.name_conflicts() == ["'base-latest' is claimed by base, other"]


def test_charge_is_integer_micros_rounded_half_up_once(book: PriceBook) -> None:
    # 11 x 2.50 + 3 x 10.00 = 57.5 → 58
    assert book.charge("m-text", Usage(11, 3), AT) == 58
    # 1 x 0.40 + 1 x 0.40 = 0.8 → 1 (each term alone would round to 0)
    assert book.charge("m-point-4", Usage(1, 1), AT) == 1
    # 1 x 0.40 = 0.4 → 0
    assert book.charge("m-point-4", Usage(1, 0), AT) == 0


def test_the_price_in_force_at_the_request_time(book: PriceBook) -> None:
    usage = Usage(1000, 1000)
    assert book.charge("m-cut", usage, datetime(2025, 6, 9, 23, 59, 59, tzinfo=UTC)) == 50_000
    assert book.charge("m-cut", usage, datetime(2025, 6, 10, tzinfo=UTC)) == 10_000
    assert book.charge("m-cut", usage, datetime(2024, 12, 31, tzinfo=UTC)) is None
    assert (
        "no override row is in force" in book.resolve("m-cut", datetime(2024, 1, 1, tzinfo=UTC)).why
    )


def test_override_rows_win_over_list_rows_and_hand_back_after_until() -> None:
    start, cut = datetime(2025, 1, 1, tzinfo=UTC), datetime(2025, 6, 1, tzinfo=UTC)
    listed = Price(
        "m", datetime(1970, 1, 1, tzinfo=UTC), Decimal(2), Decimal(2), Decimal(8), layer=Layer.LIST
    )
    negotiated = Price("m", start, Decimal(1), Decimal(1), Decimal(4), until=cut)
    book = PriceBook([listed, negotiated])
    usage = Usage(1000, 1000)
    assert book.charge("m", usage, datetime(2024, 1, 1, tzinfo=UTC)) == 10_000  # list
    assert book.charge("m", usage, start) == 5_000  # override, although the list row is there too
    assert book.charge("m", usage, cut) == 10_000  # the override ended: the list again


def test_context_window_is_the_rows_limits(book: PriceBook) -> None:
    assert book.context_window("m-all", AT) == 264_000
    assert book.context_window("m-text", AT) is None
    assert book.context_window("nothing", AT) is None


def test_a_prompt_past_the_long_context_limit_is_unpriced() -> None:
    row = Price("g", AT, Decimal("1.25"), Decimal("0.125"), Decimal(10), prompt_limit=200_000)
    assert row.charge(Usage(200_000, 0)) == 250_000
    assert row.charge(Usage(200_001, 0)) is None


def test_inconsistent_parts_raise_never_a_guessed_charge(book: PriceBook) -> None:
    with pytest.raises(InputError, match="exceed"):
        book.charge("m-all", Usage(10, 0, cached_tokens=11), AT)
    with pytest.raises(InputError, match="exceed"):
        book.charge("m-all", Usage(0, 10, reasoning_tokens=6, audio_completion_tokens=5), AT)
    with pytest.raises(InputError, match="2\\^63"):
        book.charge("m-all", Usage(0, 10**18), AT)


# --- the bundled book -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def bundled() -> PriceBook:
    return load_price_book()


def test_the_bundled_book_prices_o3_mini_o3_pro_and_audio_by_their_own_rows(
    bundled: PriceBook,
) -> None:
    million = Usage(1_000_000, 1_000_000)
    # o3-mini 1.10 / 4.40 and o3-pro 20 / 80 (the old o3* prefix charged both at o3's 2 / 8)
    assert bundled.price_for("o3-mini", AT).model == "o3-mini"  # type: ignore[union-attr]
    assert bundled.charge("o3-mini", million, AT) == 1_100_000 + 4_400_000
    assert bundled.charge("o3-pro", million, AT) == 20_000_000 + 80_000_000
    assert bundled.charge("o3", million, AT) == 2_000_000 + 8_000_000
    # gpt-4o-audio-preview has no row in the list: unpriced, loudly; its dated snapshot has one,
    # with audio at 40 / 80 (the old gpt-4o* prefix charged audio as text at 2.50 / 10)
    assert bundled.price_for("gpt-4o-audio-preview", AT) is None
    assert "no row names gpt-4o-audio-preview" in bundled.resolve("gpt-4o-audio-preview", AT).why
    audio = Usage(1000, 1000, audio_prompt_tokens=1000, audio_completion_tokens=1000)
    assert bundled.charge("gpt-4o-audio-preview-2024-12-17", audio, AT) == 40_000 + 80_000
    # gpt-4o-2024-08-06 is priced by its own row (the list names it), not by a rule on gpt-4o
    row = bundled.price_for("gpt-4o-2024-08-06", AT)
    assert row is not None and row.model == "gpt-4o-2024-08-06" and row.input == Decimal("2.5")
    # a dated name nobody lists is unpriced: gpt-4o does not say snapshots = true
    assert bundled.price_for("gpt-4o-2031-01-01", AT) is None


def test_the_bundled_book_prices_every_model_the_simulator_sells(bundled: PriceBook) -> None:
    for model in (
        "gpt-4o",
        "gpt-4o-mini",
        "gpt-4.1",
        "gpt-4.1-mini",
        "gpt-4.1-nano",
        "o3",
        "o4-mini",
        "gpt-4",
        "gpt-3.5-turbo",
        "llama-3.1-8b",
    ):
        assert bundled.charge(model, Usage(1_000_000, 0), AT), model
    assert bundled.price_for("gpt-4.1-mini", AT).input == Decimal("0.4")  # type: ignore[union-attr]
    assert bundled.price_for("mixtral-8x7b-instruct", AT) is None
    assert bundled.name_conflicts() == []


def test_the_bundled_overrides_keep_o3s_launch_price(bundled: PriceBook) -> None:
    usage = Usage(1000, 1000)
    assert bundled.charge("o3", usage, datetime(2025, 5, 1, tzinfo=UTC)) == 50_000  # 10 + 40
    assert bundled.charge("o3", usage, datetime(2025, 6, 10, tzinfo=UTC)) == 10_000  # 2 + 8
    assert bundled.charge("o3", usage, datetime(2025, 6, 10, tzinfo=UTC), tier="flex") == 5_000


# --- the TOML format ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not toml = [", "not valid TOML"),
        ("x = 1", r"\[\[price\]\]"),
        ('[[price]]\nmodel = "a"\ninput = 1.5\noutput = "1"', "decimal string"),
        ('[[price]]\nmodel = "a"\ninput = "abc"\noutput = "1"', "not a decimal"),
        ('[[price]]\nmodel = "a"\ninput = "-1"\noutput = "1"', "non-negative"),
        ('[[price]]\nmodel = "a"\ninput = "NaN"\noutput = "1"', "non-negative"),
        ('[[price]]\nmodel = "a"\ninput = "1E+30"\noutput = "1"', "above the bound of 10000"),
        ('[[price]]\nmodel = "a"\ninput = "10000.01"\noutput = "1"', "above the bound"),
        ('[[price]]\nmodel = "a"\ninput = "1E-99"\noutput = "1"', "more digits"),
        ('[[price]]\nmodel = "a*"\ninput = "1"\noutput = "1"', "prefix patterns"),
        ('[[price]]\nmodel = "a"\ninput = "1"\noutput = "1"\ncached_inputs = "0"', "unknown key"),
        ('[[price]]\nmodel = "a"\ninput = "1"\noutput = "1"\ntier = "Fast Lane"', "tier"),
        ('[[price]]\nmodel = "a"\ninput = "1"\noutput = "1"\naliases = "b"', "aliases"),
        (
            '[[price]]\nmodel = "a"\ninput = "1"\noutput = "1"\n'
            "effective_from = 2025-01-01T00:00:00Z\nuntil = 2025-01-01T00:00:00Z",
            "until must be later",
        ),
        ('[[price]]\nmodel = "a"\ninput = "1"\noutput = "1"\n' * 2, "duplicate"),
    ],
)
def test_bad_books_are_named_precisely(text: str, message: str) -> None:
    with pytest.raises(PriceBookError, match=message):
        prices_from_toml(text, "book.toml")


def test_a_toml_price_is_kept_as_its_exact_decimal() -> None:
    (row,) = prices_from_toml('[[price]]\nmodel = "a"\ninput = "1E+1"\noutput = "0.0000001"')
    assert (row.input, row.output, row.cached_input) == (10, Decimal("0.0000001"), 10)
    assert row.input.as_tuple().exponent == 0


def test_missing_file_is_a_price_book_error(tmp_path) -> None:
    with pytest.raises(PriceBookError, match=r"book\.toml"):
        load_price_book(tmp_path / "book.toml")


# --- properties -----------------------------------------------------------------------------

CHOICES = 128  # the most choices (n) a chat completion can ask for
MOST = 10**8 * CHOICES


@st.composite
def prices(draw: st.DrawFn) -> Decimal:
    places = draw(st.integers(0, 12))
    return Decimal(draw(st.integers(0, int(MAX_PRICE) * 10**places))).scaleb(-places)


@settings(max_examples=400)
@given(
    rates=st.lists(prices(), min_size=7, max_size=7),
    parts=st.lists(st.integers(0, MOST // 4), min_size=7, max_size=7),
)
def test_charge_is_exact_against_a_fraction_oracle_and_fits_int64(
    rates: list[Decimal], parts: list[int]
) -> None:
    inp, cached, write, out, reasoning, audio_in, audio_out = rates
    text_in, n_cached, n_write, n_audio_in, text_out, n_reasoning, n_audio_out = parts
    row = Price(
        "m",
        AT,
        inp,
        cached,
        out,
        cache_write=write,
        reasoning=reasoning,
        audio_input=audio_in,
        audio_output=audio_out,
    )
    usage = Usage(
        prompt_tokens=text_in + n_cached + n_write + n_audio_in,
        completion_tokens=text_out + n_reasoning + n_audio_out,
        cached_tokens=n_cached,
        cache_write_tokens=n_write,
        audio_prompt_tokens=n_audio_in,
        reasoning_tokens=n_reasoning,
        audio_completion_tokens=n_audio_out,
    )
    assert usage.prompt_tokens <= MOST and usage.completion_tokens <= MOST
    exact = sum(
        Fraction(count) * Fraction(str(rate))
        for count, rate in zip(
            parts, (inp, cached, write, audio_in, out, reasoning, audio_out), strict=True
        )
    )
    expected = int(exact + Fraction(1, 2))  # half up: floor(x + 1/2) for x >= 0
    charged = row.charge(usage)
    assert type(charged) is not bool and isinstance(charged, int)
    assert charged == expected
    assert 0 <= charged < 2**63


@given(prompt=st.integers(0, MOST), completion=st.integers(0, MOST), rate=prices())
def test_no_count_a_call_can_have_overflows_int64(
    prompt: int, completion: int, rate: Decimal
) -> None:
    row = Price("m", AT, rate, rate, rate, reasoning=rate)
    charged = row.charge(Usage(prompt, completion, reasoning_tokens=completion // 2))
    assert charged is not None and charged < 2**63
