"""What the gateway tells the middleware about a call, and the ``request`` entry built from it (pure).

The gateway supplies what the request body cannot: whose call it is. It passes the middleware a hook,
``hook(scope, body) -> CallInfo | None``, called once per chat-completion request with the ASGI
``scope`` (headers, path, whatever its auth middleware stored in ``scope["state"]``) and the parsed
JSON body. ``None`` means "not billed": the request passes through untouched. The hook runs on the
event loop: it must not block (read what is in the scope; no network calls).

Everything else comes from the body (docs/events.md §1): ``model``, ``stream``, ``include_usage``
(``stream_options.include_usage``; a streamed request without it gets no usage chunk from OpenAI, so
it is recorded as false and the worker bills the estimate), ``messages``, ``tools``, ``n``,
``max_tokens`` (``max_completion_tokens`` first), ``temperature``, ``seed``, and the
``Idempotency-Key`` header. The entry is checked by the worker's own reader
(``worker.request.request_from_dict``) before anything is published, so a value the worker would
dead-letter is answered at once with an HTTP 400 instead.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from worker.errors import RequestMetaError
from worker.request import request_from_dict


@dataclass(frozen=True, slots=True)
class CallInfo:
    """The hook's answer. ``request_id``: unique for ever (a fresh ``chatcmpl``-independent id is
    made when None); ``reserved_micros``: the hold the gateway placed (priced from the book when
    None); ``provider``: where the call is routed (docs/events.md §6)."""

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


def include_usage(body: dict[str, Any]) -> bool:
    """Whether the client will receive a usage block: always for a non-streamed call, for a streamed
    one only when it asked (``stream_options.include_usage``)."""
    if body.get("stream") is not True:
        return True
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def request_entry(
    body: dict[str, Any],
    info: CallInfo,
    *,
    request_id: str,
    reserved_micros: int,
    created_at: datetime,
    idempotency_key: str | None,
    streamed: bool,
) -> dict[str, Any]:
    """The ``request`` entry of the call, checked as the worker will read it. ``streamed`` is how the
    response came (an SSE body or not), which can differ from what was asked: a streamed request the
    upstream refused with a plain JSON error was answered non-streamed. Raises ``RequestMetaError``
    naming a field outside the contract's limits."""
    max_tokens = body.get("max_completion_tokens")
    if max_tokens is None:
        max_tokens = body.get("max_tokens")
    entry: dict[str, Any] = {
        "request_id": request_id,
        "account_id": info.account_id,
        "model": body.get("model"),
        "stream": streamed,
        "include_usage": include_usage(body) if streamed else True,
        "reserved_micros": reserved_micros,
        "created_at": rfc3339(created_at),
        "messages": body.get("messages") or [],
        "tools": body.get("tools") or body.get("functions") or [],
        "n": body.get("n"),
        "max_tokens": max_tokens,
        "temperature": body.get("temperature"),
        "seed": body.get("seed"),
        "idempotency_key": idempotency_key,
        "provider": info.provider,
    }
    request_from_dict(entry)
    return entry


__all__ = ["CallInfo", "MetadataHook", "RequestMetaError", "new_request_id", "request_entry"]
