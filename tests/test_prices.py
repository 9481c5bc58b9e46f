from datetime import UTC, datetime
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.errors import PriceBookError
from worker.prices import PriceBook, load_price_book, prices_from_toml
from worker.result import Usage

BOOK = """
[[price]]
model = "gpt-4o*"
effective_from = 2024-05-13T00:00:00Z
input = "2.50"
cached_input = "1.25"
output = "10.00"

[[price]]
model = "gpt-4o-mini*"
effective_from = 2024-07-18T00:00:00Z
input = "0.15"
cached_input = "0.075"
output = "0.60"

[[price]]
model = "gpt-4o-2024-05-13"
effective_from = 2024-05-13T00:00:00Z
input = "5.00"
output = "15.00"

[[price]]
model = "o3*"
effective_from = 2025-04-16T00:00:00Z
input = "10.00"
output = "40.00"

[[price]]
model = "o3*"
effective_from = 2025-06-10T00:00:00Z
input = "2.00"
output = "8.00"
"""

AT = datetime(2025, 7, 1, tzinfo=UTC)


@pytest.fixture
def book() -> PriceBook:
    return PriceBook(prices_from_toml(BOOK))


def test_longest_prefix_and_exact_names_win(book: PriceBook) -> None:
    assert book.price_for("gpt-4o-mini-2024-07-18", AT).pattern == "gpt-4o-mini*"
    assert book.price_for("gpt-4o-2024-08-06", AT).pattern == "gpt-4o*"
    assert book.price_for("gpt-4o-2024-05-13", AT).pattern == "gpt-4o-2024-05-13"
    assert book.price_for("llama-3.1-8b", AT) is None


def test_charge_is_integer_micros_rounded_half_up_once(book: PriceBook) -> None:
    # 11 prompt * 2.50 + 3 completion * 10.00 = 57.5 micro-USD → 58
    assert book.charge("gpt-4o", Usage(11, 3), AT) == 58
    # cached tokens are part of prompt_tokens: 1000 cached of 1500 → 500*2.5 + 1000*1.25 + 0
    assert book.charge("gpt-4o", Usage(1500, 0, cached_tokens=1000), AT) == 2500
    # gpt-4o-mini: 3 * 0.15 + 1 * 0.60 = 1.05 → 1 (rounded once, not per term)
    assert book.charge("gpt-4o-mini", Usage(3, 1), AT) == 1


def test_price_in_force_at_the_request_time(book: PriceBook) -> None:
    usage = Usage(1000, 1000)
    before = datetime(2025, 6, 9, 23, 59, 59, tzinfo=UTC)
    after = datetime(2025, 6, 10, tzinfo=UTC)
    assert book.charge("o3", usage, before) == 50_000
    assert book.charge("o3", usage, after) == 10_000
    assert book.charge("o3", usage, datetime(2025, 1, 1, tzinfo=UTC)) is None


def test_default_book_prices_every_promised_model() -> None:
    book = load_price_book()
    at = datetime(2026, 1, 1, tzinfo=UTC)
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
        assert book.charge(model, Usage(1_000_000, 0), at), model
    assert book.price_for("gpt-4.1-mini", at).input == Decimal("0.40")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not toml = [", "not valid TOML"),
        ("x = 1", r"\[\[price\]\]"),
        ('[[price]]\nmodel = "a"\ninput = 1.5\noutput = "1"', "decimal string"),
        ('[[price]]\nmodel = "a"\ninput = "abc"\noutput = "1"', "not a decimal"),
        ('[[price]]\nmodel = "a"\ninput = "-1"\noutput = "1"', "non-negative"),
        ('[[price]]\nmodel = "a*b"\ninput = "1"\noutput = "1"', "prefix ending"),
        ('[[price]]\nmodel = "a"\ninput = "1"\noutput = "1"\n' * 2, "duplicate"),
    ],
)
def test_bad_books_are_named_precisely(text: str, message: str) -> None:
    with pytest.raises(PriceBookError, match=message):
        prices_from_toml(text, "book.toml")


def test_missing_file_is_a_price_book_error(tmp_path) -> None:
    with pytest.raises(PriceBookError, match=r"book\.toml"):
        load_price_book(tmp_path / "book.toml")


@given(
    prompt=st.integers(0, 10**7),
    cached=st.integers(0, 10**7),
    completion=st.integers(0, 10**7),
)
def test_charge_matches_exact_decimal_arithmetic(prompt: int, cached: int, completion: int) -> None:
    book = PriceBook(prices_from_toml(BOOK))
    cached = min(cached, prompt)
    exact = (
        (prompt - cached) * Decimal("0.15")
        + cached * Decimal("0.075")
        + completion * Decimal("0.60")
    )
    charged = book.charge("gpt-4o-mini", Usage(prompt, completion, cached_tokens=cached), AT)
    assert isinstance(charged, int)
    assert abs(Decimal(charged) - exact) <= Decimal("0.5")
