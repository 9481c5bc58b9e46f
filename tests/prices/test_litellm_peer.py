"""Held against a peer: every priced model of the bundled list, through our pricing and LiteLLM's.

Both sides price from the same data: the test loads ``worker/data/litellm_prices.json`` into
``litellm.model_cost`` (the process-global map, restored afterwards), so a difference is one of the
pricing rules, never of two price-file versions. Each call is a model as a gateway routes it: the
row's name and its entry's ``litellm_provider`` (our book normalises the provider the same way),
once per distinct (model, provider). Every difference must have a reason computed from the row and
the shape, listed in ``KNOWN`` and in the table "Held against LiteLLM" of docs/operations.md, and
each reason's count is pinned, so a new difference fails.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from worker.core.prices.book import PriceBook, normalize_provider
from worker.core.prices.bundled import list_prices
from worker.core.prices.price import DEFAULT_TIER, Price
from worker.core.result import Usage

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = ROOT / "worker" / "data" / "litellm_prices.json"
DOC = ROOT / "docs" / "operations.md"
# A Tuesday, 12:00 UTC: inside DeepSeek V4's off-peak window (weekdays 10:00-24:00 UTC);
# 08:00 is at its peak rates.
AT = datetime(2026, 12, 1, 12, tzinfo=UTC)
PEAK = datetime(2026, 12, 1, 8, tzinfo=UTC)
MICRO = Decimal(10) ** 6


@dataclass(frozen=True)
class Shape:
    usage: Usage
    at: datetime = AT


SHAPES = {
    "text": Shape(Usage(10_000, 2_000)),
    "cached": Shape(Usage(10_000, 2_000, cached_tokens=6_000)),
    "cached_peak": Shape(Usage(10_000, 2_000, cached_tokens=6_000), PEAK),
    "cache_write": Shape(Usage(10_000, 2_000, cached_tokens=3_000, cache_write_tokens=4_000)),
    "cache_write_1h": Shape(
        Usage(10_000, 2_000, cache_write_tokens=4_000, cache_write_1h_tokens=1_500)
    ),
    "reasoning": Shape(Usage(10_000, 5_000, reasoning_tokens=3_000)),
    "audio": Shape(Usage(10_000, 4_000, audio_prompt_tokens=2_500, audio_completion_tokens=1_500)),
    "at_200k": Shape(Usage(200_000, 1_000, cached_tokens=50_000)),
    "long": Shape(Usage(300_000, 4_000, cached_tokens=100_000, reasoning_tokens=1_000)),
}

KNOWN = {
    "ours_unpriced_audio": (
        "the row has no price for the call's audio (in or out): we leave the call unpriced; LiteLLM "
        "charges audio in at the text input rate and audio out at the output rate"
    ),
    "ours_unpriced_cache_write": (
        "the row has no cache-write price: we leave the call unpriced; LiteLLM charges cache "
        "writes at the input rate"
    ),
    "ours_unpriced_cache_write_1h": (
        "the row has no 1-hour cache-write price: we leave the call unpriced; LiteLLM charges "
        "1-hour writes at the 5-minute write rate"
    ),
    "litellm_fireworks_cache_read_half": (
        "a Fireworks entry states no cache-read price: we charge cache reads at the input rate "
        "(no discount stated); LiteLLM assumes half the input rate "
        "(FIREWORKS_AI_DEFAULT_CACHE_READ_RATE_RATIO)"
    ),
}

EXPECTED = {
    "ours_unpriced_audio": 930,
    "ours_unpriced_cache_write": 1726,
    "ours_unpriced_cache_write_1h": 63,
    "litellm_fireworks_cache_read_half": 944,
}
"""Each reason's count, as observed with litellm 1.108.7 on the bundled LiteLLM 1.110.2 list."""

EXPECTED_CALLS = 948
"""Distinct (model, provider) calls of the default-tier list rows."""


@pytest.fixture(scope="module")
def litellm_on_our_list() -> Any:
    """LiteLLM with ``litellm.model_cost`` holding exactly the bundled snapshot; restored after."""
    if "litellm" not in sys.modules:  # no remote fetch of LiteLLM's own map on import
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    litellm = pytest.importorskip("litellm")
    from litellm.utils import _invalidate_model_cost_lowercase_map

    data = json.loads(SNAPSHOT.read_text("utf-8"))
    data.pop("_snapshot")
    saved = dict(litellm.model_cost)
    litellm.model_cost.clear()
    litellm.model_cost.update(data)
    _invalidate_model_cost_lowercase_map()
    try:
        yield litellm, data
    finally:
        litellm.model_cost.clear()
        litellm.model_cost.update(saved)
        _invalidate_model_cost_lowercase_map()


def _litellm_usage(litellm: Any, usage: Usage) -> Any:
    from litellm.types.utils import (
        CacheCreationTokenDetails,
        CompletionTokensDetailsWrapper,
        PromptTokensDetailsWrapper,
    )

    five_minutes = usage.cache_write_tokens - usage.cache_write_1h_tokens
    prompt = PromptTokensDetailsWrapper(
        cached_tokens=usage.cached_tokens or None,
        cache_creation_tokens=usage.cache_write_tokens or None,
        audio_tokens=usage.audio_prompt_tokens or None,
        cache_creation_token_details=CacheCreationTokenDetails(
            ephemeral_5m_input_tokens=five_minutes,
            ephemeral_1h_input_tokens=usage.cache_write_1h_tokens,
        )
        if usage.cache_write_1h_tokens
        else None,
    )
    completion = CompletionTokensDetailsWrapper(
        reasoning_tokens=usage.reasoning_tokens or None,
        audio_tokens=usage.audio_completion_tokens or None,
    )
    return litellm.Usage(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens,
        prompt_tokens_details=prompt,
        completion_tokens_details=completion,
    )


def _theirs(litellm: Any, model: str, provider: str, shape: Shape) -> Decimal:
    """LiteLLM's charge in micro-USD (exact decimal of its floats), priced at ``shape.at``."""
    from litellm._internal_context import pinned_billing_time

    with pinned_billing_time(shape.at):
        prompt, completion = litellm.cost_per_token(
            model=model,
            custom_llm_provider=provider,
            usage_object=_litellm_usage(litellm, shape.usage),
        )
    return (Decimal(repr(prompt)) + Decimal(repr(completion))) * MICRO


def _equal(ours: int, theirs: Decimal) -> bool:
    return abs(theirs - ours) <= 1 + abs(theirs) * Decimal("1e-9")


def _reason(
    row: Price, entry: dict[str, Any], provider: str, usage: Usage, ours: int | None
) -> tuple[str, Decimal | None]:
    """Why the two sides may differ on this call, from the row and the usage alone, with what
    LiteLLM should then charge in micro-USD (None: nothing to check, we leave the call unpriced)."""
    if ours is None:
        if (usage.audio_prompt_tokens and row.audio_input is None) or (
            usage.audio_completion_tokens and row.audio_output is None
        ):
            return "ours_unpriced_audio", None
        if usage.cache_write_tokens and row.cache_write is None:
            return "ours_unpriced_cache_write", None
        if usage.cache_write_1h_tokens and row.cache_write_1h is None:
            return "ours_unpriced_cache_write_1h", None
        return "unexplained: we are unpriced", None
    if (
        provider == "fireworks_ai"
        and usage.cached_tokens
        and "cache_read_input_token_cost" not in entry
        and row.cached_input == row.input
    ):
        _, band = row.rates_for(usage.prompt_tokens)
        rate = row.input if band is None or band.input is None else band.input
        return "litellm_fireworks_cache_read_half", ours - usage.cached_tokens * rate / 2
    return "unexplained", None


@pytest.fixture(scope="module")
def compared(litellm_on_our_list: Any) -> dict[str, Any]:
    litellm, data = litellm_on_our_list
    rows = [p for p in list_prices() if p.tier == DEFAULT_TIER]
    book = PriceBook(list_prices())
    prefix = rows[0].source.rsplit(" ", 1)[0] + " "
    calls: dict[tuple[str, str], tuple[Price, dict[str, Any]]] = {}
    for row in rows:
        entry = data[row.source.removeprefix(prefix)]
        provider = entry["litellm_provider"]
        calls.setdefault((row.model, provider), (row, entry))
    seen: Counter[str] = Counter()
    unexplained: list[str] = []
    matches = 0
    for (model, provider), (_, entry) in sorted(calls.items()):
        ours_provider = normalize_provider(provider)
        resolved = book.resolve(model, AT, provider=ours_provider).price
        assert resolved is not None, (model, provider)
        for name, shape in SHAPES.items():
            ours = book.charge(model, shape.usage, shape.at, provider=ours_provider)
            theirs = _theirs(litellm, model, provider, shape)
            if ours is not None and _equal(ours, theirs):
                matches += 1
                continue
            reason, expected = _reason(resolved, entry, provider, shape.usage, ours)
            if expected is not None and not _equal(int(expected), Decimal(round(theirs))):
                reason = "unexplained: " + reason
            if reason.startswith("unexplained"):
                unexplained.append(f"{model} ({provider}) {name}: ours {ours}, LiteLLM {theirs}")
            seen[reason] += 1
    return {"calls": len(calls), "matches": matches, "seen": seen, "unexplained": unexplained}


def test_every_difference_has_a_known_reason(compared: dict[str, Any]) -> None:
    assert compared["unexplained"] == []
    assert set(compared["seen"]) <= set(KNOWN)


def test_each_reason_count_is_pinned(compared: dict[str, Any]) -> None:
    assert compared["calls"] == EXPECTED_CALLS
    assert dict(compared["seen"]) == EXPECTED
    total = compared["calls"] * len(SHAPES)
    assert compared["matches"] == total - sum(EXPECTED.values())


def test_every_known_reason_is_in_the_operations_table() -> None:
    """docs/operations.md, "Held against LiteLLM": one line per reason, its count and why."""
    text = DOC.read_text("utf-8")
    section = text.split("### Held against LiteLLM", 1)[1].split("\n## ", 1)[0]
    assert set(EXPECTED) == set(KNOWN)
    for reason, why in KNOWN.items():
        assert f"| `{reason}` | {EXPECTED[reason]} | {why} |" in section, reason
    listed = {line.split("`")[1] for line in section.splitlines() if line.startswith("| `")}
    assert listed == set(KNOWN)
