"""What a simulated gateway writes: publisher operations, and the SSE chunks inside ``frame`` entries.

A call is an ordered tuple of operations the driver performs with a ``Publisher``; the driver decides
the pacing (how many frame entries go out per round trip), never the content.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

DONE = "data: [DONE]\n\n"


@dataclass(frozen=True, slots=True)
class Open:
    """``Publisher.open``: the ``request`` entry (``body`` is its exact bytes) and the notification."""

    body: bytes


@dataclass(frozen=True, slots=True)
class Frames:
    """``Publisher.frames``: one stream entry per item; an item may hold several SSE events."""

    entries: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Response:
    """``Publisher.response``: a non-streamed call's HTTP status and body."""

    status: int
    body: bytes


@dataclass(frozen=True, slots=True)
class Close:
    reason: str = "done"


@dataclass(frozen=True, slots=True)
class Notify:
    """A notification written directly: a repeated ``open``, or a ``kind`` the worker does not know."""

    kind: str


@dataclass(frozen=True, slots=True)
class Deferred:
    """Frames written after the call's close: ``delay_ms`` later, or at the end of the run (None)."""

    frames: Frames
    delay_ms: int | None


Op = Open | Frames | Response | Close | Notify | Deferred


def sse(obj: dict[str, Any]) -> str:
    """One SSE event as the gateway forwards it: ``data: {...}`` and a blank line."""
    return "data: " + orjson.dumps(obj).decode() + "\n\n"


@dataclass(frozen=True, slots=True)
class ChunkHeader:
    """The fields every chunk of one completion repeats, in the order providers send them."""

    id: str
    created: int
    model: str
    system_fingerprint: str
    service_tier: str | None = None
    usage_null: bool = False  # OpenAI sends ``"usage": null`` on every chunk when usage was asked

    def chunk(self, choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> str:
        obj: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
        }
        if self.service_tier:
            obj["service_tier"] = self.service_tier
        obj["system_fingerprint"] = self.system_fingerprint
        obj["choices"] = choices
        if usage is not None or self.usage_null:
            obj["usage"] = usage
        return sse(obj)


def choice_delta(index: int, delta: dict[str, Any], finish_reason: str | None = None) -> dict:
    return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}


def group_entries(events: list[str], pair_rate: float, rng: Any) -> tuple[str, ...]:
    """Gateway records: mostly one event each, sometimes two events sharing one entry."""
    entries: list[str] = []
    i = 0
    while i < len(events):
        if i + 1 < len(events) and rng.random() < pair_rate:
            entries.append(events[i] + events[i + 1])
            i += 2
        else:
            entries.append(events[i])
            i += 1
    return tuple(entries)
