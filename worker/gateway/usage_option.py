"""Usage asked of the upstream for every streamed call, and its chunk kept from a client that did
not ask (pure).

OpenAI sends a streamed call's usage only when the request says ``stream_options.include_usage:
true``; without it the worker can only estimate the call. So the ASGI middleware asks for it on
every streamed request it bills (``with_usage_asked``), records in the request entry that usage was
asked upstream (``include_usage: true``: a stream without its usage chunk is then
``missing_usage``, not a legitimately estimated call), publishes the stream byte for byte, and
takes the usage-only chunk (``choices: []`` with a ``usage`` object) out of what a client that did
not ask receives (``UsageChunkStrip``), as LiteLLM's proxy does. The client's other bytes are the
upstream's, as sent (with usage asked, OpenAI adds ``"usage": null`` to every other chunk).
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from worker.gateway.events import EventSplitter
from worker.gateway.metadata import asks_to_stream, usage_asked

_OPTIONS_KEY = b"stream_options"
_ESCAPE = b"\\u"
_JSON_SPACE = b" \t\r\n"
_NO_CHOICES = re.compile(rb'"choices"\s*:\s*\[\s*\]')


def usage_options(body: dict[str, Any]) -> dict[str, Any] | None:
    """The ``stream_options`` the upstream must get for ``body``: the client's with
    ``include_usage: true``; None when nothing needs to change (not a stream, usage already
    asked, or ``stream_options`` not an object: the upstream refuses that itself)."""
    if not asks_to_stream(body) or usage_asked(body):
        return None
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        return None
    return {**(options or {}), "include_usage": True}


def with_usage_asked(raw: bytes, body: dict[str, Any], options: dict[str, Any]) -> bytes:
    """The request bytes the app forwards, asking for usage: ``raw`` (the body as the app reads
    it, ``body`` parsed from it) with ``"stream_options": options`` added before its closing
    brace when ``raw`` is UTF-8 JSON that names no ``stream_options`` (nor holds a ``\\u``
    escape that could spell it): every other byte as the client sent it. Otherwise the whole body
    written again from ``body`` (a second ``stream_options`` key is refused by some parsers)."""
    text = raw.rstrip(_JSON_SPACE)
    if (
        text.endswith(b"}")
        and _OPTIONS_KEY not in raw
        and _ESCAPE not in raw
        and b"\x00" not in raw  # UTF-16 or UTF-32
    ):
        opening = text.lstrip(b"\xef\xbb\xbf" + _JSON_SPACE)
        if opening.startswith(b"{") and opening[1:-1].strip(_JSON_SPACE):
            return text[:-1] + b',"stream_options":' + orjson.dumps(options) + b"}"
    merged = {**body, "stream_options": options}
    try:
        return orjson.dumps(merged)
    except TypeError:  # orjson.JSONEncodeError: a lone surrogate, an integer past 64 bits
        return json.dumps(merged).encode()


def is_usage_chunk(event: bytes) -> bool:
    """Whether an SSE event is a usage-only chunk: its data a JSON object with ``choices: []``
    and a ``usage`` object."""
    if b'"usage"' not in event or _NO_CHOICES.search(event) is None:
        return False
    lines = event.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    data = [line[5:].removeprefix(b" ") for line in lines if line.startswith(b"data:")]
    try:
        chunk = orjson.loads(b"\n".join(data))
    except orjson.JSONDecodeError:
        return False
    return (
        isinstance(chunk, dict)
        and chunk.get("choices") == []
        and isinstance(chunk.get("usage"), dict)
    )


class UsageChunkStrip:
    """A streamed body as a client that did not ask for usage gets it: the events as they came,
    less the usage-only chunks. An event goes out once it is whole (its blank line came)."""

    __slots__ = ("_splitter", "stripped")

    def __init__(self) -> None:
        self._splitter = EventSplitter()
        self.stripped = 0  # usage chunks taken out

    def _kept(self, events: list[bytes]) -> bytes:
        kept = [event for event in events if not is_usage_chunk(event)]
        self.stripped += len(events) - len(kept)
        return b"".join(kept)

    def feed(self, chunk: bytes) -> bytes:
        """What of the body so far goes to the client now."""
        return self._kept(self._splitter.feed(chunk))

    def rest(self) -> bytes:
        """At the end: an event left without its blank line."""
        rest = self._splitter.rest()
        return self._kept([rest]) if rest else b""


__all__ = ["UsageChunkStrip", "is_usage_chunk", "usage_options", "with_usage_asked"]
