"""The wire: a streamed body split into Server-Sent Events, and events decoded into frames.

Pure and total. ``parse_events`` and ``decode_frames`` never raise on any input: every byte of a body
ends as a frame (``Chunk`` or ``Done``), as a ``BadFrame`` carrying a ``FrameError`` with a stable
reason, or in an ignored line (comments, ``id:``/``retry:`` fields, unknown fields). One bad event
never hides the good ones around it, so the assembler can account for every frame it was sent.

The split follows the SSE spec (https://html.spec.whatwg.org/multipage/server-sent-events.html) with
two deliberate departures, both what LLM clients do in practice: a body that ends without a blank line
still dispatches its last event (the gateway records bodies that may be cut), and an event whose
several ``data:`` lines each hold a whole JSON object is read as one frame per line (see
``_split_lines``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from worker.core.errors import FrameError

_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError

DONE = "[DONE]"


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event. ``index`` is its 0-based position in the body; ``data`` is the ``data:``
    lines joined with "\\n", None when the event had an ``event:`` field but no data line."""

    index: int
    event: str | None
    data: str | None


@dataclass(frozen=True, slots=True)
class Done:
    """The ``data: [DONE]`` sentinel."""

    index: int


@dataclass(frozen=True, slots=True)
class Chunk:
    """A frame whose data is a JSON object. ``event`` is the SSE event name (``"error"`` for an
    ``event: error`` frame, whose non-JSON data is wrapped as ``{"message": data}``)."""

    index: int
    obj: dict[str, Any]
    event: str | None = None


@dataclass(frozen=True, slots=True, eq=False)
class BadFrame:
    """A frame that could not be decoded; the error names the frame and the reason.

    Two bad frames are equal when their errors name the same frame and reason (exceptions themselves
    compare by identity)."""

    error: FrameError

    @property
    def index(self) -> int:
        return self.error.index

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BadFrame):
            return NotImplemented
        return (self.error.index, self.error.reason) == (other.error.index, other.error.reason)

    def __hash__(self) -> int:
        return hash((self.error.index, self.error.reason))


Frame = Done | Chunk | BadFrame


def body_text(body: bytes | bytearray | memoryview | str) -> str:
    """Decode a body as UTF-8. Invalid bytes survive as lone surrogates (``surrogateescape``) so the
    one event holding them becomes a ``BadFrame`` and the others still decode."""
    if isinstance(body, str):
        return body
    raw = bytes(body)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("utf-8", "surrogateescape")


def iter_raw_events(
    text: str, first_index: int = 0
) -> Iterator[tuple[int, str | None, str | None]]:
    """Yield ``(index, event, data)`` for each event of ``text``; the engine behind ``parse_events``.

    Splits on blank lines with str methods (no per-line regex); the common single-line
    ``data: {...}`` event takes a fast path without splitting it into lines.
    """
    if text[:1] == "\ufeff":
        text = text[1:]
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    index = first_index
    for block in text.split("\n\n"):
        if not block:
            continue
        if block[:5] == "data:" and "\n" not in block:
            data = block[5:]
            if data[:1] == " ":
                data = data[1:]
            yield index, None, data
            index += 1
            continue
        event: str | None = None
        lines: list[str] = []
        for line in block.split("\n"):
            if not line or line[0] == ":":
                continue
            name, _, value = line.partition(":")
            if value[:1] == " ":
                value = value[1:]
            if name == "data":
                lines.append(value)
            elif name == "event":
                event = value or None
        if lines:
            yield index, event, "\n".join(lines)
            index += 1
        elif event is not None:
            yield index, event, None
            index += 1


def parse_events(
    body: bytes | bytearray | memoryview | str, first_index: int = 0
) -> list[SSEEvent]:
    """Split a body into events. Never raises.

    LF, CRLF and CR line ends; ``data:`` with or without the space; comment lines (``: keep-alive``,
    ``: OPENROUTER PROCESSING``) ignored; an event with no data and no event name yields nothing.
    ``first_index`` continues the numbering when one call's body arrives as several records.
    """
    return [SSEEvent(i, e, d) for i, e, d in iter_raw_events(body_text(body), first_index)]


def json_kind(value: object) -> str:
    """The JSON name of a decoded value's type, for error reasons ("list", "object", "null")."""
    return _JSON_KINDS.get(type(value), type(value).__name__)


_JSON_KINDS = {
    dict: "object",
    list: "list",
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def lenient_loads(data: str | bytes) -> Any:
    """JSON that orjson refuses and Python's ``json`` reads, as a Python client reads it: a lone
    surrogate escape (``"\\ud800"``), and for bytes a UTF-8 byte order mark, UTF-16 or UTF-32.
    Every lone surrogate in its strings becomes U+FFFD (what the client shows; tiktoken and the
    databases refuse a lone one). Raises ``ValueError`` when Python's ``json`` refuses it too."""
    try:
        return _without_surrogates(json.loads(data))
    except RecursionError:
        raise ValueError("nested too deep") from None


def _without_surrogates(value: Any) -> Any:
    if type(value) is str:
        return _LONE_SURROGATE.sub("\ufffd", value)
    if type(value) is dict:
        return {_without_surrogates(k): _without_surrogates(v) for k, v in value.items()}
    if type(value) is list:
        return [_without_surrogates(item) for item in value]
    return value


def _utf8_error_at(data: str) -> int | None:
    """The byte offset, within the data, of the first byte that was not UTF-8 (or None)."""
    try:
        data.encode("utf-8")
    except UnicodeEncodeError as exc:
        return len(data[: exc.start].encode("utf-8", "surrogateescape"))
    return None


def _split_lines(index: int, event: str | None, data: str) -> list[Frame] | None:
    """Leniency: frames written one per line with no blank line between them.

    Per SSE, ``data: {...}\\ndata: {...}`` is ONE event whose data is both lines joined by "\\n",
    which is not JSON. Some servers (and documentation, including our own provider docs) write frames
    that way, and the clients people use read each line as its own frame. We do the same, but only
    when every line is a JSON object or ``[DONE]``; otherwise the event stays one bad frame.
    """
    frames: list[Frame] = []
    for line in data.split("\n"):
        if line.strip() == DONE:
            frames.append(Done(index))
            continue
        try:
            obj = _loads(line)
        except _JSONDecodeError:
            return None
        if type(obj) is not dict:
            return None
        frames.append(Chunk(index, obj, event))
    return frames


def decode_event(index: int, event: str | None, data: str | None) -> list[Frame]:
    """Decode one event into its frames (usually one; none for a data-less non-error event)."""
    if data is None:
        return [Chunk(index, {}, event)] if event == "error" else []
    if data.strip() == DONE:
        return [Done(index)]
    try:
        obj = _loads(data)
    except _JSONDecodeError as exc:
        bad_at = _utf8_error_at(data)
        if bad_at is None:
            try:
                obj = lenient_loads(data)
            except ValueError:
                obj = None
            if type(obj) is dict:
                return [Chunk(index, obj, event)]
        if event == "error":
            text = data.encode("utf-8", "replace").decode("utf-8") if bad_at is not None else data
            return [Chunk(index, {"message": text}, event)]
        if bad_at is not None:
            return [BadFrame(FrameError(index, f"not UTF-8 at byte {bad_at}"))]
        if "\n" in data:
            frames = _split_lines(index, event, data)
            if frames is not None:
                return frames
        return [BadFrame(FrameError(index, f"not JSON: {exc}"))]
    if type(obj) is dict:
        return [Chunk(index, obj, event)]
    if event == "error":
        return [Chunk(index, {"message": data}, event)]
    return [BadFrame(FrameError(index, f"not a JSON object (got {json_kind(obj)})"))]


def decode_frames(events: Iterable[SSEEvent]) -> Iterator[Frame]:
    """Decode events into frames, in order. Never raises; bad events become ``BadFrame``."""
    for ev in events:
        yield from decode_event(ev.index, ev.event, ev.data)


def iter_frames(
    body: bytes | bytearray | memoryview | str, first_index: int = 0
) -> Iterator[Frame]:
    """``decode_frames(parse_events(body))`` without building the intermediate event objects."""
    for index, event, data in iter_raw_events(body_text(body), first_index):
        yield from decode_event(index, event, data)
