"""The hold a call needs when the gateway does not state one (pure).

``reserved_micros`` = the price of the prompt estimate (``worker.core.estimate``, the cookbook's rules;
for a short prompt a bound of it, ``prompt_tokens``) as input tokens plus ``max_tokens`` x ``n``
output tokens, at the row of the price book that would price the call (same model, provider and
time; the default tier). ``max_completion_tokens`` is read
before ``max_tokens`` (OpenAI renamed it). With neither, ``default_max_tokens`` stands in for it
(``DEFAULT_MAX_TOKENS`` unless the middleware is given another): a stated guess, not the model's
whole output window, which would hold many times what most calls cost. A model the book does not
price is held at 0 (the worker marks such a call ``unpriced`` whatever was held). The hold is capped
at the contract's ``MAX_RESERVED_MICROS``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from worker.core.estimate import REPLY_PRIMER, TOKENS_PER_MESSAGE, TOKENS_PER_NAME, estimate_prompt
from worker.core.money import Micros
from worker.core.prices import PriceBook
from worker.core.request import MAX_CHOICES, MAX_RESERVED_MICROS
from worker.core.result import Usage

DEFAULT_MAX_TOKENS = 4096
# No choice of any model produces more (the worker's own bound on a call's counts without a known
# context window); a larger stated limit is held at this, which also keeps the charge in range.
MAX_OUTPUT_TOKENS = 10**8


def _count(value: object, low: int, high: int) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return value
    return None


def output_tokens(body: dict[str, Any], default_max_tokens: int = DEFAULT_MAX_TOKENS) -> int:
    """The most output tokens the request may cost: its token limit times its choices."""
    limit = _count(body.get("max_completion_tokens"), 0, 2**63 - 1)
    if limit is None:
        limit = _count(body.get("max_tokens"), 0, 2**63 - 1)
    if limit is None:
        limit = default_max_tokens
    limit = min(limit, MAX_OUTPUT_TOKENS)
    choices = _count(body.get("n"), 1, MAX_CHOICES) or 1
    return limit * choices


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


def reserve(
    book: PriceBook,
    body: dict[str, Any],
    at: datetime,
    *,
    provider: str | None = None,
    default_max_tokens: int = DEFAULT_MAX_TOKENS,
) -> Micros:
    """The hold for the request ``body`` (the parsed chat-completion JSON) made at ``at``."""
    model = body.get("model")
    if not isinstance(model, str):
        return Micros(0)
    price = book.price_for(model, at, provider=provider)
    if price is None:
        return Micros(0)
    tools = body.get("tools") or body.get("functions") or ()
    prompt = prompt_tokens(model, body.get("messages"), tools)
    completion = output_tokens(body, default_max_tokens)
    charge = price.charge(Usage(prompt_tokens=prompt, completion_tokens=completion))
    return Micros(min(int(charge or 0), MAX_RESERVED_MICROS))
