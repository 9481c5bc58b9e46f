"""Time-of-day prices: the hours in which a row's off-peak rates replace its own.

DeepSeek prices calls in its off-peak hours below its standard rates (LiteLLM keeps the windows and
rates as ``off_peak_pricing``; https://api-docs.deepseek.com/quick_start/pricing). A call is priced
by its ``created_at`` (when the gateway took the request), against the windows:

* a window is ``HH:MM-HH:MM`` in UTC, the start inclusive and the end exclusive; it may wrap past
  midnight (``16:30-00:30``), and a window whose start equals its end is the whole day;
* a rule is windows, on ISO weekdays (1 Monday .. 7 Sunday; none: every day), the weekday read on
  the calendar of ``weekday_timezone`` (an IANA name, default UTC) while the hours stay UTC, as the
  source states them;
* the call is off-peak when any rule holds at ``created_at``.

Pure; no IO. Values are validated here, once: a window, weekday or zone the book cannot read is a
``PriceBookError`` at import, never a window silently ignored (which would charge the peak price).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from worker.core.errors import PriceBookError

OFF_PEAK_KINDS = ("input", "cached_input", "cache_write", "output", "reasoning")
"""The kinds an off-peak block may price; any other kind keeps the row's own rate off-peak."""
_WINDOW = re.compile(r"\s*([01]\d|2[0-3]):([0-5]\d)\s*-\s*([01]\d|2[0-3]):([0-5]\d)\s*")
_DAYS = {
    "mon": 1, "monday": 1, "tue": 2, "tuesday": 2, "wed": 3, "wednesday": 3, "thu": 4,
    "thursday": 4, "fri": 5, "friday": 5, "sat": 6, "saturday": 6, "sun": 7, "sunday": 7,
}  # fmt: skip
_MINUTES_PER_DAY = 24 * 60


def _minutes(text: str, where: str) -> tuple[int, int]:
    match = _WINDOW.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise PriceBookError(f"{where}: a window is 'HH:MM-HH:MM' in UTC, got {text!r}")
    h1, m1, h2, m2 = (int(group) for group in match.groups())
    return h1 * 60 + m1, h2 * 60 + m2


def _weekday(value: object, where: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 7:
        return value
    if isinstance(value, str) and value.strip().lower() in _DAYS:
        return _DAYS[value.strip().lower()]
    raise PriceBookError(f"{where}: a weekday is 1 (Monday) to 7 (Sunday) or its name: {value!r}")


@dataclass(frozen=True, slots=True)
class Rule:
    """Windows (minutes after midnight UTC, [start, end)) on some weekdays (None: every day)."""

    windows: tuple[tuple[int, int], ...]
    weekdays: frozenset[int] | None = None

    def holds(self, minute: int, weekday: int) -> bool:
        if self.weekdays is not None and weekday not in self.weekdays:
            return False
        for start, end in self.windows:
            if start == end:
                return True
            if start < end and start <= minute < end:
                return True
            if start > end and (minute >= start or minute < end):
                return True
        return False

    def text(self) -> str:
        hours = ", ".join(
            f"{s // 60:02d}:{s % 60:02d}-{e // 60:02d}:{e % 60:02d}" for s, e in self.windows
        )
        if self.weekdays is None:
            return f"{hours} UTC every day"
        return f"{hours} UTC on ISO weekdays {','.join(str(d) for d in sorted(self.weekdays))}"


@dataclass(frozen=True, slots=True)
class OffPeak:
    """A row's off-peak rates (USD per 1M tokens; None: the row's own rate, except the defaults
    ``worker.core.prices.price.Price`` applies) and the rules of when they hold."""

    rules: tuple[Rule, ...]
    weekday_timezone: str = "UTC"
    input: Decimal | None = None
    cached_input: Decimal | None = None
    cache_write: Decimal | None = None
    output: Decimal | None = None
    reasoning: Decimal | None = None

    def __post_init__(self) -> None:
        if not self.rules:
            raise PriceBookError("off_peak: at least one window")
        if all(getattr(self, kind) is None for kind in OFF_PEAK_KINDS):
            raise PriceBookError("off_peak: states at least one rate")
        try:
            ZoneInfo(self.weekday_timezone)
        except (ZoneInfoNotFoundError, ValueError, TypeError):
            raise PriceBookError(
                f"off_peak: weekday_timezone {self.weekday_timezone!r} is not an IANA zone"
            ) from None

    def holds_at(self, at: datetime) -> bool:
        """Whether a call created at ``at`` (aware) is priced off-peak."""
        utc = at.astimezone(UTC)
        minute = utc.hour * 60 + utc.minute
        weekday = at.astimezone(ZoneInfo(self.weekday_timezone)).isoweekday()
        return any(rule.holds(minute, weekday) for rule in self.rules)

    def stated(self) -> dict[str, str]:
        return {k: str(getattr(self, k)) for k in OFF_PEAK_KINDS if getattr(self, k) is not None}

    def text(self) -> str:
        zone = "" if self.weekday_timezone == "UTC" else f" (weekdays on {self.weekday_timezone})"
        return "; or ".join(rule.text() for rule in self.rules) + zone

    def to_json(self) -> dict[str, object]:
        return {
            "rules": [
                {
                    "hours_utc": [
                        f"{s // 60:02d}:{s % 60:02d}-{e // 60:02d}:{e % 60:02d}"
                        for s, e in rule.windows
                    ],
                    **({} if rule.weekdays is None else {"weekdays": sorted(rule.weekdays)}),
                }
                for rule in self.rules
            ],
            "weekday_timezone": self.weekday_timezone,
            **self.stated(),
        }


def rules_from(hours: object, windows: object, where: str) -> tuple[Rule, ...]:
    """The rules of a source's block: ``hours`` (every day: a window or a list of them) and
    ``windows`` (a list of ``{hours_utc, weekdays}``), as LiteLLM's ``off_peak_pricing`` and the
    TOML's ``[price.off_peak]`` state them."""
    rules = []
    if hours is not None:
        rules.append(Rule(_windows(hours, where)))
    if windows is not None:
        if not isinstance(windows, list):
            raise PriceBookError(f"{where}: windows must be a list of {{hours_utc, weekdays}}")
        for number, item in enumerate(windows, start=1):
            here = f"{where}: window #{number}"
            if not isinstance(item, dict) or set(item) - {"hours_utc", "weekdays"}:
                raise PriceBookError(f"{here}: expected hours_utc and optional weekdays")
            days = item.get("weekdays")
            if days is not None and (not isinstance(days, list) or not days):
                raise PriceBookError(f"{here}: weekdays must be a non-empty list")
            rules.append(
                Rule(
                    _windows(item.get("hours_utc"), here),
                    None if days is None else frozenset(_weekday(d, here) for d in days),
                )
            )
    return tuple(rules)


def off_peak_block(
    hours: object, windows: object, zone: object, rates: dict[str, Decimal], where: str
) -> OffPeak:
    """An ``OffPeak`` from a source's parts (``rules_from``'s ``hours`` and ``windows``, the
    weekdays' calendar, the rates by kind); every error names ``where``."""
    try:
        if not isinstance(zone, str):
            raise PriceBookError("weekday_timezone must be an IANA name")
        return OffPeak(rules_from(hours, windows, where), zone, **rates)
    except PriceBookError as exc:
        message = str(exc)
        raise PriceBookError(
            message if message.startswith(where) else f"{where}: {message}"
        ) from None


def _windows(hours: object, where: str) -> tuple[tuple[int, int], ...]:
    items = [hours] if isinstance(hours, str) else hours
    if not isinstance(items, list) or not items:
        raise PriceBookError(f"{where}: hours_utc must be 'HH:MM-HH:MM' or a list of them")
    return tuple(_minutes(item, where) for item in items)


def off_peak_from_json(data: object, where: str) -> OffPeak:
    """The block ``OffPeak.to_json`` wrote (rates as decimal text)."""
    if not isinstance(data, dict):
        raise PriceBookError(f"{where}: off_peak must be an object")
    rates = {}
    for kind in OFF_PEAK_KINDS:
        if data.get(kind) is not None:
            try:
                rates[kind] = Decimal(str(data[kind]))
            except ArithmeticError:
                raise PriceBookError(f"{where}: off_peak {kind} is not a decimal") from None
    return off_peak_block(
        None, data.get("rules"), data.get("weekday_timezone", "UTC"), rates, where
    )
