from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.core.money import MAX_AMOUNT, Micros, parse_usd, round_half_up


def test_refuses_floats_and_fractions() -> None:
    with pytest.raises(TypeError):
        Micros(1.5)
    with pytest.raises(TypeError):
        Micros(Decimal("1.5"))
    with pytest.raises(TypeError):
        Micros(True)
    with pytest.raises(TypeError):
        Micros("12")


def test_arithmetic_stays_money() -> None:
    total = Micros(5) + Micros(7) - 2
    assert total == 10 and isinstance(total, Micros)
    assert isinstance(-Micros(3), Micros)
    assert isinstance(10 - Micros(3), Micros)


@pytest.mark.parametrize(
    ("micros", "usd"),
    [(0, "0.000000"), (1500, "0.001500"), (1_000_000, "1.000000"), (-2_500_001, "-2.500001")],
)
def test_usd_has_six_decimals(micros: int, usd: str) -> None:
    assert Micros(micros).usd() == usd


@pytest.mark.parametrize(
    ("amount", "expected"),
    [("0.5", 1), ("1.4999", 1), ("2.5", 3), ("-0.5", -1), ("7", 7)],
)
def test_round_half_up(amount: str, expected: int) -> None:
    assert round_half_up(Decimal(amount)) == expected


@given(st.integers(min_value=-(10**15), max_value=10**15))
def test_usd_round_trips(micros: int) -> None:
    assert int(Decimal(Micros(micros).usd()) * 1_000_000) == micros


# --- parse_usd: dollars typed by a person -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "micros"),
    [("12", 12_000_000), ("12.5", 12_500_000), ("0.000001", 1), ("12.5000000", 12_500_000),
     (" 3 ", 3_000_000), ("100000000", 100_000_000_000_000), ("007.25", 7_250_000)],
)  # fmt: skip
def test_parse_usd(text: str, micros: int) -> None:
    assert parse_usd(text) == micros and isinstance(parse_usd(text), Micros)


@pytest.mark.parametrize(
    ("text", "message"),
    [("-1", "negative"), ("0", "more than 0"), ("0.000", "more than 0"),
     ("0.0000001", "more than 6 decimals"), ("1.00000000000000000000000000001", "6 decimals"),
     ("100000000.000001", "absurd"), ("9" * 5000, "absurd"), ("1e3", "not an amount"),
     ("NaN", "not an amount"), ("1,000", "not an amount"), ("$5", "not an amount"),
     ("", "not an amount"), ("+5", "not an amount"), ("٣", "not an amount")],
)  # fmt: skip
def test_parse_usd_refuses(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_usd(text)


def test_parse_usd_zero_when_allowed() -> None:
    assert parse_usd("0", allow_zero=True) == 0


@given(st.integers(min_value=1, max_value=int(MAX_AMOUNT)))
def test_parse_usd_reads_back_what_usd_writes(micros: int) -> None:
    assert parse_usd(Micros(micros).usd()) == micros
