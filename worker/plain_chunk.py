"""The plain chunk: the shape nearly every streamed frame has, recognized without building a dict.

A plain chunk is a ``chat.completion.chunk`` whose choices (the assembler takes exactly one) hold
a delta with only a content fragment and/or argument fragments of tool calls already begun (an
index and ``function.arguments``; no id, type or name): no usage, no error, no role, refusal or
reasoning, no logprobs, no finish reason. ``decode_plain`` decodes a frame's JSON with msgspec
straight into the structs below, which say all of that in their types, and returns None for any
frame that is not plain. Pure; no state. The structs are not tracked by the garbage collector
(``gc=False``): decoded JSON holds no reference cycle.

Why: decoding into a dict and then looking into it in Python was two thirds of the assembler's time
per frame; msgspec checks the types in C while it decodes.

Exactness: the structs forbid unknown fields and keep every other value they allow (``Any``), so
the whole document is decoded and validated as orjson would (invalid UTF-8, numbers out of range,
control characters and bad syntax are refused alike), and any field not declared here, any value
of another type, any doubt gives None: the caller then takes the general path, which decides the
frame as before. msgspec's ``int`` refuses booleans and floats, as the assembler does; the one
known difference between the two decoders, an integer beyond 64 bits (orjson gives a float), is
outside the bounds the choice index is given.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

Index = Annotated[int, msgspec.Meta(ge=0, lt=1 << 32)]


class Arguments(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    arguments: str
    name: None = None


class CallFragment(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    function: Arguments
    index: Index | None = None
    id: None = None
    type: None = None


class Delta(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """At least one of ``content`` and ``tool_calls`` is set (the assembler checks; msgspec cannot
    say it)."""

    content: str | None = None
    tool_calls: list[CallFragment] | None = None
    role: None = None
    refusal: None = None
    reasoning_content: None = None
    reasoning: None = None


class Choice(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    delta: Delta
    index: Index | None = None
    logprobs: None = None
    finish_reason: None = None
    # Provider additions seen on plain frames, not read by the assembler: OpenRouter, Azure, vLLM.
    native_finish_reason: Any = None
    content_filter_results: Any = None
    stop_reason: Any = None


class Chunk(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    object: Literal["chat.completion.chunk"]
    choices: list[Choice]
    id: Any = None
    created: Any = None
    model: Any = None
    system_fingerprint: Any = None
    service_tier: Any = None
    obfuscation: Any = None
    provider: Any = None
    usage: None = None
    error: None = None


# ``decode`` raises one of ``NOT_PLAIN`` for a frame that is anything but a plain chunk (text that
# is not UTF-8, as surrogate-escaped bytes, too); loops that run per frame call it directly.
decode = msgspec.json.Decoder(Chunk).decode
NOT_PLAIN = (msgspec.MsgspecError, UnicodeError)


def decode_plain(payload: bytes | str) -> Chunk | None:
    """A frame's JSON as a plain chunk, or None when it is anything else (the caller then takes the
    general path). The number of choices is the caller's to check."""
    try:
        return decode(payload)
    except NOT_PLAIN:
        return None
