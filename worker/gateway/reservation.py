"""The hold a call needs: the most it can cost (pure; ``hold_for`` is the one place it is computed).

``hold_for`` answers a ``Hold`` or, for a model the book does not price, ``Unpriced``:

- **The model** is priced as the worker prices it (``PriceBook.price_for``: exact names, aliases,
  dated snapshots of rows that say ``snapshots = true``, fine-tuned ids; no case folding, no
  provider prefixes) and kept under the one name budgets apply to (``PriceBook.budget_model``,
  which the worker's sync uses too). A name the book does not price at the call's time and
  provider is ``Unpriced``: the gateway refuses it, or holds it at a configured ceiling, never at 0.
- **The prompt** is bounded over every prompt field of the request: ``messages`` and ``tools`` by
  the worker's estimate (``worker.core.estimate``; a short prompt by ``short_prompt_bound``, and
  any prompt without the tokenizer by ``prompt_bytes_bound``), plus every other field that is not
  a known sampling or delivery control (``NOT_PROMPT``: ``response_format`` schemas,
  ``tool_choice``, ``functions``, ``prediction``, any field this module does not know, and
  ``tools`` again for their nested schemas, which the cookbook's rule does not read) as the UTF-8
  bytes of its JSON: every token of the shipped encodings is at least one byte.
- **The output** per choice is the client's limit (``max_completion_tokens``, else ``max_tokens``)
  bounded by the model's ``max_output_tokens`` and by its context window (``PriceBook``'s, the
  worker's ``implausible_usage`` bound) less the prompt estimate. A request with no limit is held
  at the model's ``max_output_tokens`` (or ``default_max_tokens`` where the book does not know it),
  less what the prompt leaves of ``max_input_tokens``, and ``Hold.write`` names the field the
  gateway must write that limit into the forwarded request, so the upstream cannot exceed it.
  Times ``n``; a ``prediction``'s bytes are added to each choice's output (rejected prediction
  tokens are billed as completion tokens).

An image generation request (``image``, an ``endpoint_requests.ImageAsk``) holds its prompt and
its ``n`` images: at the row's dearest ``per_image`` price for the size and quality asked (any,
where it names none), and, where the row prices image output tokens, the model's
``max_output_tokens`` per image (the tokens of its largest image, at its highest quality) plus
``PARTIAL_IMAGE_TOKENS`` per partial image; a row that prices neither, or a size and quality it
has no price for, is ``Unpriced``. No limit is written: the images API takes none.

The hold is capped at the contract's ``MAX_RESERVED_MICROS``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from worker.core.errors import InputError
from worker.core.estimate import (
    REPLY_PRIMER,
    TOKENS_PER_MESSAGE,
    TOKENS_PER_NAME,
    estimate_prompt,
    prompt_bytes_bound,
)
from worker.core.money import Micros
from worker.core.prices import Price, PriceBook, normalize_provider
from worker.core.request import MAX_CHOICES, MAX_RESERVED_MICROS
from worker.core.result import Usage
from worker.gateway.endpoint_requests import PARTIAL_IMAGE_TOKENS, ImageAsk

# The output limit held (and written) for a request that states none, where the book does not
# know the model's ``max_output_tokens``: the gateway writes it, so it bounds the answer.
DEFAULT_MAX_TOKENS = 4096
# No choice of any model produces more (the worker's own bound on a call's counts without a known
# context window); a larger stated limit is held at this, which also keeps the charge in range.
MAX_OUTPUT_TOKENS = 10**8


def _count(value: object, low: int, high: int) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return value
    return None


# A prompt of plain messages with at most this many bytes of text is held at a bound of its
# estimate, without running the tokenizer (``prompt_tokens``).
SHORT_PROMPT_BYTES = 256


def short_prompt_bound(messages: object, tools: object) -> int | None:
    """An upper bound of ``estimate_prompt`` without the tokenizer, for a short prompt: messages
    whose values are all strings (or null), no tools, at most ``SHORT_PROMPT_BYTES`` bytes of text
    (UTF-8). Every token of the shipped encodings is at least one byte, so a text's bytes are at
    least its tokens; each message adds the cookbook's per-message and per-name tokens. None for
    any other prompt. The hold it gives is at most about ``SHORT_PROMPT_BYTES`` input tokens above
    the estimate's, and the gateway's event loop does not run the tokenizer for it."""
    if tools or not isinstance(messages, list):
        return None
    size = 0
    total = REPLY_PRIMER
    for message in messages:
        if not isinstance(message, dict):
            return None
        total += TOKENS_PER_MESSAGE + TOKENS_PER_NAME
        for value in message.values():
            if isinstance(value, str):
                size += (
                    len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))
                )
            elif value is not None:
                return None
        if size > SHORT_PROMPT_BYTES:
            return None
    return total + size


def prompt_tokens(model: str, messages: object, tools: object) -> int:
    """The prompt tokens a hold is priced at: ``short_prompt_bound``, else the estimate."""
    bound = short_prompt_bound(messages, tools)
    if bound is not None:
        return bound
    return estimate_prompt(model, messages if isinstance(messages, list) else [], tools)  # type: ignore[arg-type]


# Fields of a chat completion request that are not read by the model as prompt: sampling and
# delivery controls, identifiers. Every other field is bounded as prompt (``prompt_bound``).
NOT_PROMPT = frozenset({
    "model", "messages", "stream", "stream_options", "n", "max_tokens", "max_completion_tokens",
    "temperature", "top_p", "seed", "user", "metadata", "store", "logprobs", "top_logprobs",
    "presence_penalty", "frequency_penalty", "logit_bias", "stop", "service_tier",
    "parallel_tool_calls", "reasoning_effort", "modalities", "audio", "web_search_options",
    "safety_identifier", "prompt_cache_key", "verbosity",
})  # fmt: skip
# Providers whose API takes ``max_completion_tokens`` (OpenAI's reasoning models refuse
# ``max_tokens``); every other provider is written ``max_tokens``.
COMPLETION_LIMIT_PROVIDERS = frozenset({"openai", "azure"})


def limit_field(provider: str | None) -> str:
    """The request field a written output limit goes in, for ``provider`` (None: OpenAI's)."""
    name = normalize_provider(provider)
    return "max_completion_tokens" if name in (None, *COMPLETION_LIMIT_PROVIDERS) else "max_tokens"


def _json_bytes(value: object) -> int:
    try:
        return len(orjson.dumps(value, option=orjson.OPT_PASSTHROUGH_DATACLASS, default=str))
    except TypeError:  # a value orjson cannot write (a lone surrogate, a huge integer)
        return len(repr(value).encode("utf-8", "surrogatepass"))


def prompt_bound(
    model: str, body: dict[str, Any], *, tokenize: bool = True
) -> tuple[int, int, int | None]:
    """(an upper bound of the request's prompt tokens, the floor the context room is taken from,
    the estimate of ``messages`` and ``tools``): ``messages`` and ``tools`` by the estimate
    (``tokenize`` False: by ``prompt_bytes_bound``), every other prompt field by its JSON bytes. The
    floor is the estimate when it was tokenized, else 0 (a byte count is no lower bound); the
    estimate is None when it was not tokenized."""
    messages = body.get("messages")
    messages = messages if isinstance(messages, list) else []
    tools = body.get("tools") or body.get("functions") or ()
    tools = tools if isinstance(tools, list) else ()
    floor = 0
    estimated = None
    if not tokenize:
        counted = prompt_bytes_bound(model, messages, tools)
    else:
        estimated = estimate_prompt(model, messages, tools)
        counted = short_prompt_bound(messages, tools) or 0
        if not counted:
            counted = floor = estimated
    rest = sum(_json_bytes(v) for k, v in body.items() if k not in NOT_PROMPT and v is not None)
    return counted + rest, floor, estimated


@dataclass(frozen=True, slots=True)
class Hold:
    """A priced hold: ``micros``; ``model`` the canonical name (``PriceBook.canonical``) budgets
    apply to; ``output_tokens`` the output limit held per choice; ``write`` the request field the
    gateway must set to ``output_tokens`` before forwarding (the request stated no limit), or
    None; ``prompt_tokens`` the prompt bound held; ``prompt_estimate`` the worker's estimate of
    the messages and tools (``estimate_prompt``), None when the prompt was priced by bytes. The
    admission record carries it, so that a call finalized from its admission alone (its gateway
    died before publishing the prompt) is still exposed and charged for its prompt."""

    micros: Micros
    model: str
    output_tokens: int
    write: str | None
    prompt_tokens: int
    prompt_estimate: int | None = None


@dataclass(frozen=True, slots=True)
class Unpriced:
    """The book prices no row for the call's model (``model``, as the request names it): never
    held at 0. ``budget_model``: the name its budgets apply to, should it be held at a ceiling."""

    model: str
    reason: str
    budget_model: str


def _client_limit(body: dict[str, Any]) -> int | None:
    limit = _count(body.get("max_completion_tokens"), 0, 2**63 - 1)
    return limit if limit is not None else _count(body.get("max_tokens"), 0, 2**63 - 1)


def hold_for(
    book: PriceBook,
    body: dict[str, Any],
    at: datetime,
    *,
    provider: str | None = None,
    default_max_tokens: int = DEFAULT_MAX_TOKENS,
    tokenize: bool = True,
    field: str | None = None,
    whole_context: bool = False,
    image: ImageAsk | None = None,
) -> Hold | Unpriced:
    """The hold of the request ``body`` (the parsed chat-completion JSON) made at ``at`` and
    routed to ``provider`` (see the module docstring). ``tokenize`` False: the prompt by byte
    counts (for a large request, ``holds.price_hold``). ``field``: where a limit is written
    (default ``limit_field(provider)``). ``whole_context``: the request carries a prompt the
    gateway cannot see (a stored conversation it continues): the prompt is held at the model's
    whole input window, or refused unpriced when the book states none."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return Unpriced(str(model), "the request names no model", str(model))
    price = book.price_for(model, at, provider=provider)
    if price is None:
        routed = f" routed to {provider}" if provider else ""
        reason = f"the price book has no price for model {model!r}{routed}"
        return Unpriced(model, reason, book.budget_model(model))
    prompt, floor, estimated = prompt_bound(model, body, tokenize=tokenize)
    if whole_context:
        window = price.max_input_tokens or price.context_window
        if window is None:
            reason = f"the price of {model!r} states no input window to hold a stored prompt at"
            return Unpriced(model, reason, book.budget_model(model))
        prompt = max(prompt, window)
    if image is not None:
        return _image_hold(book, price, model, image, prompt, estimated)
    limit = _client_limit(body)
    write = None
    if limit is None:
        limit = price.max_output_tokens or default_max_tokens
        if price.max_input_tokens is not None:
            limit = min(limit, max(price.max_input_tokens - floor, 1))
        write = field or limit_field(provider)
    else:
        if price.max_output_tokens is not None:
            limit = min(limit, price.max_output_tokens)
        window = price.context_window
        if window is not None:
            limit = min(limit, max(window - floor, 0))
    limit = min(limit, MAX_OUTPUT_TOKENS)
    choices = _count(body.get("n"), 1, MAX_CHOICES) or 1
    predicted = _json_bytes(body["prediction"]) if body.get("prediction") is not None else 0
    completion = (limit + predicted) * choices
    try:  # at the peak rates (no ``at``): never below an off-peak call's
        charge = price.charge(Usage(prompt_tokens=prompt, completion_tokens=completion))
    except InputError:  # counts past what a charge holds: the most a hold can be
        charge = Micros(MAX_RESERVED_MICROS)
    if charge is None:  # a prompt past the row's limits with no band there
        reason = f"the price of {model!r} does not cover a prompt of {prompt} tokens"
        return Unpriced(model, reason, book.budget_model(model))
    micros = Micros(min(int(charge), MAX_RESERVED_MICROS))
    return Hold(micros, book.budget_model(model), limit, write, prompt, estimated)


def _image_hold(
    book: PriceBook, price: Price, model: str, image: ImageAsk, prompt: int, estimated: bool
) -> Hold | Unpriced:
    """The hold of an image generation request (module docstring)."""
    n = _count(image.n, 1, MAX_CHOICES) or 1
    size = quality = None
    if price.per_image:
        dearest = price.dearest_image(image.size, image.quality)
        if dearest is None:
            reason = (
                f"the price of {model!r} has no per-image price for size {image.size or 'any'}, "
                f"quality {image.quality or 'any'}"
            )
            return Unpriced(model, reason, book.budget_model(model))
        size, quality = dearest
    tokens = 0
    if price.image_output is not None:
        if price.max_output_tokens is None:
            reason = f"the price of {model!r} states no output tokens to hold an image at"
            return Unpriced(model, reason, book.budget_model(model))
        tokens = (price.max_output_tokens + image.partial_images * PARTIAL_IMAGE_TOKENS) * n
    elif not price.per_image:
        reason = f"the price of {model!r} prices no image (no per_image, no image_output)"
        return Unpriced(model, reason, book.budget_model(model))
    usage = Usage(
        prompt_tokens=prompt, completion_tokens=tokens, image_completion_tokens=tokens,
        images=n if price.per_image else 0, image_size=size, image_quality=quality,
    )  # fmt: skip
    charge = price.charge(usage)
    if charge is None:
        reason = f"the price of {model!r} does not cover a prompt of {prompt} tokens"
        return Unpriced(model, reason, book.budget_model(model))
    micros = Micros(min(int(charge), MAX_RESERVED_MICROS))
    return Hold(micros, book.budget_model(model), tokens, None, prompt, estimated)


def reserve(
    book: PriceBook,
    body: dict[str, Any],
    at: datetime,
    *,
    provider: str | None = None,
    default_max_tokens: int = DEFAULT_MAX_TOKENS,
) -> Micros:
    """``hold_for``'s micros, 0 for an unpriced model: the ``reserved_micros`` published without
    spend control (the worker marks an unpriced call ``unpriced`` whatever was held)."""
    found = hold_for(book, body, at, provider=provider, default_max_tokens=default_max_tokens)
    return found.micros if isinstance(found, Hold) else Micros(0)
