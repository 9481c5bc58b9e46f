"""Usage blocks: every shape a provider reports token counts in, read into one canonical ``Usage``.

Pure; no IO. ``read_usage`` is the one place a usage block is read (the assembler only keeps the raw
blocks). It decides which rule applies from the block's shape and the provider, never by guessing:

* **openai** — ``prompt_tokens``, ``completion_tokens``, ``total_tokens`` and the ``*_details``
  objects (cache reads, audio in; reasoning, audio out, predicted-output tokens). OpenAI, Azure,
  Mistral, Together, Fireworks, vLLM (a cumulative block on every chunk: the last one is read),
  Ollama, OpenRouter (``prompt_tokens_details.cache_write_tokens``, ``cost`` in USD) and Anthropic's
  OpenAI-compatible endpoint all send it. Every detail is a part of its parent count.
* **deepseek** — the openai shape plus ``prompt_cache_hit_tokens`` / ``prompt_cache_miss_tokens``
  (hit + miss = prompt; hit is the cache read).
* **groq** — the openai fields inside ``x_groq.usage`` on the final chunk, with or without a
  top-level ``usage`` (both present: they must agree).
* **anthropic** — ``input_tokens`` (the uncached part only), ``cache_creation_input_tokens``,
  ``cache_read_input_tokens``, ``output_tokens``, as gateways pass Anthropic's block through.
* **openai_responses** — OpenAI's Responses API block inside a chat completion: ``input_tokens``
  (cache reads included: ``input_tokens_details.cached_tokens`` is a part of it),
  ``output_tokens`` (``output_tokens_details.reasoning_tokens`` is a part of it), ``total_tokens``
  = input + output. Told from Anthropic's block by its fields: a ``*_details`` object, or a
  ``total_tokens`` equal to input + output; Anthropic's has ``cache_*_input_tokens`` and no total.
* **openai_images** — OpenAI's image generation (``…/images/generations``), as its reader
  (``worker.core.readers.images``) hands it on: the answer's ``usage`` when it came (GPT Image
  models: ``input_tokens``, ``input_tokens_details.text_tokens`` / ``image_tokens``,
  ``output_tokens``, ``output_tokens_details.image_tokens`` / ``text_tokens``, ``total_tokens``),
  and ``generated_images``: the images billed per image (an answer without usage: DALL·E), with
  ``image_size`` / ``image_quality`` where the answer states them. Image tokens of the input are
  ``image_prompt_tokens``; the output's image tokens are ``image_completion_tokens`` — every
  output token when the block states no ``output_tokens_details`` (the API reference:
  ``output_tokens`` is "the number of image tokens in the output image"). Told by its
  ``generated_images`` key, which only the images reader writes.
* **reasoning_apart** — the openai fields from a provider that counts reasoning *outside*
  ``completion_tokens`` (Gemini's and xAI's OpenAI-compatible endpoints): ``total_tokens`` =
  prompt + completion + reasoning, the reasoning stated in ``reasoning_tokens`` (xAI) or only in
  the total (Gemini). Normalised into the canonical convention: reasoning is part of completion.

A block is *implausible* (never billed) when a count is missing, negative, fractional, not a number,
a part larger than its whole, or the counts pass the call's bound (the model's context window times
its choices); and when it counts 0 completion tokens (reasoning included) for a call that produced
output (``against_output``): LiteLLM answers a usage-less non-streamed upstream with an all-zero
block, which would settle a real completion at the prompt's price alone. A zero completion with no
output (a ``length`` finish at ``max_tokens: 0``, an empty ``stop``) stays billable. It is *inconsistent* when ``total_tokens`` disagrees with its parts and no rule above
explains it; the larger reading is kept so the exposure can be priced at it.

**Every field is accounted for.** A field of a usage block (and of its ``*_details`` and other nested
objects) is either *read* into ``Usage`` and priced (``_*_READ``, per shape), *free* (``FREE_FIELDS``:
the one list of fields that cost nothing of their own, each with its reason), or *unknown*. An
unknown field holding a non-zero number (itself, or anywhere inside it) is a component the book
cannot price: the reading is ``UNPRICED_COMPONENT``, naming each such field and its value; the call
is unsettled ``unpriced_component`` and its exposure priced at the parts that were read, a lower
bound. An unknown field that is null, zero, a string or a boolean is not a count, and is ignored.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Any

from worker.core.money import Micros, round_half_up
from worker.core.result import Usage

# The usage record's token columns are INTEGER: no count beyond this is ever billed.
TOKEN_COLUMN_MAX = 2**31 - 1
# The bound per choice when the price book does not know the model's context window.
DEFAULT_TOKENS_PER_CHOICE = 10**8
# The provider's own cost is kept only within this (one million USD): anything larger is not a cost.
MAX_PROVIDER_COST_MICROS = 10**12
XAI_TICKS_PER_MICRO = 10_000  # xAI: 1 USD = 10^10 ticks (docs.x.ai, "Cost Tracking")
# Where the gateway routed the call (request ``provider``), as the usage rules know it; LiteLLM's
# provider names are accepted too.
_FAMILIES = {
    "gemini": "gemini",
    "google": "gemini",
    "vertex_ai": "gemini",
    "xai": "xai",
    "x-ai": "xai",
    "grok": "xai",
    "perplexity": "perplexity",
}
# Without a provider, the vendor's own bare model names say where reasoning is counted.
_MODEL_PREFIXES = (("gemini-", "gemini"), ("grok-", "xai"), ("sonar", "perplexity"))

# The fields each reader reads into ``Usage`` (dotted paths inside the block). A field read as a
# count is priced: the price book has a price for every kind ``Usage`` holds, or the call is
# unpriced. The openai reader's set covers its variants (deepseek, groq, reasoning_apart).
_OPENAI_READ = frozenset({
    "prompt_tokens", "completion_tokens",
    "prompt_tokens_details.cached_tokens", "cache_read_input_tokens",  # the cache read (LiteLLM: both)
    "prompt_tokens_details.cache_write_tokens", "prompt_tokens_details.cache_creation_tokens",
    "cache_creation_input_tokens",  # the cache write, by each name it comes under (LiteLLM: all)
    # LiteLLM's copy of Anthropic's 1-hour cache writes, a part of the cache write
    "prompt_tokens_details.cache_creation_token_details.ephemeral_1h_input_tokens",
    "prompt_tokens_details.audio_tokens", "prompt_tokens_details.image_tokens",
    "completion_tokens_details.reasoning_tokens", "completion_tokens_details.audio_tokens",
    "prompt_cache_hit_tokens", "prompt_cache_miss_tokens",  # deepseek: the read and the rest
    "server_tool_use.web_search_requests",  # LiteLLM's copy of Anthropic's search count
})  # fmt: skip
_ANTHROPIC_READ = frozenset({
    "input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens",
    "cache_creation.ephemeral_1h_input_tokens", "server_tool_use.web_search_requests",
})  # fmt: skip
# Perplexity's own counts beside the openai fields (its chat completions reference,
# docs.perplexity.ai/api-reference/chat-completions-post; Sonar Deep Research bills each, "Token
# Pricing", docs.perplexity.ai/getting-started/pricing): citation tokens and reasoning tokens are
# counted apart from prompt and completion (``total_tokens`` = prompt + completion), the search
# queries are a count of searches.
_PERPLEXITY_READ = _OPENAI_READ | frozenset({
    "citation_tokens", "reasoning_tokens", "num_search_queries",
})  # fmt: skip
_IMAGES_READ = frozenset({
    "input_tokens", "output_tokens", "generated_images",
    "input_tokens_details.image_tokens", "output_tokens_details.image_tokens",
})  # fmt: skip
_RESPONSES_READ = frozenset({
    "input_tokens", "output_tokens",
    "input_tokens_details.cached_tokens", "output_tokens_details.reasoning_tokens",
})  # fmt: skip

# The one list of usage fields that are neither read into ``Usage`` nor a price the book lacks: each
# costs nothing of its own, for the reason given. A field in no list and not read is unknown, and a
# count in it makes the call unsettled ``unpriced_component`` (see the module's docstring).
FREE_FIELDS: dict[str, str] = {
    "total_tokens": "the sum of the counts read; checked against them where the shape defines it",
    "cost": "the provider's own charge (OpenRouter: USD; Perplexity: an object of costs and their "
    "total_cost, USD), read apart for the cross-check: a cost and not a count",
    "cost_details": "OpenRouter's breakdown of its own charge (upstream_inference_cost with a "
    "bring-your-own key, read apart): costs, not counts",
    "is_byok": "OpenRouter: whether the caller's own key paid the upstream (a flag)",
    "cost_in_usd_ticks": "xAI's own charge, read apart for the cross-check",
    "queue_time": "Groq: seconds the request queued, not billed",
    "prompt_time": "Groq: seconds spent on the prompt, not billed",
    "completion_time": "Groq: seconds spent on the completion, not billed",
    "total_time": "Groq: the sum of the timings, not billed",
    "prompt_tokens_details.text_tokens": "the text part of prompt_tokens (xAI, LiteLLM), priced "
    "with the rest of the prompt",
    "completion_tokens_details.text_tokens": "the text part of completion_tokens (LiteLLM), "
    "priced with the rest of the completion",
    "input_tokens_details.text_tokens": "the text part of input_tokens (LiteLLM, answering in the "
    "Responses API's shape), priced with the rest of the input",
    "output_tokens_details.text_tokens": "the text part of output_tokens (LiteLLM, answering in "
    "the Responses API's shape from a chat completion's usage), priced with the rest of the output",
    "completion_tokens_details.accepted_prediction_tokens": "predicted-output tokens that appear "
    "in the completion: a part of completion_tokens, billed as completion (OpenAI)",
    "completion_tokens_details.rejected_prediction_tokens": "predicted-output tokens left out of "
    "the completion, still counted in completion_tokens and billed as completion (OpenAI)",
    "cache_creation.ephemeral_5m_input_tokens": "Anthropic's 5-minute cache writes: the part of "
    "cache_creation_input_tokens that is not 1-hour writes (read), at the cache write price; "
    "checked: with the 1-hour part, it adds up to the cache writes",
    "prompt_tokens_details.cache_creation_token_details.ephemeral_5m_input_tokens": "LiteLLM's "
    "copy of Anthropic's 5-minute cache writes, a part of the cache write read",
    "server_tool_use.web_fetch_requests": "Anthropic's web fetch tool: 'no additional charges "
    "beyond standard token costs' (docs.anthropic.com, web fetch tool, Usage and pricing)",
    "search_context_size": "the search context size of the call's searches (Perplexity): a "
    "name, read with the search count, not a count",
}
# Show at most this many unknown fields in a reading's problem (the rest are counted).
# Usage fields whose *text* changes the price: each value listed costs nothing beyond the book's
# rows, and any other value is a component the book cannot price (``unpriced_component``, naming
# the field and its value). ``service_tier`` and ``inference_geo`` are read and priced instead.
PRICED_TEXT: dict[str, frozenset[str]] = {
    # Anthropic's fast mode ("speed": "fast", premium rates, docs.anthropic.com "Fast mode");
    # "standard" is the ordinary speed, at the row's prices.
    "speed": frozenset({"standard"}),
}
_NAME_TEXT = re.compile(r"[a-z0-9_-]{1,32}")
MAX_FIELDS_SHOWN = 8
MAX_NAME = 120  # a field's dotted name is cut here
UNPRICED_LEAD = "usage fields without a price: "
UNPRICED_TAIL = "; exposure priced without them (a lower bound)"
_FIELD_NAME = re.compile(r"[^A-Za-z0-9_-]")
# The lists above as key paths: a key holding a dot is one key, never two levels.
_PATHS = {
    name: frozenset(tuple(path.split(".")) for path in paths)
    for name, paths in (
        ("openai", _OPENAI_READ),
        ("perplexity", _PERPLEXITY_READ),
        ("anthropic", _ANTHROPIC_READ),
        ("responses", _RESPONSES_READ),
        ("images", _IMAGES_READ),
        ("free", FREE_FIELDS),
    )
}
_DEEPEST = max(len(path) for paths in _PATHS.values() for path in paths)


class Shape(StrEnum):
    OPENAI = "openai"
    DEEPSEEK = "deepseek"
    GROQ = "groq"
    ANTHROPIC = "anthropic"
    REASONING_APART = "reasoning_apart"
    OPENAI_RESPONSES = "openai_responses"
    OPENAI_IMAGES = "openai_images"


class Verdict(StrEnum):
    NONE = "none"  # no usage block came
    BILLABLE = "billable"
    IMPLAUSIBLE = "implausible"
    INCONSISTENT = "inconsistent"
    # read and within bounds, but a field the book cannot price holds a count (``unpriced``)
    UNPRICED_COMPONENT = "unpriced_component"


@dataclass(frozen=True, slots=True)
class Reading:
    """What a call's usage blocks say. ``usage`` is set when billable, and for an unpriced
    component the priced parts (a lower bound); ``larger`` is the larger of two disagreeing
    readings (inconsistent only); ``problem`` says why a block cannot be billed; ``unpriced``
    names the unknown fields holding a count, with their values as shown."""

    verdict: Verdict
    usage: Usage | None = None
    shape: Shape | None = None
    problem: str | None = None
    larger: Usage | None = None
    provider_cost_micros: Micros | None = None
    unpriced: tuple[tuple[str, str], ...] = ()
    # whether the block states a web search count (``server_tool_use.web_search_requests``, or
    # Perplexity's ``num_search_queries``), even 0
    searches_stated: bool = False
    # the service tier the usage block names (Anthropic's ``usage.service_tier``), as sent
    service_tier: str | None = None

    @property
    def came(self) -> bool:
        return self.verdict is not Verdict.NONE


NO_USAGE = Reading(Verdict.NONE)


class _Problem(Exception):
    """A block that cannot be billed; the message is the sentence ``billing show`` prints."""


class _Disagreement(Exception):
    def __init__(self, problem: str, parts: Usage, larger: Usage) -> None:
        super().__init__(problem)
        self.parts = parts
        self.larger = larger


def usage_family(provider: str | None, model: str | None) -> str | None:
    """The usage rules' name for where a call ran: from the request's ``provider`` when given,
    else from the vendor's bare model name; None for everything that follows OpenAI's counting."""
    if provider:
        return _FAMILIES.get(provider.strip().lower())
    if model:
        for prefix, family in _MODEL_PREFIXES:
            if model.startswith(prefix):
                return family
    return None


def bound_for(context_window: int | None, choices: int) -> int:
    """The most tokens a call can have consumed and produced: its context window (or
    ``DEFAULT_TOKENS_PER_CHOICE``) per choice, never more than a token column holds."""
    per_choice = context_window if context_window and context_window > 0 else None
    per_choice = per_choice or DEFAULT_TOKENS_PER_CHOICE
    return min(per_choice * max(choices, 1), TOKEN_COLUMN_MAX)


def read_usage(
    block: object,
    groq_block: object = None,
    *,
    provider: str | None = None,
    model: str | None = None,
    bound: int = TOKEN_COLUMN_MAX,
    same_tier: Callable[[str], bool] | None = None,
) -> Reading:
    """Read a call's usage: ``block`` is its last top-level ``usage`` object, ``groq_block`` its last
    ``x_groq.usage``. Never raises.

    ``same_tier`` says whether a tier named inside the usage (``usage.service_tier``) is the one
    the response names outside it (by the book's names: ``standard`` is ``default``); one that is
    not is a disagreement (inconsistent): the provider states two tiers for one call, which price
    it differently."""
    if block is None and groq_block is None:
        return NO_USAGE
    family = usage_family(provider, model)
    blocks = [
        (b, prefix) for b, prefix in ((block, ""), (groq_block, "x_groq.usage.")) if b is not None
    ]
    try:
        if block is None:
            usage, shape = _read_block(groq_block, family, "x_groq.usage")
            shape = Shape.GROQ
        else:
            usage, shape = _read_block(block, family, "usage")
            if groq_block is not None:
                groq, _ = _read_block(groq_block, family, "x_groq.usage")
                if (groq.prompt_tokens, groq.completion_tokens) != (
                    usage.prompt_tokens,
                    usage.completion_tokens,
                ):
                    raise _Disagreement(
                        f"usage ({usage.prompt_tokens} + {usage.completion_tokens}) and x_groq.usage"
                        f" ({groq.prompt_tokens} + {groq.completion_tokens}) disagree",
                        usage,
                        max(usage, groq, key=lambda u: (u.total_tokens, u.completion_tokens)),
                    )
                shape = Shape.GROQ
        _check_bound(usage, bound)
        tier = usage_tier(block)
        if tier is not None and same_tier is not None and not same_tier(tier):
            raise _Disagreement(
                f"usage.service_tier {tier!r} is not the response's service_tier", usage, usage
            )
    except _Problem as problem:
        return Reading(Verdict.IMPLAUSIBLE, problem=str(problem))
    except _Disagreement as disagreement:
        try:
            _check_bound(disagreement.larger, bound)
        except _Problem as problem:
            return Reading(Verdict.IMPLAUSIBLE, problem=str(problem))
        unpriced = _unaccounted(blocks, family)
        also = f"; also {describe_unpriced(unpriced)}" if unpriced else ""
        return Reading(
            Verdict.INCONSISTENT,
            problem=str(disagreement) + also,
            larger=disagreement.larger,
            provider_cost_micros=_provider_cost(block),
            unpriced=unpriced,
        )
    cost = _provider_cost(block if block is not None else groq_block)
    unpriced = _unaccounted(blocks, family)
    if unpriced:
        return Reading(
            Verdict.UNPRICED_COMPONENT,
            usage=usage,
            shape=shape,
            problem=describe_unpriced(unpriced),
            provider_cost_micros=cost,
            unpriced=unpriced,
            searches_stated=_searches_stated(block, family),
            service_tier=usage_tier(block),
        )
    return Reading(
        Verdict.BILLABLE,
        usage=usage,
        shape=shape,
        provider_cost_micros=cost,
        searches_stated=_searches_stated(block, family),
        service_tier=usage_tier(block),
    )


def usage_tier(block: object) -> str | None:
    """The service tier a usage block names (``usage.service_tier``: Anthropic's ``standard``,
    ``priority``, ``batch``; OpenAI-style names too), None when it names none; a value that is not
    a tier name (a number, an object, free text) is refused by the reader (``_read_text``)."""
    if type(block) is not dict:
        return None
    tier = block.get("service_tier")
    return tier.strip().lower() if isinstance(tier, str) and tier.strip() else None


def _searches_stated(block: object, family: str | None = None) -> bool:
    if type(block) is not dict:
        return False
    if family == "perplexity" and block.get("num_search_queries") is not None:
        return True
    tools = block.get("server_tool_use")
    return type(tools) is dict and tools.get("web_search_requests") is not None


def describe_unpriced(fields: tuple[tuple[str, str], ...]) -> str:
    """The sentence naming unknown fields and their values (an anomaly's detail):
    ``usage fields without a price: a.b=3, c=1; exposure priced without them (a lower bound)``.
    Names hold only letters, digits, ``_``, ``-``, ``.`` and ``[]``, so ``unpriced_field_names``
    reads them back."""
    shown = ", ".join(f"{name}={value}" for name, value in fields[:MAX_FIELDS_SHOWN])
    rest = len(fields) - MAX_FIELDS_SHOWN
    more = f" and {rest} more" if rest > 0 else ""
    return f"{UNPRICED_LEAD}{shown}{more}{UNPRICED_TAIL}"


def unpriced_field_names(detail: str | None) -> tuple[str, ...]:
    """The field names ``describe_unpriced`` wrote into ``detail``, in order; () for any other
    text (the fields past ``MAX_FIELDS_SHOWN`` are not named, so not read back)."""
    if not detail or not detail.startswith(UNPRICED_LEAD):
        return ()
    listed = detail[len(UNPRICED_LEAD) :].split(";", 1)[0].split(" and ", 1)[0]
    return tuple(item.split("=", 1)[0] for item in listed.split(", ") if "=" in item)


def against_output(reading: Reading, produced_output: bool) -> Reading:
    """``reading`` checked against what the call produced: a billable block (or one with an
    unpriced component) of 0 completion tokens (after normalisation, so reasoning counted apart is
    included) for a call whose choices hold output is implausible, never settled at 0; any other
    reading is returned as it is."""
    usage = reading.usage
    priced = reading.verdict in (Verdict.BILLABLE, Verdict.UNPRICED_COMPONENT)
    if not priced or usage is None or not produced_output:
        return reading
    if usage.completion_tokens > 0:
        return reading
    return Reading(
        Verdict.IMPLAUSIBLE,
        problem="0 completion tokens reported for a completion that has output",
        provider_cost_micros=reading.provider_cost_micros,
    )


def _check_bound(usage: Usage, bound: int) -> None:
    if usage.total_tokens > bound:
        raise _Problem(
            f"{usage.prompt_tokens} prompt + {usage.completion_tokens} completion tokens exceed"
            f" what the call can hold ({bound})"
        )


def _count(block: dict[str, Any], key: str, where: str, *, required: bool = False) -> int:
    """A token count: a non-negative integer (an integral JSON number such as ``12.0`` too)."""
    value = block.get(key)
    if value is None:
        if required:
            raise _Problem(f"{where}.{key} is missing")
        return 0
    if type(value) is float and value.is_integer() and abs(value) < 2**53:
        value = int(value)
    if type(value) is not int:
        raise _Problem(f"{where}.{key} is not an integer count (got {value!r:.40})")
    if value < 0:
        raise _Problem(f"{where}.{key} is negative ({value})")
    if value > TOKEN_COLUMN_MAX:
        raise _Problem(f"{where}.{key} is beyond any call ({value})")
    return value


def _details(block: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    details = block.get(key)
    if details is None:
        return {}
    if type(details) is not dict:
        raise _Problem(f"{where}.{key} is not an object")
    return details


def _part(value: int, whole: int, name: str, whole_name: str) -> int:
    if value > whole:
        raise _Problem(f"{name} ({value}) exceed {whole_name} ({whole})")
    return value


def _agreed(copies: tuple[tuple[dict[str, Any], str, str], ...], name: str) -> int:
    """One count sent under several names (LiteLLM writes the cache read and write under each of
    the names it knows): the non-zero value they agree on, or 0; two different non-zero values are
    not one count."""
    values = {_count(details, key, where) for details, key, where in copies} - {0}
    if len(values) > 1:
        names = ", ".join(f"{where}.{key}" for _, key, where in copies)
        raise _Problem(f"{name} differ between {names} ({', '.join(map(str, sorted(values)))})")
    return values.pop() if values else 0


def _read_block(block: object, family: str | None, where: str) -> tuple[Usage, Shape]:
    if type(block) is not dict:
        raise _Problem(f"{where} is not an object")
    text = _read_text(block, where)
    if IMAGES_KEY in block:
        return _read_images(block, where), Shape.OPENAI_IMAGES
    if "prompt_tokens" not in block and ("input_tokens" in block or "output_tokens" in block):
        if _responses_shaped(block, where):
            return replace(_read_responses(block, where), **text), Shape.OPENAI_RESPONSES
        return replace(_read_anthropic(block, where), **text), Shape.ANTHROPIC
    prompt = _count(block, "prompt_tokens", where, required=True)
    completion = _count(block, "completion_tokens", where, required=True)
    total = block.get("total_tokens")
    total = None if total is None else _count(block, "total_tokens", where)
    prompt_details = _details(block, "prompt_tokens_details", where)
    completion_details = _details(block, "completion_tokens_details", where)
    pwhere, cwhere = where + ".prompt_tokens_details", where + ".completion_tokens_details"
    cached = _agreed(
        ((prompt_details, "cached_tokens", pwhere), (block, "cache_read_input_tokens", where)),
        "cache reads",
    )
    # OpenRouter's and LiteLLM's names, and Anthropic's beside OpenAI's fields (LiteLLM).
    cache_write = _agreed(
        (
            (prompt_details, "cache_write_tokens", pwhere),
            (prompt_details, "cache_creation_tokens", pwhere),
            (block, "cache_creation_input_tokens", where),
        ),
        "cache writes",
    )
    audio_in = _part(_count(prompt_details, "audio_tokens", pwhere), prompt, "audio", "prompt")
    images = _part(_count(prompt_details, "image_tokens", pwhere), prompt, "images", "prompt")
    lifetimes = _details(prompt_details, "cache_creation_token_details", pwhere)
    hour = _count(lifetimes, "ephemeral_1h_input_tokens", pwhere + ".cache_creation_token_details")
    try:
        _lifetimes_add_up(
            lifetimes, cache_write, pwhere + ".cache_creation_token_details", "cache writes"
        )
    except _Disagreement as disagreement:  # the writes are a part of the prompt: widen it
        writes = disagreement.larger.cache_write_tokens
        raise _Disagreement(
            str(disagreement),
            Usage(prompt, completion, cached, 0, cache_write, cache_write_1h_tokens=hour),
            Usage(
                prompt + writes - cache_write,
                completion,
                cached,
                0,
                writes,
                cache_write_1h_tokens=hour,
            ),
        ) from None
    shape = Shape.OPENAI
    if "prompt_cache_hit_tokens" in block or "prompt_cache_miss_tokens" in block:
        shape = Shape.DEEPSEEK
        hit = _count(block, "prompt_cache_hit_tokens", where)
        miss = _count(block, "prompt_cache_miss_tokens", where)
        if "prompt_cache_miss_tokens" in block and hit + miss != prompt:
            parts = Usage(hit + miss, completion, hit)
            raise _Disagreement(
                f"cache hit {hit} + miss {miss} != prompt_tokens {prompt}",
                parts,
                max(parts, Usage(prompt, completion, min(hit, prompt)), key=_size),
            )
        if cached and cached != hit:
            raise _Problem(f"cached_tokens {cached} and prompt_cache_hit_tokens {hit} differ")
        cached = hit
    _part(
        cached + cache_write + audio_in + images,
        prompt,
        "cache read + write, audio and image tokens",
        "prompt_tokens",
    )
    _part(hour, cache_write, "1-hour cache writes", "cache writes")
    reasoning = _count(completion_details, "reasoning_tokens", cwhere)
    audio_out = _count(completion_details, "audio_tokens", cwhere)
    for key in ("accepted_prediction_tokens", "rejected_prediction_tokens"):
        _part(_count(completion_details, key, cwhere), completion, key, "completion_tokens")
    apart = family in ("gemini", "xai") and (
        (total is None and reasoning > 0)
        or (total is not None and total != prompt + completion and total >= prompt + completion)
    )
    if apart:
        shape = Shape.REASONING_APART
        if total is not None and total == prompt + completion + reasoning:
            pass  # reasoning stated and counted apart (xAI)
        elif total is not None and reasoning == 0:
            reasoning = total - prompt - completion  # reasoning only in the total (Gemini)
        elif total is not None:
            parts = Usage(prompt, completion + reasoning, cached, reasoning)
            raise _Disagreement(
                f"total_tokens {total} != prompt {prompt} + completion {completion}"
                f" + reasoning {reasoning}",
                parts,
                _widened(parts, total),
            )
        elif reasoning <= completion:
            # No total to say whether the reasoning is inside the completion or beside it: the
            # two readings differ by the reasoning's price, and neither is guessed.
            raise _Disagreement(
                f"no total_tokens to tell whether reasoning_tokens {reasoning} is a part of"
                f" completion_tokens {completion} or counted apart",
                Usage(prompt, completion, cached, reasoning),
                Usage(prompt, completion + reasoning, cached, reasoning),
            )
        completion += reasoning
    else:
        _part(reasoning, completion, "reasoning_tokens", "completion_tokens")
        if total is not None and total != prompt + completion:
            parts = Usage(prompt, completion, cached, reasoning)
            raise _Disagreement(
                f"total_tokens {total} != prompt {prompt} + completion {completion}",
                parts,
                _widened(parts, total),
            )
    _part(audio_out, completion, "audio", "completion")
    citations = 0
    if family == "perplexity":
        # counted apart from prompt and completion (the total is their sum): added to each as the
        # part they are, so the canonical convention holds
        citations = _count(block, "citation_tokens", where)
        apart = _count(block, "reasoning_tokens", where)
        if apart and reasoning:
            raise _Problem(
                f"{where} states reasoning_tokens both apart ({apart}) and in "
                f"completion_tokens_details ({reasoning})"
            )
        prompt += citations
        completion += apart
        reasoning += apart
    usage = Usage(
        prompt,
        completion,
        cached_tokens=cached,
        reasoning_tokens=reasoning,
        cache_write_tokens=cache_write,
        audio_prompt_tokens=audio_in,
        audio_completion_tokens=audio_out,
        cache_write_1h_tokens=hour,
        image_prompt_tokens=images,
        citation_tokens=citations,
        **_searches(block, where, family),
        **text,
    )
    if usage.total_tokens > TOKEN_COLUMN_MAX:
        raise _Problem(f"{usage.total_tokens} tokens are beyond any call")
    return usage, shape


def _read_anthropic(block: dict[str, Any], where: str) -> Usage:
    uncached = _count(block, "input_tokens", where, required=True)
    output = _count(block, "output_tokens", where, required=True)
    write = _count(block, "cache_creation_input_tokens", where)
    read = _count(block, "cache_read_input_tokens", where)
    lifetimes = _details(block, "cache_creation", where)
    hour = _count(lifetimes, "ephemeral_1h_input_tokens", where + ".cache_creation")
    try:
        _lifetimes_add_up(
            lifetimes, write, where + ".cache_creation", "cache_creation_input_tokens"
        )
    except _Disagreement as disagreement:  # the prompt holds the writes: widen it with them
        parts = disagreement.larger
        raise _Disagreement(
            str(disagreement),
            Usage(uncached + write + read, output, read, 0, write, cache_write_1h_tokens=hour),
            Usage(
                uncached + parts.cache_write_tokens + read,
                output,
                read,
                0,
                parts.cache_write_tokens,
                cache_write_1h_tokens=hour,
            ),
        ) from None
    _part(hour, write, "1-hour cache writes", "cache_creation_input_tokens")
    return Usage(
        uncached + write + read,
        output,
        cached_tokens=read,
        cache_write_tokens=write,
        cache_write_1h_tokens=hour,
        **_searches(block, where),
    )


def _read_text(block: dict[str, Any], where: str) -> dict[str, Any]:
    """The names a usage block states that price the call: ``inference_geo`` (where inference ran,
    lower-cased, for ``Usage.inference_geo``). Its ``service_tier`` (``usage_tier``) must be a
    name too. A value of either that is not a name (a number, an object, free text) is refused:
    the block states a price dimension nobody can read."""
    found: dict[str, Any] = {}
    for key in ("inference_geo", "service_tier"):
        value = block.get(key)
        if value is None:
            continue
        name = value.strip().lower() if isinstance(value, str) else None
        if name is None or not _NAME_TEXT.fullmatch(name):
            raise _Problem(f"{where}.{key} is not a name (got {value!r:.40})")
        if key == "inference_geo":
            found["inference_geo"] = name
    return found


def _lifetimes_add_up(lifetimes: dict[str, Any], write: int, where: str, total: str) -> None:
    """Anthropic's cache writes by lifetime (``ephemeral_5m_input_tokens`` and
    ``ephemeral_1h_input_tokens``, and LiteLLM's copy of them) are the parts of its cache write
    count: where both parts are stated, they add up to it, else the block disagrees with itself
    (the larger count of writes is kept for the exposure: ``_Disagreement.larger`` holds it as
    its cache writes); one part alone past the count is implausible, as any part past its whole."""
    if "ephemeral_5m_input_tokens" not in lifetimes or "ephemeral_1h_input_tokens" not in lifetimes:
        return
    five = _count(lifetimes, "ephemeral_5m_input_tokens", where)
    hour = _count(lifetimes, "ephemeral_1h_input_tokens", where)
    _part(hour, write, "1-hour cache writes", total)  # a part past its whole: implausible
    _part(five, write, "5-minute cache writes", total)
    if five + hour != write:
        parts = Usage(0, 0, cache_write_tokens=write)
        raise _Disagreement(
            f"{where}: 5-minute {five} + 1-hour {hour} cache writes != {total} {write}",
            parts,
            Usage(0, 0, cache_write_tokens=max(write, five + hour)),
        )


def _searches(block: dict[str, Any], where: str, family: str | None = None) -> dict[str, Any]:
    """The call's billable web search requests (``server_tool_use.web_search_requests``: Anthropic's,
    and LiteLLM's copy of it; Perplexity's ``num_search_queries``) and their context size when the
    block names one."""
    tools = _details(block, "server_tool_use", where)
    searches = _count(tools, "web_search_requests", where + ".server_tool_use")
    if family == "perplexity":
        queries = _count(block, "num_search_queries", where)
        if searches and queries and searches != queries:
            raise _Problem(
                f"{where}.num_search_queries ({queries}) and server_tool_use.web_search_requests "
                f"({searches}) differ"
            )
        searches = searches or queries
    found: dict[str, Any] = {"web_search_requests": searches}
    size = block.get("search_context_size")
    if isinstance(size, str) and size.strip().lower() in ("low", "medium", "high"):
        found["search_context_size"] = size.strip().lower()
    return found


def _responses_shaped(block: dict[str, Any], where: str) -> bool:
    """Whether an ``input_tokens`` / ``output_tokens`` block is OpenAI's Responses API usage rather
    than Anthropic's: a ``*_details`` object, or a ``total_tokens`` equal to input + output, says
    Responses; ``cache_*_input_tokens`` (or ``cache_creation``) says Anthropic; both at once is
    neither. Without either, the two read alike but for the total, and Anthropic's rule applies."""
    responses = "input_tokens_details" in block or "output_tokens_details" in block
    anthropic = any(
        key in block
        for key in ("cache_read_input_tokens", "cache_creation_input_tokens", "cache_creation")
    )
    if responses and anthropic:
        raise _Problem(
            f"{where} mixes the Responses API's *_tokens_details with Anthropic's cache fields"
        )
    if responses or anthropic:
        return responses
    if block.get("total_tokens") is None:
        return False
    total = _count(block, "total_tokens", where)
    input_tokens = _count(block, "input_tokens", where, required=True)
    return total == input_tokens + _count(block, "output_tokens", where, required=True)


def _read_responses(block: dict[str, Any], where: str) -> Usage:
    """OpenAI's Responses API usage: cache reads are a part of ``input_tokens``, reasoning a part
    of ``output_tokens``, and ``total_tokens`` their sum."""
    input_tokens = _count(block, "input_tokens", where, required=True)
    output = _count(block, "output_tokens", where, required=True)
    iwhere, owhere = where + ".input_tokens_details", where + ".output_tokens_details"
    cached = _count(_details(block, "input_tokens_details", where), "cached_tokens", iwhere)
    reasoning = _count(_details(block, "output_tokens_details", where), "reasoning_tokens", owhere)
    _part(cached, input_tokens, "cached_tokens", "input_tokens")
    _part(reasoning, output, "reasoning_tokens", "output_tokens")
    usage = Usage(input_tokens, output, cached_tokens=cached, reasoning_tokens=reasoning)
    total = block.get("total_tokens")
    if total is not None:
        total = _count(block, "total_tokens", where)
        if total != input_tokens + output:
            raise _Disagreement(
                f"total_tokens {total} != input {input_tokens} + output {output}",
                usage,
                _widened(usage, total),
            )
    return usage


IMAGES_KEY = "generated_images"
"""The key the images reader writes into the block it hands on (module docstring)."""
_IMAGE_NAME = re.compile(r"[a-z0-9_-]{1,16}")


def _image_text(block: dict[str, Any], key: str, where: str) -> str | None:
    value = block.get(key)
    if value is None:
        return None
    name = value.strip().lower() if isinstance(value, str) else None
    if name is None or not _IMAGE_NAME.fullmatch(name):
        raise _Problem(f"{where}.{key} is not a name (got {value!r:.40})")
    return name


def _read_images(block: dict[str, Any], where: str) -> Usage:
    """Image generation's usage (module docstring): tokens where reported, images billed per
    image, and ``total_tokens`` = input + output."""
    images = _count(block, IMAGES_KEY, where)
    input_tokens = _count(block, "input_tokens", where)
    output = _count(block, "output_tokens", where)
    iwhere, owhere = where + ".input_tokens_details", where + ".output_tokens_details"
    image_in = _count(_details(block, "input_tokens_details", where), "image_tokens", iwhere)
    _part(image_in, input_tokens, "input image_tokens", "input_tokens")
    details = _details(block, "output_tokens_details", where)
    image_out = _count(details, "image_tokens", owhere) if details else output
    _part(image_out, output, "output image_tokens", "output_tokens")
    usage = Usage(
        input_tokens,
        output,
        image_prompt_tokens=image_in,
        image_completion_tokens=image_out,
        images=images,
        image_size=_image_text(block, "image_size", where),
        image_quality=_image_text(block, "image_quality", where),
    )
    total = block.get("total_tokens")
    if total is not None:
        total = _count(block, "total_tokens", where)
        if total != input_tokens + output:
            raise _Disagreement(
                f"total_tokens {total} != input {input_tokens} + output {output}",
                usage,
                _widened(usage, total),
            )
    return usage


def _read_set(block: dict[str, Any], family: str | None) -> frozenset[tuple[str, ...]]:
    """The key paths ``_read_block`` reads from ``block``, told by the same fields it decides by (a
    Responses block without a ``*_details`` object reads as Anthropic's without cache fields: the
    same two counts)."""
    if IMAGES_KEY in block:
        return _PATHS["images"]
    if "prompt_tokens" in block or ("input_tokens" not in block and "output_tokens" not in block):
        return _PATHS["perplexity" if family == "perplexity" else "openai"]
    if "input_tokens_details" in block or "output_tokens_details" in block:
        return _PATHS["responses"]
    return _PATHS["anthropic"]


def _field_name(key: object) -> str:
    """A key as an anomaly names it: only ``[A-Za-z0-9_-]`` (any other character is ``_``), at
    most 48 characters; the names come from outside and are read back from the detail."""
    return _FIELD_NAME.sub("_", str(key)[:48]) or "_"


def _below(parent: str, child: str, joint: str = ".") -> str:
    """``parent.child`` (``parent[]`` for a list's items), a name no longer than about
    ``MAX_NAME``: past it the name stops growing (a block nested deeper than any real one names its
    first levels, then ``...``)."""
    if len(parent) >= MAX_NAME:
        return parent if parent.endswith("...") else parent + "..."
    return f"{parent}{joint}{child}"


def _deeper(path: tuple[object, ...] | None, key: object) -> tuple[object, ...] | None:
    """A child's key path (a list item's key is None, which no listed path holds); None once it
    is deeper than every listed path, so no path grows with the block's depth."""
    if path is None or len(path) >= _DEEPEST:
        return None
    return (*path, key)


def _shown(value: int | float) -> str:
    try:
        text = repr(value)
    except ValueError:  # an int past Python's digit limit for text
        return "huge"
    return text if len(text) <= 24 else text[:21] + "..."


def _unaccounted(
    blocks: list[tuple[object, str]], family: str | None = None
) -> tuple[tuple[str, str], ...]:
    """Every unknown field of the blocks (neither read for its shape nor in ``FREE_FIELDS``) that
    holds a non-zero number, itself or anywhere inside it, and every top-level ``PRICED_TEXT``
    field holding a value not listed there: (its dotted name, its value as shown). Walked without
    recursion (a block is as deep as its JSON); never raises on a dict."""
    found: list[tuple[str, str]] = []
    seen: set[str] = set()
    free = _PATHS["free"]
    for block, prefix in blocks:
        if type(block) is not dict:
            continue
        read = _read_set(block, family)
        for key, costless in PRICED_TEXT.items():
            value = block.get(key)
            if value is not None and (
                not isinstance(value, str) or value.strip().lower() not in costless
            ):
                shown = prefix + key
                if shown not in seen:
                    seen.add(shown)
                    found.append((shown, _field_name(value)))
        # (its key path, None past any listed path's depth; its name as shown; its value)
        pending: list[tuple[tuple[object, ...] | None, str, object]] = [
            ((key,), _field_name(key), value) for key, value in reversed(block.items())
        ]
        while pending:
            path, name, value = pending.pop()
            if value is None or path in read or path in free:
                continue
            if type(value) is dict:
                pending.extend(
                    (_deeper(path, key), _below(name, _field_name(key)), item)
                    for key, item in reversed(value.items())
                )
            elif type(value) is list:
                pending.extend(
                    (_deeper(path, None), _below(name, "[]", ""), item) for item in reversed(value)
                )
            elif type(value) in (int, float) and value != 0:
                shown = prefix + name
                if shown not in seen:
                    seen.add(shown)
                    found.append((shown, _shown(value)))  # type: ignore[arg-type]
    return tuple(found)


def _size(usage: Usage) -> tuple[int, int]:
    return (usage.total_tokens, usage.completion_tokens)


def _widened(parts: Usage, total: int) -> Usage:
    """The larger of the parts and the total: an excess in the total is read as completion, the
    dearer kind, so the exposure is never priced below either reading."""
    if total <= parts.total_tokens:
        return parts
    return replace(parts, completion_tokens=total - parts.prompt_tokens)


def _provider_cost(block: object) -> Micros | None:
    """The provider's own charge for the call, in micro-USD: OpenRouter's ``cost`` (USD; with a
    bring-your-own key, ``cost_details.upstream_inference_cost``), Perplexity's ``cost.total_cost``
    (USD) or xAI's ``cost_in_usd_ticks``."""
    if type(block) is not dict:
        return None
    ticks = block.get("cost_in_usd_ticks")
    if type(ticks) is int and ticks >= 0:
        amount = Decimal(ticks) / XAI_TICKS_PER_MICRO
    else:
        usd = block.get("cost")
        if type(usd) is dict:  # Perplexity: the parts and their total_cost, in USD
            usd = usd.get("total_cost")
        details = block.get("cost_details")
        if block.get("is_byok") is True and type(details) is dict:
            usd = details.get("upstream_inference_cost")
        if type(usd) not in (int, float) or isinstance(usd, bool):
            return None
        try:
            amount = Decimal(repr(usd)) * 1_000_000
        except InvalidOperation:
            return None
    if not amount.is_finite() or amount < 0 or amount > MAX_PROVIDER_COST_MICROS:
        return None
    return round_half_up(amount)


def cost_drift_ppm(charge: int, provider_cost: int) -> int | None:
    """(our charge - the provider's cost) / the provider's cost in parts per million, truncated
    toward zero; None when the provider reported a cost of 0."""
    if provider_cost <= 0:
        return None
    difference = (charge - provider_cost) * 1_000_000
    magnitude = abs(difference) // provider_cost
    return magnitude if difference >= 0 else -magnitude


def cost_drifted(charge: int, provider_cost: int) -> bool:
    """Past 1 % of the provider's cost, and more than the one micro-USD rounding can explain."""
    gap = abs(charge - provider_cost)
    return gap > 1 and gap * 100 > provider_cost


def usage_from_block(block: object) -> Usage | None:
    """One usage block's canonical counts, read by the rules that need no provider; None when it
    is not a billable block (an unpriced component included)."""
    reading = read_usage(block)
    return reading.usage if reading.verdict is Verdict.BILLABLE else None
