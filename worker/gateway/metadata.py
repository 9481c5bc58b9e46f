"""What the gateway tells the middleware about a call, and the ``request`` entry built from it (pure).

The gateway supplies what the request body cannot: whose call it is. It passes the middleware a hook,
``hook(scope, body) -> CallInfo | None``, called once per chat-completion request with the ASGI
``scope`` (headers, path, whatever its auth middleware stored in ``scope["state"]``) and the parsed
JSON body. ``None`` means "no account": the call is not billed, so the middleware refuses it (or,
with ``unbilled_routes="pass"``, serves it recorded unbilled: ``serving``). The hook runs on the
event loop: it must not block (read what is in the scope; no network calls).

Everything else comes from the body (docs/events.md §1): ``model``, ``stream``, ``include_usage``
(``stream_options.include_usage``; a streamed request without it gets no usage chunk from OpenAI, so
it is recorded as false and the worker bills the estimate), ``messages``, ``tools``, ``n``,
``max_tokens`` (``max_completion_tokens`` first), ``temperature``, ``seed``, and the
``Idempotency-Key`` header. The entry is checked by the worker's own reader
(``worker.core.request.request_from_dict``) before anything is published, so a value the worker would
dead-letter is answered at once with an HTTP 400 instead. Its messages are published with their
media replaced by placeholders and, past the budget, cut (``request_budget``).

The body is read as the app will read it (``read_body``): orjson first, and where orjson refuses
what Python's ``json`` takes (a lone surrogate escape, a UTF-8 byte order mark, UTF-16 or UTF-32,
a number past 64 bits), Python's ``json`` on the bytes, its strings cleaned for the published
metadata (a lone surrogate becomes U+FFFD). ``stream`` is read as the app reads it too
(``asks_to_stream``: truthy, so ``"true"`` and ``1`` stream). The hook's account goes through the
worker's own identifier rule (``usable_account``): an unusable one is billed to the fallback
account, with its problem in the entry's ``account_fallback``.
"""

from __future__ import annotations

import itertools
import json
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from worker.core.errors import RequestMetaError
from worker.core.request import check_identifier, request_from_dict
from worker.gateway.request_budget import clean, slim_messages


@dataclass(frozen=True, slots=True)
class CallInfo:
    """The hook's answer. ``request_id``: the client's own reference for the call (published as
    ``client_request_id``; by default its ``X-Request-Id`` header), never the billing id, which
    the middleware makes itself, unique per call (``new_request_id``); ``reserved_micros``: the
    hold the gateway placed (priced from the book when None); ``provider``: where the call is
    routed (docs/events.md §6)."""

    account_id: str
    request_id: str | None = None
    reserved_micros: int | None = None
    provider: str | None = None


MetadataHook = Callable[[dict[str, Any], dict[str, Any]], CallInfo | None]


class _RequestIds:
    """``req_`` and 32 hex digits, as ``uuid4().hex`` gives, unique for ever: 80 random bits drawn
    per process (again in a forked child, and after 2^48 ids) and a 48-bit counter: no call to
    the kernel for randomness per request, on the event loop, as ``uuid4`` makes."""

    def __init__(self) -> None:
        self._draw()
        os.register_at_fork(after_in_child=self._draw)

    def _draw(self) -> None:
        self._prefix = f"req_{os.urandom(10).hex()}"
        self._count = itertools.count()

    def __call__(self) -> str:
        n = next(self._count)
        if n >= 1 << 48:
            self._draw()
            n = next(self._count)
        return f"{self._prefix}{n:012x}"


new_request_id = _RequestIds()


def rfc3339(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def read_body(raw: bytes) -> Any:
    """The request body's JSON as the app reads it, or None when it is not JSON at all.

    orjson first (the fast path). Where it refuses, Python's ``json`` on the bytes, as Starlette's
    ``request.json()`` and most Python gateways parse: it takes what orjson does not (a lone
    surrogate escape, a UTF-8 byte order mark, UTF-16 and UTF-32 by their first bytes, ``NaN``,
    integers past 64 bits), so an app may serve such a request, and it must be billed. What it
    gives is ``clean``-ed, so the published metadata is JSON the worker reads."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError
        return None
    return clean(body)


# The most a compressed request body may inflate to before it is refused (a decompression bomb
# must not take the gateway's memory): far above any request the request budget publishes.
MAX_INFLATED_BYTES = 64 << 20
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def inflate(raw: bytes, encoding: str | None) -> bytes | None:
    """The request body as the app reads it once its ``Content-Encoding`` is undone: ``raw``
    itself without one (or ``identity``); gzip and deflate (zlib-wrapped, or raw as some clients
    send it) inflated up to ``MAX_INFLATED_BYTES``; None for an encoding not known here, a body
    that does not inflate, or one past the bound (refused: the call could not be billed)."""
    names = [name.strip().lower() for name in (encoding or "").split(",") if name.strip()]
    body = raw
    for name in reversed(names):  # the encodings are listed in the order they were applied
        if name == "identity":
            continue
        wbits = _WBITS.get(name)
        if wbits is None:
            return None
        body = _inflate(body, wbits) or (
            _inflate(body, -zlib.MAX_WBITS) if name == "deflate" else None
        )
        if body is None:
            return None
    return body


def _inflate(data: bytes, wbits: int) -> bytes | None:
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(data, MAX_INFLATED_BYTES + 1)
    except zlib.error:
        return None
    if len(out) > MAX_INFLATED_BYTES or not inflater.eof:
        return None
    return out


def asks_to_stream(body: dict[str, Any]) -> bool:
    """Whether the request asks for a stream, as the app reads ``stream``: truthy (``true``,
    ``"true"``, ``"false"``, ``1``: any non-empty string, any non-zero number) streams. The
    refusals and the request entry read it so; what is published as ``stream`` is in the end how
    the response came (``middleware``)."""
    return bool(body.get("stream"))


def usage_asked(body: dict[str, Any]) -> bool:
    """``stream_options.include_usage``, truthy as ``asks_to_stream`` reads ``stream``."""
    options = body.get("stream_options")
    return isinstance(options, dict) and bool(options.get("include_usage"))


def include_usage(body: dict[str, Any]) -> bool:
    """Whether the client will receive a usage block: always for a non-streamed call, for a streamed
    one only when it asked (``stream_options.include_usage``)."""
    return usage_asked(body) if asks_to_stream(body) else True


# The account an unusable account id is billed to, unless the gateway names another.
FALLBACK_ACCOUNT = "unattributed"


def usable_account(
    account: object, fallback: str, key: str = "account_id"
) -> tuple[str, str | None]:
    """``account`` if the worker takes it as an account id (``worker.core.request.check_identifier``:
    1 to 200 characters, no control character, no whitespace at either end), else ``fallback``
    with the reason, which the entry carries as ``account_fallback`` (never the id itself: it may
    be anything a client sent). ``key`` names where the id came from in the reason."""
    if not isinstance(account, str):
        return fallback, f"{key}: not a string but {type(account).__name__}"
    try:
        return check_identifier(account, key), None
    except RequestMetaError as exc:
        return fallback, str(exc)


def search_options(value: Any) -> dict[str, Any] | None:
    """``web_search_options`` as the LiteLLM hook publishes it: None when absent; otherwise an
    object the worker accepts. A malformed one (not an object, an unknown context size) still asked
    for web search: it becomes ``{}``, one search at the default size, never a refused entry
    (``worker.core.searches``). The ASGI middleware refuses such a request with 400 instead."""
    if value is None:
        return None
    size = value.get("search_context_size") if isinstance(value, dict) else None
    return {"search_context_size": size} if size in ("low", "medium", "high") else {}


def request_entry(
    body: dict[str, Any],
    info: CallInfo,
    *,
    request_id: str,
    reserved_micros: int,
    created_at: datetime,
    idempotency_key: str | None,
    streamed: bool,
    fallback_account: str = FALLBACK_ACCOUNT,
    client_request_id: str | None = None,
    endpoint: str | None = None,
    prompt_tokens: int | None = None,
) -> dict[str, Any]:
    """The ``request`` entry of the call, checked as the worker will read it. ``streamed`` is how the
    response came (an SSE body or not), which can differ from what was asked: a streamed request the
    upstream refused with a plain JSON error was answered non-streamed. ``messages`` are published
    with their media parts replaced (``slim_messages``). Raises ``RequestMetaError`` naming a
    field outside the contract's limits. An ``info.account_id`` the worker would refuse is billed
    to ``fallback_account``, the entry's ``account_fallback`` saying why (``usable_account``).
    ``body`` is a chat request, or another endpoint's request as one
    (``endpoint_requests``): ``endpoint`` names it (None: chat completions), and ``prompt_tokens``
    is the exact count of a prompt sent as token ids (the entry's ``prompt_estimate``)."""
    account, problem = usable_account(info.account_id, fallback_account)
    max_tokens = body.get("max_completion_tokens")
    if max_tokens is None:
        max_tokens = body.get("max_tokens")
    entry: dict[str, Any] = {
        "request_id": request_id,
        "account_id": account,
        "model": body.get("model"),
        "stream": streamed,
        "include_usage": usage_asked(body) if streamed else True,
        "reserved_micros": reserved_micros,
        "created_at": rfc3339(created_at),
        "messages": slim_messages(body.get("messages") or []),
        "tools": body.get("tools") or body.get("functions") or [],
        "n": body.get("n"),
        "max_tokens": max_tokens,
        "temperature": body.get("temperature"),
        "seed": body.get("seed"),
        "idempotency_key": idempotency_key,
        "provider": info.provider,
    }
    if body.get("web_search_options") is not None:  # a search its usage will not count
        entry["web_search_options"] = body["web_search_options"]
    if body.get("image"):  # the size and quality an image generation request asked for
        entry["image"] = body["image"]
    if problem is not None:
        entry["account_fallback"] = problem
    if client_request_id is not None:  # the client's reference, checked as an id (below)
        entry["client_request_id"] = client_request_id
    if endpoint is not None:
        entry["endpoint"] = endpoint
    if prompt_tokens is not None:
        entry["prompt_estimate"] = prompt_tokens
    request_from_dict(entry)
    return entry


# The fields of a request entry its admission record keeps: the money facts, never the prompt.
ADMISSION_FACTS = (
    "request_id", "account_id", "model", "stream", "include_usage", "reserved_micros",
    "created_at", "n", "max_tokens", "idempotency_key", "provider", "account_fallback",
    "authorization", "web_search_options", "client_request_id", "endpoint", "prompt_estimate",
    "image",
)  # fmt: skip


def admission_facts(entry: dict[str, Any], prompt_count: int | None = None) -> dict[str, Any]:
    """The call's admission record (docs/events.md §1): ``entry``'s money facts, a request entry
    of its own whose prompt is left out (``omitted_messages``), for the worker to finalize the
    call from should nothing else of it ever arrive. ``prompt_count``: the gateway's estimate of
    the prompt (the hold's), its ``prompt_estimate`` unless the entry carries one: the prompt
    is counted, never its text."""
    facts = {key: entry[key] for key in ADMISSION_FACTS if entry.get(key) is not None}
    if prompt_count is not None and "prompt_estimate" not in facts:
        facts["prompt_estimate"] = prompt_count
    return {**facts, "messages": [], "omitted_messages": True}


__all__ = [
    "FALLBACK_ACCOUNT",
    "CallInfo",
    "MetadataHook",
    "RequestMetaError",
    "admission_facts",
    "asks_to_stream",
    "new_request_id",
    "read_body",
    "request_entry",
    "usable_account",
]
