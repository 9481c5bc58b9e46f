"""Money as a type: integer micro-USD, never a float.

USD per one million tokens equals micro-USD per token, so prices multiply token counts directly.
"""

from __future__ import annotations

import re
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


# The largest amount one command may move or set: far above any real top-up, far below BIGINT.
MAX_AMOUNT = Micros(100_000_000 * 1_000_000)  # 100 million USD
_USD = re.compile(r"[0-9]+(\.[0-9]+)?")


def parse_usd(text: str, *, what: str = "amount", allow_zero: bool = False) -> Micros:
    """Dollars typed by a person (``12``, ``12.5``, ``0.000001``) as exact micros.

    Refused with a ``ValueError`` naming ``what``: anything but plain digits with an optional
    decimal point (signs, exponents, separators, ``NaN``), more than six decimals (a fraction of a
    micro-dollar would have to be rounded), zero unless ``allow_zero``, and more than
    ``MAX_AMOUNT``.
    """
    raw = text.strip()
    text = text if len(text) <= 40 else text[:40] + "…"  # as echoed in an error
    if raw.startswith("-"):
        raise ValueError(f"{what} {text!r} is negative: give a positive amount of USD")
    if not _USD.fullmatch(raw):
        raise ValueError(
            f"{what} {text!r} is not an amount of USD: digits with an optional decimal point,"
            " like 25 or 12.50 (no sign, no $, no separators, no exponent)"
        )
    # Exact integer arithmetic on the digits: a Decimal product would round past 28 digits.
    whole, _, fraction = raw.partition(".")
    fraction = fraction.rstrip("0")
    if len(fraction) > 6:
        raise ValueError(f"{what} {text!r} has more than 6 decimals (1 micro-USD is 0.000001)")
    whole = whole.lstrip("0")
    if len(whole) > len(str(MAX_AMOUNT // 1_000_000)):
        raise ValueError(f"{what} {text!r} is more than {MAX_AMOUNT.usd()} USD: refused as absurd")
    micros = int(whole or "0") * 1_000_000 + int(fraction.ljust(6, "0"))
    if micros == 0 and not allow_zero:
        raise ValueError(f"{what} must be more than 0")
    if micros > MAX_AMOUNT:
        raise ValueError(f"{what} {text!r} is more than {MAX_AMOUNT.usd()} USD: refused as absurd")
    return Micros(micros)
