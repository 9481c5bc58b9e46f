"""Usage fields whose value changes the price, priced by the bundled book or loud (issue 49):
Perplexity's request fee by search context size and Deep Research's citation, reasoning and search
counts; Anthropic's inference geography, server-side web search and fast mode; the service tier a
usage names; a dated snapshot the book does not know yet. Fixtures: tests/fixtures/priced_fields,
each naming its source. Expected charges are the published prices times the counts, written out."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.core.prices import PriceBook, load_price_book, prices_from_toml
from worker.core.reconcile import reconcile_response, reconcile_stream
from worker.core.request import request_from_dict
from worker.core.result import Outcome, Reason, Result, Usage
from worker.core.substitution import billed_model
from worker.core.usage import Verdict, read_usage

FIXTURES = Path(__file__).parent / "fixtures" / "priced_fields"
AT = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
BOOK = load_price_book()


def _run(name: str, *, body: dict[str, Any] | None = None, **request: Any) -> Result:
    document = orjson.loads((FIXTURES / name).read_bytes())
    meta = request_from_dict(
        {
            "request_id": f"pf-{name}",
            "account_id": "acct_pf",
            "reserved_micros": 1_000_000,
            "created_at": AT.isoformat(),
            "messages": [{"role": "user", "content": "Hello"}],
            **document["request"],
            **request,
        }
    )
    if "frames" in document:
        frames = b"".join(
            b"data: " + (b"[DONE]" if f == "[DONE]" else orjson.dumps(f)) + b"\n\n"
            for f in document["frames"]
        )
        return reconcile_stream(meta, frames, BOOK)
    return reconcile_response(meta, document["status"], body or document["body"], BOOK)


def _body(name: str) -> dict[str, Any]:
    return orjson.loads((FIXTURES / name).read_bytes())["body"]


def test_every_fixture_names_its_source() -> None:
    for path in FIXTURES.glob("*.json"):
        assert len(orjson.loads(path.read_bytes())["source"]) > 40, path.name


# --- Perplexity ------------------------------------------------------------------------------


@pytest.mark.parametrize(("size", "fee"), [("low", 5_000), ("medium", 8_000), ("high", 12_000)])
def test_a_sonar_call_pays_its_request_fee_by_search_context_size(size: str, fee: int) -> None:
    body = _body("perplexity_sonar_request_fee_body.json")
    body["usage"]["search_context_size"] = size
    result = _run("perplexity_sonar_request_fee_body.json", body=body)
    # 1200 x 1.00 + 300 x 1.00 + the request fee (USD 5 / 8 / 12 per 1,000 requests)
    assert (result.outcome, result.charge_micros) == (Outcome.SETTLED, 1_500 + fee)
    assert result.usage is not None and result.usage.search_context_size == size
    if size == "medium":  # Perplexity's own cost.total_cost says the same: no drift
        assert (
            result.provider_cost_micros == 9_500 and "provider_cost_drift" not in result.anomalies
        )


def test_a_sonar_call_without_a_size_pays_perplexitys_default_low_else_the_requested_one() -> None:
    body = _body("perplexity_sonar_request_fee_body.json")
    del body["usage"]["search_context_size"]
    assert _run("perplexity_sonar_request_fee_body.json", body=body).charge_micros == 1_500 + 5_000
    asked = _run(
        "perplexity_sonar_request_fee_body.json",
        body=body,
        web_search_options={"search_context_size": "high"},
    )
    assert asked.charge_micros == 1_500 + 12_000


def test_deep_research_prices_citations_reasoning_and_searches() -> None:
    result = _run("perplexity_deep_research_stream.json")
    # 10 x 2 (input) + 30 x 2 (citation) + 20 x 8 (output) + 50 x 3 (reasoning) + 40 x 0.005 USD
    assert (result.outcome, result.reason) == (Outcome.SETTLED, None)
    assert result.charge_micros == 20 + 60 + 160 + 150 + 200_000
    usage = result.usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.citation_tokens) == (40, 30)
    assert (usage.completion_tokens, usage.reasoning_tokens, usage.web_search_requests) == (
        70,
        50,
        40,
    )


def test_perplexitys_fields_from_another_provider_stay_unknown() -> None:
    block = {"prompt_tokens": 10, "completion_tokens": 5, "citation_tokens": 3}
    assert (
        read_usage(block, provider="openai", model="gpt-4o").verdict is Verdict.UNPRICED_COMPONENT
    )
    assert read_usage(block, provider="perplexity", model="sonar").verdict is Verdict.BILLABLE


# --- Anthropic -------------------------------------------------------------------------------


def test_us_only_inference_is_priced_at_its_multiplier() -> None:
    result = _run("anthropic_inference_geo_body.json")
    # claude-opus-4-6 at 5 / 25 per 1M, times 1.1 for US-only inference: (25 x 5 + 150 x 25) x 1.1
    assert (result.outcome, result.charge_micros) == (Outcome.SETTLED, 4_263)  # 4262.5, half up
    assert result.usage is not None and result.usage.inference_geo == "us"


@pytest.mark.parametrize(("geo", "charge"), [("global", 3_875), ("GLOBAL", 3_875)])
def test_the_global_geography_is_the_standard_price(geo: str, charge: int) -> None:
    body = _body("anthropic_inference_geo_body.json")
    body["usage"]["inference_geo"] = geo
    assert _run("anthropic_inference_geo_body.json", body=body).charge_micros == charge


def test_an_unknown_geography_is_an_unpriced_component_never_guessed() -> None:
    body = _body("anthropic_inference_geo_body.json")
    body["usage"]["inference_geo"] = "eu"
    result = _run("anthropic_inference_geo_body.json", body=body)
    assert (result.outcome, result.reason) == (Outcome.UNSETTLED, Reason.UNPRICED_COMPONENT)
    assert "inference_geo=eu" in (result.usage_problem or "")
    assert result.exposure_micros == 3_875  # at 1x: a lower bound


def test_a_geography_that_is_not_a_name_is_implausible() -> None:
    body = _body("anthropic_inference_geo_body.json")
    body["usage"]["inference_geo"] = 1
    result = _run("anthropic_inference_geo_body.json", body=body)
    assert (result.outcome, result.reason) == (Outcome.UNSETTLED, Reason.IMPLAUSIBLE_USAGE)


def test_fast_mode_is_loud_until_the_book_prices_it() -> None:
    body = _body("anthropic_inference_geo_body.json")
    body["usage"]["speed"] = "fast"
    result = _run("anthropic_inference_geo_body.json", body=body)
    assert (result.outcome, result.reason) == (Outcome.UNSETTLED, Reason.UNPRICED_COMPONENT)
    body["usage"]["speed"] = "standard"
    assert _run("anthropic_inference_geo_body.json", body=body).outcome is Outcome.SETTLED


def test_server_side_web_search_is_priced_for_every_claude_model() -> None:
    body = _body("anthropic_usage_service_tier_body.json")
    body["usage"].update(service_tier="standard", server_tool_use={"web_search_requests": 3})
    result = _run("anthropic_usage_service_tier_body.json", body=body)
    # claude-haiku-4-5 (the list states no search fee for it): 1000 x 1 + 200 x 5, and 3 searches
    # at USD 10 per 1,000 (Anthropic's pricing page, worker/core/prices/provider_terms.py)
    assert (result.outcome, result.charge_micros) == (Outcome.SETTLED, 2_000 + 30_000)


# --- the service tier a usage names ----------------------------------------------------------


def test_the_tier_the_usage_names_prices_the_call() -> None:
    result = _run("anthropic_usage_service_tier_body.json")
    # the list's batch row of claude-haiku-4-5: 0.50 / 2.50 per 1M (half the standard 1 / 5)
    assert (result.outcome, result.charge_micros) == (Outcome.SETTLED, 500 + 500)
    assert result.service_tier == "batch"


@pytest.mark.parametrize("top", ["default", "priority"])
def test_a_usage_tier_that_is_not_the_responses_is_inconsistent(top: str) -> None:
    body = _body("anthropic_usage_service_tier_body.json")
    body["service_tier"] = top
    result = _run("anthropic_usage_service_tier_body.json", body=body)
    assert (result.outcome, result.reason) == (Outcome.UNSETTLED, Reason.INCONSISTENT_USAGE)
    assert "usage.service_tier 'batch'" in (result.usage_problem or "")


def test_standard_in_the_usage_is_the_default_tier_of_the_response() -> None:
    body = _body("anthropic_usage_service_tier_body.json")
    body["usage"]["service_tier"] = "standard"
    body["service_tier"] = "default"
    result = _run("anthropic_usage_service_tier_body.json", body=body)
    assert (result.outcome, result.charge_micros) == (Outcome.SETTLED, 1_000 + 1_000)


# --- a snapshot the book does not know yet ---------------------------------------------------


def test_an_unknown_snapshot_of_the_requested_model_is_priced_at_the_requested_name() -> None:
    billed = billed_model("gpt-4o", "gpt-4o-2024-11-20-preview-xyz", BOOK, AT)
    assert (billed.model, billed.substituted) == ("gpt-4o", True)
    prefixed = billed_model("openai/gpt-4o", "gpt-4o-2099-01-01", BOOK, AT, provider="openai")
    assert prefixed.substituted
    # another model the book does not know is still not priced at the requested one's price
    other = billed_model("gpt-4o", "mystery-model-1", BOOK, AT)
    assert (other.model, other.substituted) == ("mystery-model-1", True)
    # nor when the requested name has no price then (sonar's rows begin on 2025-04-18)
    early = datetime(2025, 1, 1, tzinfo=UTC)
    assert billed_model("sonar", "sonar-2099-01-01", BOOK, early).model == "sonar-2099-01-01"


def test_the_snapshot_call_settles_with_the_anomaly() -> None:
    body = _body("perplexity_sonar_request_fee_body.json")
    body["model"] = "sonar-2099-01-01"
    result = _run("perplexity_sonar_request_fee_body.json", body=body)
    assert (result.outcome, result.model, result.charge_micros) == (Outcome.SETTLED, "sonar", 9_500)
    assert "model_substituted" in result.anomalies


# --- the book's arithmetic, for any counts ---------------------------------------------------

_GEO_BOOK = PriceBook(
    prices_from_toml(
        """
[[price]]
model = "m"
input = "3.00"
cached_input = "0.30"
cache_write = "3.75"
output = "15.00"
citation = "2.00"
inference_geo = { us = "1.1", eu = "1.25" }
web_search = { low = "0.005", medium = "0.008", high = "0.012" }
"""
    )
)
_RATES = {"input": Fraction(3), "cached": Fraction(3, 10), "write": Fraction(15, 4)}


@settings(max_examples=300, deadline=None)
@given(
    uncached=st.integers(0, 10**7),
    cached=st.integers(0, 10**7),
    write=st.integers(0, 10**7),
    citations=st.integers(0, 10**7),
    output=st.integers(0, 10**7),
    searches=st.integers(0, 1000),
    size=st.sampled_from(["low", "medium", "high"]),
    geo=st.sampled_from([None, "global", "us", "eu"]),
)
def test_a_charge_is_the_exact_sum_rounded_once(
    uncached: int,
    cached: int,
    write: int,
    citations: int,
    output: int,
    searches: int,
    size: str,
    geo: str | None,
) -> None:
    usage = Usage(
        uncached + cached + write + citations,
        output,
        cached_tokens=cached,
        cache_write_tokens=write,
        citation_tokens=citations,
        web_search_requests=searches,
        search_context_size=size,
        inference_geo=geo,
    )
    multiplier = {None: 1, "global": 1, "us": Fraction(11, 10), "eu": Fraction(5, 4)}[geo]
    tokens = (
        uncached * _RATES["input"]
        + cached * _RATES["cached"]
        + write * _RATES["write"]
        + citations * 2
        + output * 15
    )
    fee = {"low": 5_000, "medium": 8_000, "high": 12_000}[size]
    exact = tokens * multiplier + searches * fee
    expected = int(exact) + (1 if exact - int(exact) >= Fraction(1, 2) else 0)
    assert _GEO_BOOK.charge("m", usage, AT) == expected


@given(geo=st.from_regex(r"[a-z]{2,8}", fullmatch=True).filter(lambda g: g not in ("us", "eu")))
def test_any_other_geography_is_unpriced_and_named(geo: str) -> None:
    usage = Usage(100, 10, inference_geo=geo)
    if geo == "global":
        assert _GEO_BOOK.charge("m", usage, AT) == 450
        return
    assert _GEO_BOOK.charge("m", usage, AT) is None
    missing, rest = _GEO_BOOK.unpriced_components("m", usage, AT)
    assert missing == (("inference_geo", geo),) and rest == 450


def test_the_book_keeps_the_new_dimensions_through_storage() -> None:
    from worker.core.prices.price import dimensions_from_json, dimensions_to_json

    row = _GEO_BOOK.prices[0]
    found = dimensions_from_json(dimensions_to_json(row), "test")
    assert found["citation"] == Decimal("2.00")
    assert dict(found["inference_geo"]) == {"us": Decimal("1.1"), "eu": Decimal("1.25")}


# --- cache writes by lifetime against their total --------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    five=st.integers(0, 10**6),
    hour=st.integers(0, 10**6),
    total=st.integers(0, 3 * 10**6),
    litellm=st.booleans(),
)
def test_cache_write_lifetimes_must_add_up_to_the_cache_writes(
    five: int, hour: int, total: int, litellm: bool
) -> None:
    # Anthropic's Messages usage (docs.anthropic.com/en/api/messages: cache_creation's
    # ephemeral_5m_input_tokens and ephemeral_1h_input_tokens, the parts of
    # cache_creation_input_tokens), and LiteLLM's copy under prompt_tokens_details
    lifetimes = {"ephemeral_5m_input_tokens": five, "ephemeral_1h_input_tokens": hour}
    if litellm:
        block: dict[str, Any] = {
            "prompt_tokens": 10 + total,
            "completion_tokens": 5,
            "prompt_tokens_details": {
                "cache_creation_tokens": total,
                "cache_creation_token_details": lifetimes,
            },
        }
    else:
        block = {
            "input_tokens": 10,
            "output_tokens": 5,
            "cache_creation_input_tokens": total,
            "cache_creation": lifetimes,
        }
    reading = read_usage(block)
    if five > total or hour > total:  # a part past its whole
        assert reading.verdict is Verdict.IMPLAUSIBLE
        return
    if five + hour == total:
        assert reading.verdict is Verdict.BILLABLE
        assert reading.usage is not None and reading.usage.cache_write_1h_tokens == hour
        return
    assert reading.verdict is Verdict.INCONSISTENT
    assert reading.larger is not None
    # the exposure is priced at the larger count of writes, inside the prompt
    assert reading.larger.cache_write_tokens == max(total, five + hour)
    assert reading.larger.prompt_tokens == 10 + max(total, five + hour)
    assert reading.problem is not None and "cache writes" in reading.problem


def test_one_lifetime_alone_is_a_part_not_a_sum() -> None:
    block = {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_creation_input_tokens": 300,
        "cache_creation": {"ephemeral_1h_input_tokens": 100},
    }
    reading = read_usage(block)
    assert reading.verdict is Verdict.BILLABLE and reading.usage is not None
    assert (reading.usage.cache_write_tokens, reading.usage.cache_write_1h_tokens) == (300, 100)
