"""LiteLLM's ``model_prices_and_context_window.json``, read exactly, as ``list`` rows.

Every number is parsed as a Decimal straight from the JSON text (``parse_float=Decimal``), never
through a float, and converted from USD per token to USD per 1M tokens by moving the decimal point:
``1.5e-07`` is exactly ``0.15``.

Which entries become rows: ``mode`` ``chat`` or ``responses`` with both ``input_cost_per_token`` and
``output_cost_per_token``; the others (embeddings, images, audio endpoints, per-second prices) are
skipped and counted. A key ``PROVIDER/NAME`` whose first segment is its ``litellm_provider`` prices
NAME for that provider only; any other key prices the model under its whole key for any provider
(``gpt-4o`` is OpenAI's row, ``azure/gpt-4o`` Azure's).

What one entry gives, per tier (default; ``_flex``, ``_priority``, ``_batches`` → flex, priority,
batch when the entry states that tier's input and output prices):

| LiteLLM key                                     | row field    |
|-------------------------------------------------|--------------|
| ``input_cost_per_token``                        | input        |
| ``cache_read_input_token_cost`` (``input_cost_per_token_cache_hit``) | cached_input (else input) |
| ``cache_creation_input_token_cost``             | cache_write  |
| ``output_cost_per_token``                       | output       |
| ``output_cost_per_reasoning_token``             | reasoning (else output) |
| ``input_cost_per_audio_token``                  | audio_input  |
| ``output_cost_per_audio_token``                 | audio_output |
| ``cache_creation_input_token_cost_above_1hr``   | cache_write_1h (1-hour cache writes) |
| ``input_cost_per_image_token``                  | image_input (else input) |
| ``search_context_cost_per_query`` (USD by ``search_context_size_*``) | web_search |
| ``off_peak_pricing`` (windows, rates)           | off_peak (``worker.core.prices.off_peak``) |
| (none: the provider's own terms, ``worker.core.prices.provider_terms``) | web_search where the entry states none, inference_geo |
| ``max_input_tokens`` / ``max_output_tokens``    | context limits |
| any ``*_above_NNNk_tokens`` key, ``tiered_pricing`` | prompt_limit: the lowest threshold |
| ``KEY_above_NNNk_tokens`` (KEY a per-token key above but the cache hit) | the band above NNN,000 tokens |

**Long-context bands.** A tier's keys ``KEY_above_NNNk_tokens`` + the tier's suffix (so
``input_cost_per_token_above_200k_tokens_batches`` for the batch row, as ``_batches`` names the
batch row's own prices) give that row's band above NNN,000 prompt tokens, one kind per key: a
prompt past it prices the whole call at those rates (``Price.rates_for``). A kind the band has no
key for is unpriced in the band (``Band`` has the two defaults that follow the row's: cache reads at
the band's input rate when the row has no cache discount, reasoning at the band's output rate when
the row has no reasoning price). A threshold the tier has no band key for (in LiteLLM 1.110.2,
``gpt-5.4``'s priority row, ``gemini-pro-latest``'s flex and batch rows) stays a ``prompt_limit``:
a longer prompt of that tier is unpriced. Thresholds of other units
(``*_per_character_above_128k_tokens``, images, seconds) and of cache-write lifetimes
(``cache_creation_input_token_cost_above_1hr_above_100k_tokens``) make a prompt_limit only.

**Every other key is accounted for.** A key is read (above), descriptive (``DESCRIPTIVE``: names,
dates, capabilities, limits that price nothing), or *unapplied*: a pricing key the book has no rule
for (cached audio, per-image and per-second prices, regional and FedRAMP uplifts, free search
quotas, the keys of tiers the book does not know). An unapplied key with a value other than zero
goes on every row of its entry (``Price.unapplied``), so ``billing prices which`` shows that the row
does not price that dimension; a call whose usage reports such a dimension is unsettled
``unpriced_component`` by the usage reader, whose field for it is unknown.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from worker.core.errors import PriceBookError
from worker.core.prices.book import normalize_provider
from worker.core.prices.off_peak import OffPeak, off_peak_block
from worker.core.prices.price import Band, Layer, Price, check_fee, check_price, plain
from worker.core.prices.provider_terms import provider_terms

MODES = frozenset({"chat", "responses"})
TIERS = {"": "default", "_flex": "flex", "_priority": "priority", "_batches": "batch"}
NOT_MODELS = frozenset({"sample_spec", "_snapshot"})
_THRESHOLD = re.compile(r"_above_(\d+)k_tokens")
BAND_KEYS = {
    "input_cost_per_token": "input",
    "cache_read_input_token_cost": "cached_input",
    "cache_creation_input_token_cost": "cache_write",
    "output_cost_per_token": "output",
    "output_cost_per_reasoning_token": "reasoning",
    "input_cost_per_audio_token": "audio_input",
    "output_cost_per_audio_token": "audio_output",
    "cache_creation_input_token_cost_above_1hr": "cache_write_1h",
    "input_cost_per_image_token": "image_input",
}
"""The per-token keys whose ``_above_NNNk_tokens`` variants are band rates, and the kind each gives."""
_BAND_KEY = re.compile(
    "(?P<key>" + "|".join(BAND_KEYS) + r")_above_(?P<k>\d+)k_tokens(?P<suffix>_[a-z]+)?"
)
_MILLION = 6
OFF_PEAK_KEYS = {
    "input_cost_per_token": "input",
    "cache_read_input_token_cost": "cached_input",
    "cache_creation_input_token_cost": "cache_write",
    "output_cost_per_token": "output",
    "output_cost_per_reasoning_token": "reasoning",
}
"""The rates of an ``off_peak_pricing`` block, and the kind each gives."""
SEARCH_SIZE_KEYS = {
    "search_context_size_low": "low",
    "search_context_size_medium": "medium",
    "search_context_size_high": "high",
}
READ_KEYS = frozenset(
    {
        *BAND_KEYS,
        "input_cost_per_token_cache_hit",
        "search_context_cost_per_query",
        "off_peak_pricing",
        "max_input_tokens",
        "max_output_tokens",
        "litellm_provider",
        "mode",
        "tiered_pricing",
    }
)
"""The keys of an entry the rows are read from (with their tier suffixes, and band variants)."""
DESCRIPTIVE = frozenset(
    {
        "source", "deprecation_date", "deprecation_source", "successor_model", "max_tokens",
        "metadata", "comment", "rpm", "tpm", "reasoning_contexts", "reasoning_modes",
        "reasoning_effort_levels", "default_reasoning_effort", "thinking_always_on",
        "thinking_on_by_default", "token_count_framing", "token_count_tool_framing",
        "token_count_tokenizer", "token_count_model", "prompt_cache_min_tokens",
        "provider_specific_entry", "use_openai_responses_path", "tool_use_system_prompt_tokens",
        "output_vector_size", "web_search_billing_unit",
    }
)  # fmt: skip
"""Keys that price nothing: names, dates, limits, capabilities (and ``supports_*``,
``supported_*``). ``web_search_billing_unit`` says the fee is per query, as the book applies it."""


@dataclass
class LitellmFile:
    """The rows of one file, and what was skipped (entry key → why)."""

    prices: list[Price]
    skipped: dict[str, str] = field(default_factory=dict)


def _reject_constant(name: str) -> Any:
    raise PriceBookError(f"not a number the book accepts: {name}")


def load_json(text: str | bytes, source: str) -> dict[str, Any]:
    """The file as a dict, numbers as Decimal or int (never float); NaN and Infinity refused."""
    try:
        data = json.loads(text, parse_float=Decimal, parse_constant=_reject_constant)
    except ValueError as exc:
        raise PriceBookError(f"{source}: not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise PriceBookError(f"{source}: expected a JSON object of models")
    return data


def _per_million(entry: dict[str, Any], key: str, where: str) -> Decimal | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Decimal | int):
        raise PriceBookError(f"{where}: {key} must be a number, got {value!r}")
    return plain(check_price(Decimal(value).scaleb(_MILLION), f"{where}: {key} (per 1M tokens)"))


def _count(entry: dict[str, Any], key: str) -> int | None:
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value


REACHING_PROVIDERS = frozenset({"xai"})
"""Providers whose long-context rates start *at* the threshold a key names: xAI's model pages give
"< 200k" and "≥ 200k prompt tokens" prices ("Requests whose prompt reaches 200k tokens are billed at
the higher rate", docs.x.ai, Grok 4.20). Their ``_above_200k_tokens`` band is read as above 199,999
(``Band.above`` is exclusive); every other provider's starts above the number it names."""


def _threshold(entry: dict[str, Any], thousands: str) -> int:
    """The number of prompt tokens a ``_above_NNNk_tokens`` key's band starts above."""
    tokens = int(thousands) * 1000
    return tokens - 1 if entry.get("litellm_provider") in REACHING_PROVIDERS else tokens


def _prompt_limit(entry: dict[str, Any]) -> int | None:
    limits = [_threshold(entry, m[1]) for key in entry if (m := _THRESHOLD.search(key))]
    tiers = entry.get("tiered_pricing")
    if isinstance(tiers, list):
        for band in tiers:
            bounds = band.get("range") if isinstance(band, dict) else None
            if isinstance(bounds, list) and bounds:
                for bound in bounds:
                    if (
                        isinstance(bound, Decimal | int)
                        and not isinstance(bound, bool)
                        and bound > 0
                    ):
                        limits.append(int(bound))
    return min(limits) if limits else None


def _bands(entry: dict[str, Any], suffix: str, where: str) -> tuple[Band, ...]:
    """The bands of the tier of ``suffix`` ('' for the default tier): one per threshold its
    ``KEY_above_NNNk_tokens`` + ``suffix`` keys name, each kind from its own key."""
    rates: dict[int, dict[str, Decimal]] = {}
    for key in entry:
        match = _BAND_KEY.fullmatch(key)
        if match is None or (match["suffix"] or "") != suffix:
            continue
        value = _per_million(entry, key, where)
        if value is not None:
            rates.setdefault(_threshold(entry, match["k"]), {})[BAND_KEYS[match["key"]]] = value
    try:
        return tuple(Band(above=above, **kinds) for above, kinds in sorted(rates.items()))  # type: ignore[arg-type]
    except PriceBookError as exc:
        raise PriceBookError(f"{where}: {exc}") from None


def _fee(value: object, where: str) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, Decimal | int):
        raise PriceBookError(f"{where} must be a number, got {value!r}")
    return plain(check_fee(Decimal(value), where))


def _web_search(entry: dict[str, Any], where: str) -> tuple[tuple[str, Decimal], ...]:
    """``search_context_cost_per_query``: USD per search request by context size."""
    fees = entry.get("search_context_cost_per_query")
    if fees is None:
        return ()
    here = f"{where}: search_context_cost_per_query"
    if not isinstance(fees, dict) or not set(fees) <= set(SEARCH_SIZE_KEYS):
        raise PriceBookError(f"{here}: expected {', '.join(SEARCH_SIZE_KEYS)}")
    return tuple((SEARCH_SIZE_KEYS[k], _fee(v, f"{here}.{k}")) for k, v in sorted(fees.items()))


def _off_peak(entry: dict[str, Any], where: str) -> OffPeak | None:
    """``off_peak_pricing``: its windows (``hours_utc`` every day, ``windows`` by weekday), the
    calendar of its weekdays, and its per-token rates."""
    block = entry.get("off_peak_pricing")
    if block is None:
        return None
    here = f"{where}: off_peak_pricing"
    if not isinstance(block, dict):
        raise PriceBookError(f"{here}: expected an object")
    unknown = set(block) - {*OFF_PEAK_KEYS, "hours_utc", "windows", "weekday_timezone"}
    if unknown:
        raise PriceBookError(f"{here}: the book cannot apply {sorted(unknown)[0]!r}")
    rates = {
        kind: _per_million(block, key, here)
        for key, kind in OFF_PEAK_KEYS.items()
        if block.get(key) is not None
    }
    return off_peak_block(
        block.get("hours_utc"),
        block.get("windows"),
        block.get("weekday_timezone", "UTC"),
        rates,
        here,
    )


def _read(key: str) -> bool:
    """Whether the book reads ``key`` (itself, with a known tier's suffix, or as a band key)."""
    if _BAND_KEY.fullmatch(key):
        return (_BAND_KEY.fullmatch(key)["suffix"] or "") in TIERS  # type: ignore[index]
    for suffix in TIERS:
        if suffix and key.endswith(suffix) and key[: -len(suffix)] in BAND_KEYS:
            return True
    return key in READ_KEYS


def unapplied_keys(entry: dict[str, Any]) -> tuple[str, ...]:
    """The pricing keys of ``entry`` the book does not apply, with a value other than zero."""
    found = []
    for key, value in entry.items():
        if _read(key) or key in DESCRIPTIVE or key.startswith(("supports_", "supported_")):
            continue
        if value in (None, 0, "", [], {}) or value is False:
            continue
        found.append(key)
    return tuple(sorted(found))


def model_and_provider(key: str, provider: str) -> tuple[str, str | None]:
    """``azure/gpt-4o`` (provider azure) → (``gpt-4o``, ``azure``); ``gpt-4o`` → (``gpt-4o``, None)."""
    head, _, rest = key.partition("/")
    if rest and head == provider:
        return rest, normalize_provider(provider)
    return key, None


def entry_prices(
    key: str, entry: dict[str, Any], effective_from: datetime, source: str
) -> list[Price]:
    """The rows of one LiteLLM entry (one per tier it prices); raises ``PriceBookError`` on a value
    the book refuses (a negative or absurd price), naming the entry and the key."""
    where = f"{source}: {key}"
    provider = entry.get("litellm_provider")
    if not isinstance(provider, str) or not provider:
        raise PriceBookError(f"{where}: litellm_provider must be a name")
    model, row_provider = model_and_provider(key, provider)
    web_search = _web_search(entry, where)
    common = {
        "model": model,
        "effective_from": effective_from,
        "provider": row_provider,
        "layer": Layer.LIST,
        "max_input_tokens": _count(entry, "max_input_tokens"),
        "max_output_tokens": _count(entry, "max_output_tokens"),
        "prompt_limit": _prompt_limit(entry),
        "web_search": web_search,
        "off_peak": _off_peak(entry, where),
        "unapplied": unapplied_keys(entry),
        "source": f"{source} {key}",
        # what the provider states for all its models (``worker.core.prices.provider_terms``)
        **provider_terms(provider, web_search),
    }
    rows = []
    for suffix, tier in TIERS.items():
        inp = _per_million(entry, f"input_cost_per_token{suffix}", where)
        out = _per_million(entry, f"output_cost_per_token{suffix}", where)
        if inp is None or out is None:
            continue
        cached = _per_million(entry, f"cache_read_input_token_cost{suffix}", where)
        if cached is None and not suffix:
            cached = _per_million(entry, "input_cost_per_token_cache_hit", where)
        rows.append(
            Price(
                input=inp,
                cached_input=inp if cached is None else cached,
                output=out,
                cache_write=_per_million(entry, f"cache_creation_input_token_cost{suffix}", where),
                reasoning=_per_million(entry, f"output_cost_per_reasoning_token{suffix}", where),
                audio_input=_per_million(entry, f"input_cost_per_audio_token{suffix}", where),
                audio_output=_per_million(entry, f"output_cost_per_audio_token{suffix}", where),
                cache_write_1h=_per_million(
                    entry, f"cache_creation_input_token_cost_above_1hr{suffix}", where
                ),
                image_input=_per_million(entry, f"input_cost_per_image_token{suffix}", where),
                bands=_bands(entry, suffix, where),
                tier=tier,
                **common,  # type: ignore[arg-type]
            )
        )
    return rows


def skip_reason(key: str, entry: Any) -> str | None:
    """Why an entry gives no rows (None: it gives some)."""
    if key in NOT_MODELS or not isinstance(entry, dict):
        return "not a model"
    if entry.get("mode") not in MODES:
        return f"mode {entry.get('mode')!r}"
    if entry.get("input_cost_per_token") is None or entry.get("output_cost_per_token") is None:
        return "no per-token input and output price"
    return None


def prices_from_litellm(
    text: str | bytes,
    source: str,
    effective_from: datetime,
    *,
    providers: frozenset[str] | None = None,
) -> LitellmFile:
    """Every row of a LiteLLM price file, in force from ``effective_from``.

    ``providers`` keeps only entries of those ``litellm_provider`` values (None: all). Distinct keys
    give distinct rows: a key's provider prefix and the key itself cannot both name one row.
    """
    data = load_json(text, source)
    result = LitellmFile([])
    for key, entry in data.items():
        reason = skip_reason(key, entry)
        if (
            reason is None
            and providers is not None
            and entry.get("litellm_provider") not in providers
        ):
            reason = f"provider {entry.get('litellm_provider')!r} not selected"
        if reason is not None:
            result.skipped[key] = reason
            continue
        result.prices.extend(entry_prices(key, entry, effective_from, source))
    return result
