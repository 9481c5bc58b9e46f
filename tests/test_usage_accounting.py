"""The usage reader accounts for every field it sees: read and priced, free (``FREE_FIELDS``), or
unknown, and an unknown count is never dropped (``Verdict.UNPRICED_COMPONENT``, naming it).

The blocks here are written by hand around the shapes of tests/fixtures/providers; what each test
expects is the arithmetic or the field names written next to it, not the reader's output.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.core.usage import (
    FREE_FIELDS,
    MAX_FIELDS_SHOWN,
    PRICED_TEXT,
    Shape,
    Verdict,
    against_output,
    read_usage,
    unpriced_field_names,
)

OPENAI = {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150}
LEAD = "usage fields without a price: "
TAIL = "; exposure priced without them (a lower bound)"


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        # xAI Live Search sources, billed per source
        ({"num_sources_used": 3}, "num_sources_used=3"),
        # a modality inside a details object
        ({"prompt_tokens_details": {"cached_tokens": 0, "video_tokens": 7}},
         "prompt_tokens_details.video_tokens=7"),
        # Mistral's audio seconds: a number, not a token count, still a count the book lacks
        ({"prompt_audio_seconds": 2.5}, "prompt_audio_seconds=2.5"),
        # a nested object: each non-zero leaf, the zero ones left out
        # (web searches are read, web fetches free: tests/prices/test_price_dimensions.py)
        ({"server_tool_use": {"code_execution_requests": 2, "container_seconds": 0}},
         "server_tool_use.code_execution_requests=2"),
        # inside a list
        ({"per_hop": [0, {"searches": 4}]}, "per_hop[].searches=4"),
        # a key with characters the detail cannot hold
        ({"odd, key=1; and": 5}, "odd__key_1__and=5"),
        # a key holding a dot is one key, not the read field it spells
        ({"prompt_tokens_details.cached_tokens": 5}, "prompt_tokens_details_cached_tokens=5"),
    ],
)  # fmt: skip
def test_a_count_in_an_unknown_field_is_named_never_dropped(
    extra: dict[str, Any], named: str
) -> None:
    reading = read_usage({**OPENAI, **extra})
    assert reading.verdict is Verdict.UNPRICED_COMPONENT
    assert reading.problem == f"{LEAD}{named}{TAIL}"
    # The parts that were read, priced as they are: the exposure's lower bound.
    usage = reading.usage
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (100, 50)
    assert reading.shape is Shape.OPENAI


def test_zero_null_text_and_flags_in_unknown_fields_are_not_counts() -> None:
    block = {
        **OPENAI,
        "zero": 0,
        "none": None,
        "search_context_size": "low",  # Perplexity: a string
        "flag": True,  # a boolean is no count, though Python's bool is an int
        "nested": {"a": 0.0, "b": False, "c": [], "d": {}},
        "citation_tokens": 9,
    }
    reading = read_usage(block)
    assert reading.verdict is Verdict.UNPRICED_COMPONENT
    assert unpriced_field_names(reading.problem) == ("citation_tokens",)
    del block["citation_tokens"]
    assert read_usage(block).verdict is Verdict.BILLABLE


def test_every_free_field_is_free_for_a_reason() -> None:
    """Each field of the one list set to a non-zero value: still billed, at the counts read."""
    block: dict[str, Any] = {**OPENAI}
    for path in FREE_FIELDS:
        if path == "total_tokens":
            continue
        *parents, leaf = path.split(".")
        node = block
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = 0.5 if path.endswith("_time") or path == "cost" else 1
    block["is_byok"] = True
    reading = read_usage(block)
    assert reading.verdict is Verdict.BILLABLE, reading.problem
    usage = reading.usage
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (100, 50)
    assert all(len(reason) > 20 for reason in FREE_FIELDS.values())


def test_groq_timings_are_free_and_its_unknown_fields_are_named_where_they_are() -> None:
    groq = {"prompt_tokens": 23, "completion_tokens": 19, "total_tokens": 42, "queue_time": 0.07}
    assert read_usage(None, groq).verdict is Verdict.BILLABLE
    reading = read_usage(None, {**groq, "search_calls": 1})
    assert reading.problem == f"{LEAD}x_groq.usage.search_calls=1{TAIL}"


def test_an_inconsistent_block_names_its_unknown_counts_too() -> None:
    reading = read_usage({**OPENAI, "total_tokens": 160, "citation_tokens": 9})
    assert reading.verdict is Verdict.INCONSISTENT
    assert reading.problem == (
        f"total_tokens 160 != prompt 100 + completion 50; also {LEAD}citation_tokens=9{TAIL}"
    )


def test_past_the_fields_shown_the_rest_are_counted() -> None:
    extra = {f"f{i}": i + 1 for i in range(MAX_FIELDS_SHOWN + 3)}
    reading = read_usage({**OPENAI, **extra})
    assert reading.problem is not None and reading.problem.endswith(f" and 3 more{TAIL}")
    assert unpriced_field_names(reading.problem) == tuple(extra)[:MAX_FIELDS_SHOWN]
    assert len(reading.unpriced) == MAX_FIELDS_SHOWN + 3


def test_a_block_deeper_than_any_json_is_walked_without_recursion() -> None:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(5_000):
        node["k"] = {}
        node = node["k"]
    node["v"] = 3
    reading = read_usage({**OPENAI, "deep": deep, "huge": 10**5000})
    assert reading.verdict is Verdict.UNPRICED_COMPONENT
    (deep_name, huge_name) = unpriced_field_names(reading.problem)
    assert deep_name.startswith("deep.k.k.") and deep_name.endswith("...")
    assert len(deep_name) < 130 and huge_name == "huge"


def test_a_zero_completion_with_output_is_implausible_even_with_an_unpriced_field() -> None:
    reading = read_usage({"prompt_tokens": 10, "completion_tokens": 0, "citation_tokens": 2})
    assert reading.verdict is Verdict.UNPRICED_COMPONENT
    assert against_output(reading, produced_output=True).verdict is Verdict.IMPLAUSIBLE
    assert against_output(reading, produced_output=False) is reading


RESPONSES_OR_ANTHROPIC = [
    # OpenAI's Responses API (its reference: the total is input + output): cache reads inside
    # input, reasoning inside output
    ({"input_tokens": 100, "input_tokens_details": {"cached_tokens": 40}, "output_tokens": 30,
      "output_tokens_details": {"reasoning_tokens": 20}, "total_tokens": 130},
     Shape.OPENAI_RESPONSES, (100, 40, 30, 20)),
    # no details, but a total equal to input + output: Anthropic's block has no total
    ({"input_tokens": 100, "output_tokens": 30, "total_tokens": 130},
     Shape.OPENAI_RESPONSES, (100, 0, 30, 0)),
    # Anthropic's: input_tokens is the uncached part, the cache parts beside it
    ({"input_tokens": 10, "cache_read_input_tokens": 90, "output_tokens": 30},
     Shape.ANTHROPIC, (100, 90, 30, 0)),
    # neither says otherwise: Anthropic's rule, the same two counts
    ({"input_tokens": 100, "output_tokens": 30}, Shape.ANTHROPIC, (100, 0, 30, 0)),
]  # fmt: skip


def test_responses_usage_is_told_from_anthropics_by_its_fields() -> None:
    for block, shape, counts in RESPONSES_OR_ANTHROPIC:
        reading = read_usage(block)
        assert (reading.verdict, reading.shape) == (Verdict.BILLABLE, shape), block
        usage = reading.usage
        assert usage is not None
        got = (usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens)
        assert (*got, usage.reasoning_tokens) == counts, block


@pytest.mark.parametrize(
    ("block", "verdict", "problem"),
    [
        ({"input_tokens": 100, "input_tokens_details": {"cached_tokens": 40},
          "cache_read_input_tokens": 40, "output_tokens": 30}, Verdict.IMPLAUSIBLE,
         "usage mixes the Responses API's *_tokens_details with Anthropic's cache fields"),
        ({"input_tokens": 100, "output_tokens": 30, "output_tokens_details": {"reasoning_tokens": 5},
          "total_tokens": 140}, Verdict.INCONSISTENT, "total_tokens 140 != input 100 + output 30"),
        ({"input_tokens": 10, "input_tokens_details": {"cached_tokens": 11}, "output_tokens": 3},
         Verdict.IMPLAUSIBLE, "cached_tokens (11) exceed input_tokens (10)"),
        ({"input_tokens": 10, "output_tokens": 3, "output_tokens_details": {"reasoning_tokens": 4}},
         Verdict.IMPLAUSIBLE, "reasoning_tokens (4) exceed output_tokens (3)"),
    ],
)  # fmt: skip
def test_a_responses_block_that_cannot_be_billed(
    block: dict[str, Any], verdict: Verdict, problem: str
) -> None:
    reading = read_usage(block)
    assert (reading.verdict, reading.problem) == (verdict, problem)


def test_an_inconsistent_responses_total_is_exposed_at_the_larger_reading() -> None:
    block = {"input_tokens": 100, "output_tokens": 30, "total_tokens": 130 + 70}
    block["output_tokens_details"] = {"reasoning_tokens": 0}
    larger = read_usage(block).larger
    # the excess read as output, the dearer kind: 100 + 100
    assert larger is not None and (larger.prompt_tokens, larger.completion_tokens) == (100, 100)


def test_litellms_copies_of_the_cache_counts_are_one_count() -> None:
    """LiteLLM writes the cache read as prompt_tokens_details.cached_tokens and
    cache_read_input_tokens, the write as cache_write_tokens, cache_creation_tokens and
    cache_creation_input_tokens (tests/fixtures/providers/litellm)."""
    block = {
        "prompt_tokens": 2006,
        "completion_tokens": 300,
        "prompt_tokens_details": {"cached_tokens": 0, "cache_creation_tokens": 556},
        "cache_read_input_tokens": 1000,
        "cache_creation_input_tokens": 556,
    }
    usage = read_usage(block).usage
    assert usage is not None and (usage.cached_tokens, usage.cache_write_tokens) == (1000, 556)
    block["prompt_tokens_details"]["cached_tokens"] = 900
    reading = read_usage(block)
    assert (reading.verdict, reading.problem) == (
        Verdict.IMPLAUSIBLE,
        "cache reads differ between usage.prompt_tokens_details.cached_tokens,"
        " usage.cache_read_input_tokens (900, 1000)",
    )


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)


def _nonzero_leaves(value: object) -> int:
    if isinstance(value, dict):
        return sum(_nonzero_leaves(item) for item in value.values())
    if isinstance(value, list):
        return sum(_nonzero_leaves(item) for item in value)
    return int(type(value) in (int, float) and value != 0)


@given(extra=st.dictionaries(st.text(min_size=1, max_size=8), JSON, max_size=4))
@settings(max_examples=300, deadline=None)
def test_any_extra_field_is_accounted_and_reading_never_raises(extra: dict[str, Any]) -> None:
    """Unknown keys (the known ones left out) holding any JSON: billable exactly when no number
    in them is non-zero, else every such number is named, and the names read back."""
    extra = {key: value for key, value in extra.items() if key not in OPENAI}
    extra = {key: value for key, value in extra.items() if key.split(".")[0] not in FREE_FIELDS}
    # fields whose text changes the price are read by their own rules (tested apart)
    extra = {
        k: v for k, v in extra.items()
        if k not in PRICED_TEXT and k not in ("service_tier", "inference_geo")
    }  # fmt: skip
    extra = {
        k: v for k, v in extra.items() if not k.startswith(("prompt_", "completion_", "cache"))
    }
    reading = read_usage({**OPENAI, **extra})
    counts = _nonzero_leaves(extra)
    if counts == 0:
        assert reading.verdict is Verdict.BILLABLE
        return
    assert reading.verdict is Verdict.UNPRICED_COMPONENT
    assert 1 <= len(reading.unpriced) <= counts  # leaves sharing a name are named once
    names = tuple(name for name, _ in reading.unpriced)
    assert unpriced_field_names(reading.problem) == names[:MAX_FIELDS_SHOWN]


def test_an_image_part_of_the_prompt_is_billed_with_the_prompt() -> None:
    """xAI (and LiteLLM's Usage) state the image part of ``prompt_tokens``: billed at the prompt
    token price with the rest (docs.x.ai/developers/rate-limits), so a vision call settles
    instead of being held as an unpriced component."""
    from worker.core.usage import Verdict, read_usage

    block = {**OPENAI, "prompt_tokens_details": {"text_tokens": 40, "image_tokens": 60}}
    reading = read_usage(block, provider="xai", model="grok-4")
    assert reading.verdict is Verdict.BILLABLE
    assert reading.usage is not None and reading.usage.prompt_tokens == 100


def test_gemini_reasoning_without_a_total_is_never_guessed_inside_or_apart() -> None:
    """Gemini counts thinking beside the completion, stated by the total (prompt + completion +
    thoughts). Without a total, reasoning that fits inside the completion could be either: the two
    readings differ by the reasoning's price, so the call is ``inconsistent_usage`` exposed at the
    larger; reasoning larger than the completion can only be apart, and settles so."""
    block = {"prompt_tokens": 10, "completion_tokens": 20,
             "completion_tokens_details": {"reasoning_tokens": 15}}  # fmt: skip
    reading = read_usage(block, provider="gemini")
    assert reading.verdict is Verdict.INCONSISTENT
    assert reading.larger is not None and reading.larger.completion_tokens == 35
    apart = {**block, "completion_tokens_details": {"reasoning_tokens": 25}}
    settled = read_usage(apart, provider="gemini")
    assert settled.verdict is Verdict.BILLABLE and settled.usage.completion_tokens == 45
    stated = {**block, "total_tokens": 45}  # the total says apart
    assert read_usage(stated, provider="gemini").usage.completion_tokens == 35
