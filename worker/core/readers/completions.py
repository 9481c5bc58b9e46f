"""OpenAI's legacy Completions API (``POST …/completions``): ``text_completion`` chunks or body.

Shape: platform.openai.com/docs/api-reference/completions (the completion object; a stream is the
same object per chunk, ``choices[].text`` a fragment, ``usage`` on a last ``choices: []`` chunk when
``stream_options.include_usage`` was asked, then ``data: [DONE]``). Each chunk is read as the chat
chunk it corresponds to (``text`` → ``delta.content``; a body's ``text`` → ``message.content``), so
the chat assembler's rules (usage, finish, ``[DONE]``, errors, mixed ids) are the rules here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from worker.core.assembly import Assembled, StreamAssembler
from worker.core.errors import FrameError
from worker.core.readers.frames import frames_of
from worker.core.sse import Chunk, json_kind

_CHAT_CHUNK = "chat.completion.chunk"


def _as_chat(obj: dict[str, Any], key: str) -> dict[str, Any]:
    """``obj`` with each choice's ``text`` moved to ``<key>.content`` and ``object`` the chat one's."""
    choices = obj.get("choices")
    if not isinstance(choices, list):
        return {**obj, "object": _CHAT_CHUNK}
    moved = []
    for choice in choices:
        if isinstance(choice, dict) and key not in choice:
            text = choice.get("text")
            rest = {k: v for k, v in choice.items() if k not in ("text", "logprobs")}
            if text is not None:
                rest[key] = {"content": text}
            moved.append(rest)
        else:
            moved.append(choice)
    return {**obj, "object": _CHAT_CHUNK, "choices": moved}


def assemble_stream(records: bytes | str | Iterable[Any]) -> Assembled:
    """A streamed completion (see the module docstring). Never raises."""
    assembler = StreamAssembler()
    for frame in frames_of(records):
        if isinstance(frame, Chunk) and frame.event != "error":
            assembler.feed_chunk(_as_chat(frame.obj, "delta"), frame.index, frame.event)
        else:
            assembler.feed(frame)
    return assembler.finish()


def assemble_body(body: Any) -> Assembled:
    """A non-streamed completion (or an ``error`` body). Never raises."""
    assembler = StreamAssembler()
    if not isinstance(body, dict):
        assembler.feed_bad(FrameError(0, f"not a JSON object (got {json_kind(body)})"))
        return assembler.finish()
    assembler._absorb(_as_chat(body, "message"), 0, "message")
    return assembler.finish()
