"""Pricing a hold at admission, off the event loop, and what the gateway does with the answer.

``price_hold`` runs ``reservation.hold_for`` in a worker thread (``asyncio.to_thread``): tokenizing a
prompt of megabytes takes seconds, and on the event loop it stalled every call of the gateway and
timed out their authorizations. A request of at most ``INLINE_BYTES`` is priced on the loop (the
hand-off costs more than the pricing). A request of more than ``TOKENIZE_BYTES`` of text is priced
without the tokenizer, from byte counts (``prompt_bytes_bound``: every token is at least one byte,
so the hold is larger, never smaller); and a pricing that takes more than ``TIMEOUT_SECONDS`` is
replaced by that byte count: a slow tokenizer never admits a call unchecked.

``unpriced_hold`` is the rule for a model the book does not price (``reservation.Unpriced``): held
at the configured ceiling (``BILLING_AUTH_UNPRICED_HOLD_USD``), or refused with HTTP 400
``model_not_priced`` when the ceiling is 0: never held at 0.

``with_limit`` writes the output limit a hold assumed into the request body the app forwards.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import Any

from worker.core.prices import PriceBook
from worker.gateway.endpoint_requests import ImageAsk
from worker.gateway.refusals import Refusal
from worker.gateway.reservation import DEFAULT_MAX_TOKENS, Hold, Unpriced, hold_for

INLINE_BYTES = 4 << 10
TOKENIZE_BYTES = 1 << 20
TIMEOUT_SECONDS = 2.0


def text_bytes(value: object, stop: int = TOKENIZE_BYTES) -> int:
    """The characters of the strings in ``value`` (a parsed JSON body), counted up to ``stop``."""
    total = 0
    todo = [value]
    while todo and total <= stop:
        item = todo.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            todo.extend(item.values())
            total += len(item)
        elif isinstance(item, list | tuple):
            todo.extend(item)
    return total


Route = tuple[str, str | None]  # a model and the provider it is sent to


def hold_of_routes(
    book: PriceBook,
    body: dict[str, Any],
    at: datetime,
    routes: list[Route],
    *,
    tokenize: bool | None = None,
    **options: Any,
) -> Hold | Unpriced:
    """The hold of a request that may go to any of ``routes`` (a LiteLLM model name's
    deployments, before the router picks one): ``Unpriced`` when one of them is; else the largest
    hold, with the smallest output limit of them to write, so that whichever is picked stays
    within it. ``tokenize`` None: by the request's size (``TOKENIZE_BYTES``)."""
    if tokenize is None:
        tokenize = text_bytes(body) <= TOKENIZE_BYTES
    found: list[Hold] = []
    for model, provider in routes:
        one = hold_for(book, {**body, "model": model}, at, provider=provider, tokenize=tokenize,
                       **options)  # fmt: skip
        if isinstance(one, Unpriced):
            return one
        found.append(one)
    top = max(found, key=lambda hold: hold.micros)
    if top.write is None:
        return top
    return replace(top, output_tokens=min(hold.output_tokens for hold in found))


async def price_hold(
    book: PriceBook,
    body: dict[str, Any],
    at: datetime,
    *,
    provider: str | None = None,
    routes: list[Route] | None = None,
    size: int | None = None,
    default_max_tokens: int = DEFAULT_MAX_TOKENS,
    field: str | None = None,
    whole_context: bool = False,
    image: ImageAsk | None = None,
) -> Hold | Unpriced:
    """``hold_for`` of the request (of each of ``routes`` when given: ``hold_of_routes``), priced
    off the event loop (see the module docstring). ``size``: the request's bytes when known (at
    most ``INLINE_BYTES``: priced here)."""
    if routes is None:
        model = body.get("model")
        routes = [(model if isinstance(model, str) else "", provider)]
    options = {
        "default_max_tokens": default_max_tokens, "field": field, "whole_context": whole_context,
        "image": image,
    }  # fmt: skip
    if size is not None and size <= INLINE_BYTES:
        return hold_of_routes(book, body, at, routes, **options)
    work = partial(hold_of_routes, book, body, at, routes, **options)
    try:
        return await asyncio.wait_for(asyncio.to_thread(work), TIMEOUT_SECONDS)
    except TimeoutError:
        bound = partial(hold_of_routes, book, body, at, routes, tokenize=False, **options)
        return await asyncio.to_thread(bound)


def unpriced_hold(
    found: Unpriced, ceiling: int, request_id: str | None
) -> tuple[int, str] | Refusal:
    """(the hold, the model it is kept under) for an unpriced model, or the refusal: held at
    ``ceiling`` micros, refused when it is 0."""
    if ceiling > 0:
        return ceiling, found.budget_model
    return Refusal(
        400,
        f"Model {found.model!r} cannot be billed: {found.reason}. Ask the gateway's operator to "
        "add its price (billing prices import).",
        "model",
        "model_not_priced",
        "invalid_request_error",
        (),
        request_id,
    )


def with_limit(raw: bytes, body: dict[str, Any], field: str, limit: int) -> bytes:
    """The request body ``raw`` (parsed: ``body``) with ``field`` set to ``limit``: the bytes as
    they came and ``,"field":limit`` before the closing brace when ``raw`` is a plain UTF-8 JSON
    object without that field; else ``body`` written anew as JSON (a field present with a value
    that is not a limit, a byte order mark, UTF-16 or UTF-32)."""
    if field not in body:
        end = len(raw.rstrip(b" \t\r\n"))
        start = len(raw) - len(raw.lstrip(b" \t\r\n"))
        if raw[start : start + 1] == b"{" and raw[end - 1 : end] == b"}":
            return raw[: end - 1] + b',"%s":%d' % (field.encode(), limit) + raw[end - 1 :]
    return json.dumps({**body, field: limit}).encode()
