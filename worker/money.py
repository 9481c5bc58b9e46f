"""Money as a type: integer micro-USD, never a float.

USD per one million tokens equals micro-USD per token, so prices multiply token counts directly.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Any


class Micros(int):
    """An amount of integer micro-USD (1 USD = 1,000,000 micros).

    Refuses floats and non-integral decimals at construction so a rounding decision can never be made
    by accident; sums and differences of two ``Micros`` stay ``Micros``.
    """

    __slots__ = ()

    def __new__(cls, value: Any = 0) -> Micros:
        if isinstance(value, bool | float):
            raise TypeError(f"money must be integer micro-USD, not {type(value).__name__}")
        if isinstance(value, Decimal):
            if value != value.to_integral_value():
                raise TypeError(f"money must be integral micro-USD, got {value}")
            value = int(value)
        if not isinstance(value, int):
            raise TypeError(f"money must be integer micro-USD, not {type(value).__name__}")
        return super().__new__(cls, value)

    def __add__(self, other: object) -> Micros:
        if not isinstance(other, int) or isinstance(other, bool):
            return NotImplemented
        return Micros(int(self) + int(other))

    __radd__ = __add__

    def __sub__(self, other: object) -> Micros:
        if not isinstance(other, int) or isinstance(other, bool):
            return NotImplemented
        return Micros(int(self) - int(other))

    def __rsub__(self, other: object) -> Micros:
        if not isinstance(other, int) or isinstance(other, bool):
            return NotImplemented
        return Micros(int(other) - int(self))

    def __neg__(self) -> Micros:
        return Micros(-int(self))

    def __repr__(self) -> str:
        return f"Micros({int(self)})"

    def usd(self) -> str:
        """Dollars with six decimals, as finance reads them: ``Micros(1500)`` → ``'0.001500'``."""
        sign = "-" if self < 0 else ""
        whole, frac = divmod(abs(int(self)), 1_000_000)
        return f"{sign}{whole}.{frac:06d}"


def round_half_up(amount: Decimal) -> Micros:
    """Round a Decimal amount of micro-USD to the nearest integer, halves away from zero; once."""
    return Micros(int(amount.to_integral_value(rounding=ROUND_HALF_UP)))
