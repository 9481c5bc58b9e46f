from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.money import Micros, round_half_up


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
