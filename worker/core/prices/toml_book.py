"""The project's own price book format: ``[[price]]`` tables in TOML, for overrides and negotiated prices.

Every row of a TOML book is an ``override`` row. Keys (USD per 1M tokens as decimal strings):

    model = "gpt-4o"                 # exact name (required); a fine-tuned id in full
                                     # (ft:BASE:ORG:SUFFIX:ID) overrides its ft:BASE row
    aliases = ["gpt-4o-latest"]      # other exact names priced the same
    snapshots = false                # true: NAME-YYYY-MM-DD / NAME-MMDD cost the same as NAME
    provider = "azure"               # only calls routed there (default: any provider)
    tier = "flex"                    # service tier (default: "default")
    effective_from = 2025-06-10T00:00:00Z
    until = 2026-01-01T00:00:00Z     # exclusive end (default: none)
    input = "2.50"                   # required
    cached_input = "1.25"            # default: input
    cache_write = "3.125"            # default: none (calls with cache writes are unpriced)
    output = "10.00"                 # required
    reasoning = "10.00"              # default: output
    audio_input = "40.00"            # default: none (calls with audio input are unpriced)
    audio_output = "80.00"           # default: none
    cache_write_1h = "6.00"          # 1-hour cache writes; default: none (calls with them unpriced)
    image_input = "1.25"             # image tokens of the prompt; default: input
    citation = "2.00"                # citation tokens (Perplexity); default: none (calls with them
                                     # unpriced)
    image_output = "40.00"           # image output tokens (GPT Image); default: none (calls with
                                     # them unpriced)
    per_image = { "1024x1024/standard" = "0.04", "1024x1024/hd" = "0.08" }
                                     # USD per generated image by SIZE/QUALITY (DALL·E); a call
                                     # billed per image without its price is unpriced
    web_search = "0.01"              # USD per web search request, any context size, or a table
                                     # web_search = { low = "0.006", medium = "0.01", high = "0.014" }
    inference_geo = { us = "1.1" }   # token rates times this where the usage says inference ran
                                     # there; none or "global": x1; any other geography: unpriced
    max_input_tokens = 128000        # context limits, when known
    max_output_tokens = 16384
    prompt_limit = 200000            # longest prompt these prices hold for (without a band)

    [[price.band]]                   # long-context rates: a prompt over `above` tokens prices
    above = 200000                   # the whole call at them (any number of bands, one each)
    input = "6.00"                   # the band's rates, the same keys as the row's; a kind the
    cached_input = "0.60"            # band leaves out is unpriced in the band (a call in the band
    cache_write = "7.50"             # with such tokens is unpriced), except cached_input (the
    output = "22.50"                 # band's input when the row has no cache discount) and
                                     # reasoning (the band's output when the row has no reasoning)

    [price.off_peak]                 # time-of-day rates (worker.core.prices.off_peak): a call created
    hours_utc = ["16:30-00:30"]      # in these UTC windows (every day) is priced, whole, at them;
    weekday_timezone = "UTC"         # the calendar weekdays are read on (IANA name)
    input = "0.135"                  # input, cached_input, cache_write, output, reasoning: each
    output = "0.55"                  # replaces the row's rate; a kind left out keeps the row's
    [[price.off_peak.window]]        # windows on some ISO weekdays only (1 Monday .. 7 Sunday)
    hours_utc = "00:00-00:00"        # (start = end: the whole day)
    weekdays = [6, 7]

With bands and no ``prompt_limit``, a prompt up to the lowest ``above`` costs the row's rates and a
longer one the rates of the highest band it is over. ``prompt_limit`` with bands marks prompts no
rates price: over it and up to the next band's ``above``, a prompt is unpriced.

An unknown key is an error (a misspelt ``cached_inputs`` must not silently bill at ``input``).
"""

from __future__ import annotations

import tomllib
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from worker.core.errors import PriceBookError
from worker.core.prices.book import normalize_provider, normalize_tier
from worker.core.prices.off_peak import OFF_PEAK_KINDS, OffPeak, off_peak_block
from worker.core.prices.price import (
    KINDS,
    SEARCH_SIZES,
    Band,
    Layer,
    Price,
    check_fee,
    check_price,
    plain,
)

_PRICES = KINDS
_COUNTS = ("max_input_tokens", "max_output_tokens", "prompt_limit")
KEYS = frozenset(
    {"model", "aliases", "snapshots", "provider", "tier", "effective_from", "until", "band"}
    | {"web_search", "off_peak", "inference_geo", "per_image"}
    | set(_PRICES)
    | set(_COUNTS)
)
BAND_KEYS = frozenset({"above", *_PRICES})
OFF_PEAK_KEYS = frozenset({"hours_utc", "window", "weekday_timezone", *OFF_PEAK_KINDS})


def _decimal(entry: dict[str, Any], key: str, where: str) -> Decimal:
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise PriceBookError(f'{where}: {key} must be a decimal string such as "2.50"')
    try:
        amount = Decimal(str(value).strip())
    except InvalidOperation:
        raise PriceBookError(f"{where}: {key} is not a decimal: {value!r}") from None
    return plain(check_price(amount, f"{where}: {key}"))


def timestamp(value: Any, where: str) -> datetime:
    """An aware UTC datetime from a TOML datetime or an RFC 3339 string (naive means UTC)."""
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise PriceBookError(f"{where}: not a timestamp: {value!r}") from None
        return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).astimezone(UTC)
    raise PriceBookError(f"{where}: must be an RFC 3339 timestamp")


def _bands(entry: dict[str, Any], where: str) -> tuple[Band, ...]:
    tables = entry.get("band", [])
    if not isinstance(tables, list):
        raise PriceBookError(f"{where}: band must be [[price.band]] tables")
    bands = []
    for number, table in enumerate(tables, start=1):
        here = f"{where}: band #{number}"
        if not isinstance(table, dict):
            raise PriceBookError(f"{here}: expected a table")
        unknown = sorted(set(table) - BAND_KEYS)
        if unknown:
            raise PriceBookError(f"{here}: unknown key {unknown[0]!r}")
        above = table.get("above")
        if isinstance(above, bool) or not isinstance(above, int):
            raise PriceBookError(f"{here}: above must be an integer (prompt tokens)")
        rates = {key: _decimal(table, key, here) for key in _PRICES if key in table}
        try:
            bands.append(Band(above=above, **rates))
        except PriceBookError as exc:
            raise PriceBookError(f"{here}: {exc}") from None
    return tuple(bands)


def _web_search(entry: dict[str, Any], where: str) -> tuple[tuple[str, Decimal], ...]:
    value = entry.get("web_search")
    if value is None:
        return ()
    fees = value if isinstance(value, dict) else {"any": value}
    found = []
    for size, fee in fees.items():
        if size not in SEARCH_SIZES:
            raise PriceBookError(
                f"{where}: web_search sizes are {', '.join(SEARCH_SIZES)}, not {size!r}"
            )
        if isinstance(fee, bool) or not isinstance(fee, str | int):
            raise PriceBookError(f'{where}: web_search {size} must be a decimal string ("0.01")')
        try:
            amount = Decimal(str(fee).strip())
        except InvalidOperation:
            raise PriceBookError(f"{where}: web_search {size} is not a decimal: {fee!r}") from None
        found.append((size, plain(check_fee(amount, f"{where}: web_search {size}"))))
    return tuple(found)


def _per_image(entry: dict[str, Any], where: str) -> tuple[tuple[str, Decimal], ...]:
    """``per_image = { "1024x1024/standard" = "0.04", ... }``: USD per image by size/quality."""
    table = entry.get("per_image")
    if table is None:
        return ()
    if not isinstance(table, dict) or not table:
        raise PriceBookError(
            f'{where}: per_image is a table such as {{ "1024x1024/standard" = "0.04" }}'
        )
    found = []
    for key, fee in table.items():
        if isinstance(fee, bool) or not isinstance(fee, str):
            raise PriceBookError(f'{where}: per_image {key} must be a decimal string ("0.04")')
        try:
            amount = Decimal(fee.strip())
        except InvalidOperation:
            raise PriceBookError(f"{where}: per_image {key} is not a decimal: {fee!r}") from None
        found.append((key, plain(check_fee(amount, f"{where}: per_image {key}"))))
    return tuple(found)


def _inference_geo(entry: dict[str, Any], where: str) -> tuple[tuple[str, Decimal], ...]:
    table = entry.get("inference_geo")
    if table is None:
        return ()
    if not isinstance(table, dict):
        raise PriceBookError(f'{where}: inference_geo is a table such as {{ us = "1.1" }}')
    found = []
    for name, value in table.items():
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise PriceBookError(f'{where}: inference_geo {name} must be a decimal string ("1.1")')
        try:
            found.append((name, plain(Decimal(str(value).strip()))))
        except InvalidOperation:
            raise PriceBookError(
                f"{where}: inference_geo {name} is not a decimal: {value!r}"
            ) from None
    return tuple(found)


def _off_peak(entry: dict[str, Any], where: str) -> OffPeak | None:
    table = entry.get("off_peak")
    if table is None:
        return None
    here = f"{where}: off_peak"
    if not isinstance(table, dict):
        raise PriceBookError(f"{here}: expected a [price.off_peak] table")
    unknown = sorted(set(table) - OFF_PEAK_KEYS)
    if unknown:
        raise PriceBookError(f"{here}: unknown key {unknown[0]!r}")
    rates = {key: _decimal(table, key, here) for key in OFF_PEAK_KINDS if key in table}
    return off_peak_block(
        table.get("hours_utc"),
        table.get("window"),
        table.get("weekday_timezone", "UTC"),
        rates,
        here,
    )


def _price(entry: Any, where: str, source: str, default_from: datetime) -> Price:
    if not isinstance(entry, dict):
        raise PriceBookError(f"{where}: expected a table")
    unknown = sorted(set(entry) - KEYS)
    if unknown:
        raise PriceBookError(f"{where}: unknown key {unknown[0]!r}")
    model = entry.get("model")
    if not isinstance(model, str) or not model:
        raise PriceBookError(f"{where}: model must be an exact model name")
    aliases = entry.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise PriceBookError(f"{where}: aliases must be a list of names")
    snapshots = entry.get("snapshots", False)
    if not isinstance(snapshots, bool):
        raise PriceBookError(f"{where}: snapshots must be true or false")
    provider = entry.get("provider")
    tier = entry.get("tier")
    for name, value in (("provider", provider), ("tier", tier)):
        if value is not None and not isinstance(value, str):
            raise PriceBookError(f"{where}: {name} must be a name")
    prices = {key: _decimal(entry, key, where) for key in _PRICES if key in entry}
    for required in ("input", "output"):
        if required not in prices:
            raise PriceBookError(f'{where}: {required} must be a decimal string such as "2.50"')
    counts = {}
    for key in _COUNTS:
        if key in entry:
            value = entry[key]
            if isinstance(value, bool) or not isinstance(value, int):
                raise PriceBookError(f"{where}: {key} must be an integer")
            counts[key] = value
    effective = entry.get("effective_from")
    return Price(
        model=model,
        effective_from=default_from if effective is None else timestamp(effective, where),
        input=prices["input"],
        cached_input=prices.get("cached_input", prices["input"]),
        output=prices["output"],
        cache_write=prices.get("cache_write"),
        reasoning=prices.get("reasoning"),
        audio_input=prices.get("audio_input"),
        audio_output=prices.get("audio_output"),
        cache_write_1h=prices.get("cache_write_1h"),
        image_input=prices.get("image_input"),
        citation=prices.get("citation"),
        image_output=prices.get("image_output"),
        inference_geo=_inference_geo(entry, where),
        web_search=_web_search(entry, where),
        per_image=_per_image(entry, where),
        off_peak=_off_peak(entry, where),
        tier=normalize_tier(tier),
        provider=normalize_provider(provider),
        layer=Layer.OVERRIDE,
        aliases=tuple(sorted(set(aliases))),
        snapshots=snapshots,
        until=None if entry.get("until") is None else timestamp(entry["until"], where),
        bands=_bands(entry, where),
        source=source,
        **counts,
    )


def prices_from_toml(
    text: str, source: str = "price book", *, default_from: datetime | None = None
) -> list[Price]:
    """Parse a TOML price book; errors name the entry and the field.

    A row without ``effective_from`` takes ``default_from`` (1970-01-01 when None: a file is a base
    that applies to every call; ``billing prices import`` passes its own time).
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PriceBookError(f"{source}: not valid TOML: {exc}") from None
    entries = data.get("price")
    if not isinstance(entries, list) or not entries:
        raise PriceBookError(f"{source}: expected one or more [[price]] tables")
    start = default_from or datetime(1970, 1, 1, tzinfo=UTC)
    prices: list[Price] = []
    seen: set[tuple[object, ...]] = set()
    for number, entry in enumerate(entries, start=1):
        where = f"{source}: price #{number}"
        try:
            price = _price(entry, where, source, start)
        except PriceBookError as exc:
            message = str(exc)
            raise PriceBookError(
                message if message.startswith(where) else f"{where}: {message}"
            ) from None
        if price.key in seen:
            raise PriceBookError(
                f"{where}: duplicate {price.model} (tier {price.tier}, provider "
                f"{price.provider or 'any'}) at {price.effective_from.isoformat()}"
            )
        seen.add(price.key)
        prices.append(price)
    return prices
