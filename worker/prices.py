"""The price book: USD per 1M tokens per model, effective-dated, and the one charge function.

USD per 1M tokens equals micro-USD per token, so a charge is a sum of integer token counts times decimal
prices, rounded half-up once into integer micro-USD. The charge takes usage, model and time and nothing
about streaming: a streamed and a non-streamed call with the same usage cost the same by construction.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from importlib import resources
from pathlib import Path
from typing import Any

from worker.errors import PriceBookError
from worker.money import Micros, round_half_up
from worker.result import Usage


@dataclass(frozen=True, slots=True)
class Price:
    """One row of the book. ``pattern`` is an exact model name, or a prefix ending in ``*``."""

    pattern: str
    effective_from: datetime
    input: Decimal
    cached_input: Decimal
    output: Decimal

    @property
    def is_prefix(self) -> bool:
        return self.pattern.endswith("*")

    def matches(self, model: str) -> bool:
        if self.is_prefix:
            return model.startswith(self.pattern[:-1])
        return model == self.pattern

    def specificity(self) -> tuple[int, int]:
        """Exact names beat prefixes; among prefixes, the longest wins."""
        if self.is_prefix:
            return (0, len(self.pattern) - 1)
        return (1, len(self.pattern))

    def charge(self, usage: Usage) -> Micros:
        cached = min(usage.cached_tokens, usage.prompt_tokens)
        uncached = usage.prompt_tokens - cached
        total = (
            uncached * self.input
            + cached * self.cached_input
            + usage.completion_tokens * self.output
        )
        return round_half_up(total)


class PriceBook:
    """Effective-dated prices; ``price_for`` picks the most specific pattern in force at a time."""

    def __init__(self, prices: Iterable[Price]) -> None:
        self._prices = sorted(prices, key=lambda p: (p.pattern, p.effective_from))
        self._cache: dict[str, list[Price]] = {}

    @property
    def prices(self) -> list[Price]:
        return list(self._prices)

    def _candidates(self, model: str) -> list[Price]:
        found = self._cache.get(model)
        if found is None:
            matching = [p for p in self._prices if p.matches(model)]
            if matching:
                best = max(p.specificity() for p in matching)
                found = [p for p in matching if p.specificity() == best]
            else:
                found = []
            if len(self._cache) < 10_000:
                self._cache[model] = found
        return found

    def price_for(self, model: str, at: datetime) -> Price | None:
        """The price in force for ``model`` at ``at``, or None (the model is unpriced then)."""
        in_force = None
        for price in self._candidates(model):
            if price.effective_from <= at:
                in_force = price
        return in_force

    def charge(
        self,
        model: str,
        usage: Usage,
        at: datetime,
        *,
        tier: str | None = None,
        provider: str | None = None,
    ) -> Micros | None:
        """Integer micro-USD for ``usage`` of ``model`` at ``at``; None when no price is in force.

        ``tier`` is the service tier the response reported (``flex``, ``priority``, ``batch``;
        None: the default one) and ``provider`` where the gateway routed the call (None: unknown).
        """
        price = self.price_for(model, at)
        return None if price is None else price.charge(usage)


def _decimal(entry: dict[str, Any], key: str, where: str) -> Decimal:
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise PriceBookError(f'{where}: {key} must be a decimal string such as "2.50"')
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        raise PriceBookError(f"{where}: {key} is not a decimal: {value!r}") from None
    if not amount.is_finite() or amount < 0:
        raise PriceBookError(f"{where}: {key} must be a non-negative decimal")
    return amount


def _timestamp(value: Any, where: str) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise PriceBookError(f"{where}: effective_from is not a timestamp: {value!r}") from None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    raise PriceBookError(f"{where}: effective_from must be an RFC 3339 timestamp")


def prices_from_toml(text: str, source: str = "price book") -> list[Price]:
    """Parse the TOML price book (``[[price]]`` tables); errors name the entry and field."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PriceBookError(f"{source}: not valid TOML: {exc}") from None
    entries = data.get("price")
    if not isinstance(entries, list) or not entries:
        raise PriceBookError(f"{source}: expected one or more [[price]] tables")
    prices = []
    seen: set[tuple[str, datetime]] = set()
    for number, entry in enumerate(entries, start=1):
        where = f"{source}: price #{number}"
        model = entry.get("model")
        if not isinstance(model, str) or not model or "*" in model[:-1]:
            raise PriceBookError(f"{where}: model must be a name or a prefix ending in '*'")
        effective = _timestamp(entry.get("effective_from", "1970-01-01T00:00:00Z"), where)
        inp = _decimal(entry, "input", where)
        cached = _decimal(entry, "cached_input", where) if "cached_input" in entry else inp
        price = Price(
            model, effective.astimezone(UTC), inp, cached, _decimal(entry, "output", where)
        )
        if (price.pattern, price.effective_from) in seen:
            raise PriceBookError(
                f"{where}: duplicate {model} at {price.effective_from.isoformat()}"
            )
        seen.add((price.pattern, price.effective_from))
        prices.append(price)
    return prices


def load_price_book(path: str | Path | None = None) -> PriceBook:
    """Load a TOML price book file, or the bundled default when ``path`` is None."""
    if path is None:
        text = resources.files("worker.data").joinpath("prices.toml").read_text("utf-8")
        return PriceBook(prices_from_toml(text, "default price book"))
    try:
        text = Path(path).read_text("utf-8")
    except OSError as exc:
        raise PriceBookError(f"{path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise PriceBookError(f"{path}: not UTF-8 text") from None
    return PriceBook(prices_from_toml(text, str(path)))
