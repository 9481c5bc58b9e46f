"""The plain chunk: the shape nearly every streamed frame has, recognized without building a dict.

A plain chunk is a ``chat.completion.chunk`` with one choice whose delta holds only a content
fragment: no usage, no error, no role, no logprobs, no finish reason. ``decode_chunk`` decodes a
frame's JSON with msgspec straight into the structs below (None when it does not fit them);
``StreamAssembler.feed_plain`` checks that it is plain and absorbs it. Pure; no state.

Why: decoding into a dict and then looking into it was two thirds of the assembler's time per frame;
decoding into typed structs and checking their attributes costs about a third of that.

Exactness: the structs forbid unknown fields and type every value they keep as ``Any``, so the whole
document is decoded and validated as orjson would (invalid UTF-8, numbers out of range, control
characters and bad syntax are refused alike), and any field not declared here, any value of the
wrong type, any doubt, gives None: the caller then takes the general path, which decides the frame
as before. The one known difference between the decoders is an integer beyond 64 bits (orjson gives
a float, msgspec an int); the only integer used here, the choice index, is taken below 2**32 only.
"""

from __future__ import annotations

from typing import Any

import msgspec

MAX_INDEX = 1 << 32


class Delta(msgspec.Struct, forbid_unknown_fields=True):
    content: Any = None
    role: Any = None
    refusal: Any = None
    reasoning_content: Any = None
    reasoning: Any = None
    tool_calls: Any = None


class Choice(msgspec.Struct, forbid_unknown_fields=True):
    index: Any = None
    delta: Delta | None = None
    logprobs: Any = None
    finish_reason: Any = None
    # Provider additions seen on plain frames, not read by the assembler: OpenRouter, Azure, vLLM.
    native_finish_reason: Any = None
    content_filter_results: Any = None
    stop_reason: Any = None


class Chunk(msgspec.Struct, forbid_unknown_fields=True):
    id: Any = None
    object: Any = None
    created: Any = None
    model: Any = None
    system_fingerprint: Any = None
    service_tier: Any = None
    obfuscation: Any = None
    provider: Any = None
    choices: list[Choice] | None = None
    usage: Any = None
    error: Any = None


_decode = msgspec.json.Decoder(Chunk).decode
_Error = msgspec.MsgspecError


def decode_chunk(payload: bytes | str) -> Chunk | None:
    """A frame's JSON decoded into the structs, or None when it does not fit them (the caller then
    takes the general path). Whether it is plain is the caller's to check
    (``StreamAssembler.feed_plain``)."""
    try:
        return _decode(payload)
    except (_Error, UnicodeError):  # text that is not UTF-8 (surrogate-escaped bytes) too
        return None
