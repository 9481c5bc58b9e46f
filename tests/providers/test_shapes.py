"""Every provider fixture reconciled to its outcome and charge, worked out by hand.

Charges are micro-USD: tokens * USD per 1M tokens (the prices of ``shapes.BOOK``), summed and rounded
half-up once: uncached prompt * input + cache reads * cached input + completion * output, where
completion includes reasoning however the provider counted it. Cache writes and audio have no price
of their own in this book, so they are priced as the part of the prompt they are.
"""

from __future__ import annotations

import pytest

from models.anomalies import AnomalyKind
from worker.core.anomalies import classify
from worker.core.result import Outcome, Reason, UsageSource

from .shapes import fixture_names, load, reconcile

SETTLED = (Outcome.SETTLED, None)

# fixture: (outcome, reason, charge µ$, usage shape, canonical (prompt, cached, completion, reasoning))
EXPECTED = {
    # 1117 * 2.50 + 46 * 10.00 = 2792.5 + 460 = 3252.5 → 3253
    "openai/chat_object_details.json": (*SETTLED, 3253, "openai", (1117, 0, 46, 0)),
    # 9 * 2.50 + 2 * 10.00 = 22.5 + 20 = 42.5 → 43 (details null; prompt-filter chunk ignored)
    "azure/prompt_filter_and_usage.json": (*SETTLED, 43, "openai", (9, 0, 2, 0)),
    # x_groq.usage only, include_usage false, still reported: 23 * 0.05 + 19 * 0.08 = 2.67 → 3
    "groq/x_groq_usage_only.json": (*SETTLED, 3, "groq", (23, 0, 19, 0)),
    # x_groq.usage and a top-level usage that agree: the same 3
    "groq/x_groq_and_usage.json": (*SETTLED, 3, "groq", (23, 0, 19, 0)),
    # hit 80, miss 20: 20 * 0.27 + 80 * 0.07 + 50 * 1.10 = 5.4 + 5.6 + 55 = 66.0 → 66
    # (every prompt token at the full price would be 27 + 55 = 82: +24 %)
    "deepseek/cache_hit_miss.json": (*SETTLED, 66, "deepseek", (100, 80, 50, 0)),
    # 11 * 0.27 + 40 * 1.10 = 2.97 + 44 = 46.97 → 47
    "deepseek/litellm_issue_block.json": (*SETTLED, 47, "deepseek", (11, 0, 40, 0)),
    # a usage chunk, then an error event: an error finish, never billed as clean
    "openai/usage_then_error_stream.json": (
        Outcome.UNSETTLED,
        Reason.ERROR_FINISH,
        None,
        "openai",
        (20, 0, 5, 0),
    ),
    # an interrupted generation with a usage block: never billed as clean
    "deepseek/insufficient_system_resource.json": (
        Outcome.UNSETTLED,
        Reason.ERROR_FINISH,
        None,
        "deepseek",
        (12, 0, 3, 3),
    ),
    # input 21 excludes the cache: prompt = 21 + 1800 written + 9000 read = 10821;
    # 21 * 3.00 + 1800 * 3.75 + 9000 * 0.30 + 393 * 15.00 = 63 + 6750 + 2700 + 5895 = 15408
    "anthropic/native_usage_passthrough.json": (
        *SETTLED,
        15408,
        "anthropic",
        (10821, 9000, 393, 0),
    ),
    # (2006 - 1920) * 3.00 + 1920 * 0.30 + 300 * 15.00 = 258 + 576 + 4500 = 5334
    "anthropic/litellm_openai_with_cache_write.json": (
        *SETTLED,
        5334,
        "openai",
        (2006, 1920, 300, 0),
    ),
    # last block of the stream: prompt 9, completion 3, total 105 → 93 thought tokens only in the
    # total: 9 * 0.50 + (3 + 93) * 3.00 = 4.5 + 288 = 292.5 → 293 (completion alone: 14, -95 %)
    "gemini/thoughts_only_in_total_stream.json": (
        *SETTLED,
        293,
        "reasoning_apart",
        (9, 0, 96, 93),
    ),
    # 21 + 0 + 60 = 81: 21 * 0.30 + (0 + 60) * 2.50 = 6.3 + 150 = 156.3 → 156
    "gemini/reasoning_stated_apart.json": (*SETTLED, 156, "reasoning_apart", (21, 0, 60, 60)),
    # no provider: the bare gemini- name rules; 623 - 20 - 198 = 405 thought tokens:
    # 20 * 0.30 + 603 * 2.50 = 6 + 1507.5 = 1513.5 → 1514
    "gemini/thoughts_in_total_body.json": (*SETTLED, 1514, "reasoning_apart", (20, 0, 603, 405)),
    # 10120 + 1499 + 2809 = 14428: (10120 - 128) * 1.25 + 128 * 0.20 + (1499 + 2809) * 2.50
    # = 12490 + 25.6 + 10770 = 23285.6 → 23286; xAI's own 232856000 ticks / 10^4 = 23285.6 → 23286
    "xai/reasoning_apart_with_cost.json": (
        *SETTLED,
        23286,
        "reasoning_apart",
        (10120, 128, 4308, 2809),
    ),
    # 12 + 1 + 386 = 399: 12 * 0.30 + 387 * 0.50 = 3.6 + 193.5 = 197.1 → 197
    "xai/grok_3_mini_stream.json": (*SETTLED, 197, "reasoning_apart", (12, 0, 387, 386)),
    # 100 of the 194 written to the cache: 94 * 3.00 + 100 * 3.75 + 2 * 15.00 = 282 + 375 + 30 = 687
    "openrouter/usage_accounting.json": (*SETTLED, 687, "openai", (194, 0, 2, 0)),
    # 8 * 0.10 + 3 * 0.30 = 0.8 + 0.9 = 1.7 → 2
    "mistral/usage_on_finish_chunk.json": (*SETTLED, 2, "openai", (8, 0, 3, 0)),
    # thinking chunks read as reasoning, not bad frames: 10 * 2 + 40 * 5 = 220
    "mistral/magistral_thinking_chunks.json": (*SETTLED, 220, "openai", (10, 0, 40, 0)),
    # the last cumulative block wins: 16 * 0.20 + 3 * 0.20 = 3.8 → 4
    "vllm/continuous_usage_stats.json": (*SETTLED, 4, "openai", (16, 0, 3, 0)),
    # 17 * 0.60 + 200 * 0.60 = 10.2 + 120 = 130.2 → 130
    "together/usage_on_last_chunk.json": (*SETTLED, 130, "openai", (17, 0, 200, 0)),
    # (25 - 16) * 0.60 + 16 * 0.30 + 2 * 2.50 = 5.4 + 4.8 + 5 = 15.2 → 15
    "fireworks/usage_chunk_opt_in.json": (*SETTLED, 15, "openai", (25, 16, 2, 0)),
    # 24 * 0.10 + 58 * 0.10 = 8.2 → 8
    "ollama/usage_final_chunk.json": (*SETTLED, 8, "openai", (24, 0, 58, 0)),
    # n: 2, one choice came and finished: 8 * 0.15 + 1 * 0.60 = 1.2 + 0.6 = 1.8 → 2
    "openai/n_ignored_stream.json": (*SETTLED, 2, "openai", (8, 0, 1, 0)),
    # LiteLLM's all-zero usage on a usage-less upstream's body: a function call counted as 0
    # completion tokens is never settled at 0 (nor at the estimate): unsettled, exposure priced
    "litellm/zero_usage_body.json": (
        Outcome.UNSETTLED,
        Reason.IMPLAUSIBLE_USAGE,
        None,
        None,
        None,
    ),
    # the only usage block came after [DONE]: not part of the call
    "openai/usage_after_done.json": (Outcome.UNSETTLED, Reason.MISSING_USAGE, None, None, None),
    # Responses-API usage in a chat completion: the cached tokens are a part of input_tokens.
    # (12033 - 11904) * 2.00 + 11904 * 0.50 + 44 * 8.00 = 258 + 5952 + 352 = 6562
    # (read as Anthropic's, input_tokens the uncached part: 12033 * 2.00 + 352 = 24418, +272 %)
    "openai/responses_usage_cached_body.json": (
        *SETTLED,
        6562,
        "openai_responses",
        (12033, 11904, 44, 0),
    ),
    # reasoning is a part of output_tokens (75 + 1186 = 1261): 75 * 1.10 + 1186 * 4.40
    # = 82.5 + 5218.4 = 5300.9 → 5301, 1024 of the 1186 reasoning
    "openai/responses_usage_reasoning_stream.json": (
        *SETTLED,
        5301,
        "openai_responses",
        (75, 0, 1186, 1024),
    ),
    # a search model's Chat Completion: no search count in its usage, one search billed (the
    # request's web_search_options size, low, costs what every size does here):
    # 100 * 2.50 + 200 * 10.00 + 1 * 25000 = 250 + 2000 + 25000 = 27250
    "openai/search_preview_body.json": (*SETTLED, 27250, "openai", (100, 0, 200, 0)),
    # a web search, a fee per request on top of the tokens:
    # 6039 * 3.00 + 931 * 15.00 + 1 * 10000 = 18117 + 13965 + 10000 = 42082
    "anthropic/web_search_server_tool_use.json": (
        *SETTLED,
        42082,
        "anthropic",
        (6039, 0, 931, 0),
    ),
    # 100 of the 556 cache writes are 1-hour ones, at their own price: 50 + 556 = 606 prompt;
    # 50 * 3.00 + 456 * 3.75 + 100 * 6.00 + 20 * 15.00 = 150 + 1710 + 600 + 300 = 2760
    "anthropic/cache_write_1h.json": (*SETTLED, 2760, "anthropic", (606, 0, 20, 0)),
    # the same through LiteLLM's Usage, with a web search too; its copies of the cache read (1000)
    # and write (556) agree: (2006 - 1000 - 556) * 3.00 + 1000 * 0.30 + 456 * 3.75 + 100 * 6.00
    # + 300 * 15.00 + 1 * 10000 = 1350 + 300 + 1710 + 600 + 4500 + 10000 = 18460
    "litellm/anthropic_cache_lifetimes_body.json": (
        *SETTLED,
        18460,
        "openai",
        (2006, 1000, 300, 0),
    ),
    # Perplexity's citation tokens (a part of the prompt: 10 + 2) and its request fee (one search
    # request a call, tests/test_perplexity.py): no price for either in this book's sonar row
    "perplexity/citations_and_searches_stream.json": (
        Outcome.UNSETTLED,
        Reason.UNPRICED_COMPONENT,
        None,
        "openai",
        (12, 0, 5, 0),
    ),
}

# fixture: (the unpriced fields and values the anomaly names, the exposure: the price of the parts
# that were read, a lower bound)
UNPRICED = {
    # 10 * 1.00 + 5 * 1.00 = 15
    "perplexity/citations_and_searches_stream.json": (
        "web_search_requests=1, citation_tokens=2",
        15,
    ),
}


def test_every_fixture_has_a_source_line_and_an_expectation() -> None:
    names = fixture_names()
    assert set(EXPECTED) | {"openai/function_call_stream.json"} == set(names)
    for name in names:
        source = load(name)["source"]
        assert isinstance(source, str) and len(source) > 20, name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_provider_shape(name: str) -> None:
    outcome, reason, charge, shape, counts = EXPECTED[name]
    result = reconcile(name)
    assert (result.outcome, result.reason) == (outcome, reason)
    assert result.charge_micros == charge
    assert result.usage_shape == shape
    if counts is None:
        assert result.usage is None
    else:
        usage = result.usage
        assert usage is not None
        got = (usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens)
        assert (*got, usage.reasoning_tokens) == counts
    if outcome is Outcome.SETTLED:
        assert result.usage_source is UsageSource.REPORTED


@pytest.mark.parametrize("name", sorted(UNPRICED))
def test_an_unpriced_component_is_named_and_exposed_at_the_priced_parts(name: str) -> None:
    fields, exposure = UNPRICED[name]
    result = reconcile(name)
    assert (result.outcome, result.reason, result.charge_micros) == (
        Outcome.UNSETTLED,
        Reason.UNPRICED_COMPONENT,
        None,
    )
    assert result.exposure_micros == exposure
    detail = f"usage fields without a price: {fields}; exposure priced without them (a lower bound)"
    assert result.usage_problem == detail
    assert classify(result)[AnomalyKind.UNPRICED_COMPONENT] == detail


def test_cache_writes_and_audio_are_kept_as_parts() -> None:
    assert reconcile("openrouter/usage_accounting.json").usage.cache_write_tokens == 100
    assert reconcile("anthropic/native_usage_passthrough.json").usage.cache_write_tokens == 1800


def test_the_provider_cost_cross_check() -> None:
    xai = reconcile("xai/reasoning_apart_with_cost.json")
    assert xai.provider_cost_micros == 23286  # 232856000 ticks / 10^4 = 23285.6 → 23286
    assert "provider_cost_drift" not in xai.anomalies
    # OpenRouter's documented example reports cost 0.95 USD = 950000 micros for 196 tokens we
    # price at 687: far past 1 %, so the call is flagged (and still charged by the book).
    routed = reconcile("openrouter/usage_accounting.json")
    assert routed.provider_cost_micros == 950_000
    assert "provider_cost_drift" in routed.anomalies
    assert routed.charge_micros == 687


def test_service_tier_is_taken_from_the_response() -> None:
    assert reconcile("openai/chat_object_details.json").service_tier == "default"


def test_n_ignored_settles_alike_streamed_and_not() -> None:
    streamed = reconcile("openai/n_ignored_stream.json")
    assert "n_ignored" in streamed.anomalies
    document = load("openai/n_ignored_stream.json")
    body = {
        "id": "chatcmpl-n",
        "object": "chat.completion",
        "model": "gpt-4o-mini",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}
        ],
        "usage": document["frames"][2]["usage"],
    }
    from worker.core.reconcile import reconcile_response

    from .shapes import BOOK, meta_of

    plain = reconcile_response(meta_of(document, "n-plain", stream=False), 200, body, BOOK)
    assert (plain.outcome, plain.charge_micros) == (streamed.outcome, streamed.charge_micros)
    assert "n_ignored" in plain.anomalies


def test_frames_after_done_are_flagged() -> None:
    result = reconcile("openai/usage_after_done.json")
    assert "frames_after_done" in result.anomalies
    assert (result.frames_after_done, result.usage_after_done) == (1, True)


def test_legacy_function_call_is_assembled_and_estimated() -> None:
    result = reconcile("openai/function_call_stream.json")
    (choice,) = result.choices
    assert choice.function_call is not None
    assert choice.function_call.name == "get_current_weather"
    assert choice.function_call.arguments == (
        '{\n  "location": "Boston, MA",\n  "unit": "fahrenheit"\n}'
    )
    assert (result.outcome, result.usage_source) == (Outcome.SETTLED, UsageSource.ESTIMATED)
    # include_usage false: billed at the estimate, which now counts the call (it counted 0
    # completion tokens before). cl100k_base: "get_current_weather" is 3 tokens, the arguments 19;
    # the prompt is 15 (cookbook rules): 15 * 1.50 + 22 * 2.00 = 22.5 + 44 = 66.5 → 67.
    assert (result.estimate.prompt_tokens, result.estimate.completion_tokens) == (15, 22)
    assert result.charge_micros == 67


def test_litellm_zero_usage_is_unsettled_with_its_exposure() -> None:
    """The all-zero block LiteLLM gives a usage-less upstream's body: the call had output, so the
    block is implausible; its exposure is the estimate's price, as for any unsettled call."""
    result = reconcile("litellm/zero_usage_body.json")
    assert result.usage_problem == "0 completion tokens reported for a completion that has output"
    assert result.charge_micros is None
    # the estimate: the function call is 22 completion tokens (see the legacy function call test)
    assert result.estimate.completion_tokens == 22
    assert result.exposure_micros is not None and result.exposure_micros > 0


# The provider reported (and bills) the usage of these broken calls: their exposure is its price.
USAGE_BEFORE_ERROR = {
    # 20 * 0.15 + 5 * 0.60 = 3 + 3 = 6
    "openai/usage_then_error_stream.json": 6,
    # 12 * 0.55 + 3 * 2.19 = 6.60 + 6.57 = 13.17 → 13
    "deepseek/insufficient_system_resource.json": 13,
}


@pytest.mark.parametrize("name", sorted(USAGE_BEFORE_ERROR))
def test_usage_before_an_error_is_exposure_never_zero(name: str) -> None:
    result = reconcile(name)
    assert (result.outcome, result.reason) == (Outcome.UNSETTLED, Reason.ERROR_FINISH)
    assert result.exposure_micros == USAGE_BEFORE_ERROR[name]
    assert "usage_before_error" in result.anomalies
