"""Anthropic's Messages API passed through natively (``POST …/messages``): its events or body.

Shapes: docs.anthropic.com/en/api/messages (the message object) and
docs.anthropic.com/en/docs/build-with-claude/streaming (the events). The call's answer is choice 0:

* its text is the ``text`` content blocks (``text_delta``), its reasoning the ``thinking`` blocks
  (``thinking_delta``), its tool calls the ``tool_use`` blocks (``input_json_delta`` fragments; a
  body's ``input`` object as JSON);
* it finished when a ``stop_reason`` came (``message_delta.delta.stop_reason``; a body's
  ``stop_reason``): every stop reason is a finished answer (``end_turn``, ``max_tokens``,
  ``stop_sequence``, ``tool_use``, ``pause_turn``, ``refusal``…), kept as the finish reason;
  ``message_stop`` is the stream's end (``saw_done``); an ``error`` event (or an ``error`` body) is
  the call's error;
* usage is ``message_start.message.usage`` updated by each ``message_delta.usage``, field by
  field: "the token counts in the usage field of the message_delta event are cumulative" (the
  streaming page), so the last value of each field is the call's. The block is read by Anthropic's
  rule (``input_tokens`` without the cache reads and writes).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from worker.core.assembly import Assembled
from worker.core.errors import FrameError
from worker.core.readers.frames import frames_of, text_of
from worker.core.result import Choice, ToolCall
from worker.core.sse import BadFrame, Chunk, json_kind


class _Answer:
    def __init__(self) -> None:
        self.text: list[str] = []
        self.thinking: list[str] = []
        self.calls: dict[int, ToolCall] = {}
        self.finish: str | None = None

    def block(self, index: object, block: object) -> None:
        """A whole content block (a body's, or a stream's ``content_block_start``)."""
        if not isinstance(block, dict):
            return
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            self.text.append(block["text"])
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            self.thinking.append(block["thinking"])
        elif kind in ("tool_use", "server_tool_use"):
            key = index if isinstance(index, int) else len(self.calls)
            call = ToolCall(len(self.calls), type="function")
            call.id = block.get("id") if isinstance(block.get("id"), str) else None
            call.name = block.get("name") if isinstance(block.get("name"), str) else None
            arguments = block.get("input")
            if isinstance(arguments, dict) and arguments:
                call.arguments = orjson.dumps(arguments).decode()
            self.calls[key] = call

    def delta(self, index: object, delta: object) -> None:
        if not isinstance(delta, dict):
            return
        kind = delta.get("type")
        if kind == "text_delta" and isinstance(delta.get("text"), str):
            self.text.append(delta["text"])
        elif kind == "thinking_delta" and isinstance(delta.get("thinking"), str):
            self.thinking.append(delta["thinking"])
        elif (
            kind == "input_json_delta"
            and isinstance(delta.get("partial_json"), str)
            and isinstance(index, int)
            and index in self.calls
        ):
            self.calls[index].arguments += delta["partial_json"]

    def choice(self) -> Choice:
        return Choice(
            0,
            role="assistant",
            content="".join(self.text) if self.text else None,
            reasoning_content="".join(self.thinking) if self.thinking else None,
            tool_calls=list(self.calls.values()),
            finish_reason=self.finish,
        )


def _assembled(
    answer: _Answer | None,
    message: dict[str, Any],
    usage: dict[str, Any] | None,
    *,
    error: dict[str, Any] | None,
    frame_errors: list[FrameError],
    chunks: int,
    done: bool,
) -> Assembled:
    model, mid = message.get("model"), message.get("id")
    return Assembled(
        choices=[answer.choice()] if answer is not None else [],
        usage_raw=usage,
        completion_id=text_of(mid),
        model=text_of(model),
        error=error,
        frame_errors=frame_errors,
        saw_done=done,
        chunk_count=chunks,
    )  # the tier Anthropic names in ``usage`` prices the call (``reconcile``: ``usage_tier``)


def assemble_body(body: Any) -> Assembled:
    """A non-streamed message (or an ``error`` body). Never raises."""
    if not isinstance(body, dict):
        problem = FrameError(0, f"not a JSON object (got {json_kind(body)})")
        return _assembled(None, {}, None, error=None, frame_errors=[problem], chunks=0, done=False)
    error = body.get("error") if isinstance(body.get("error"), dict) else None
    if body.get("type") != "message":
        return _assembled(None, body, None, error=error, frame_errors=[], chunks=0, done=False)
    answer = _Answer()
    content = body.get("content")
    for index, block in enumerate(content if isinstance(content, list) else ()):
        answer.block(index, block)
    reason = body.get("stop_reason")
    answer.finish = reason if isinstance(reason, str) else None
    usage = body.get("usage")
    return _assembled(
        answer, body, usage if isinstance(usage, dict) else None, error=error, frame_errors=[],
        chunks=1, done=True,
    )  # fmt: skip


def assemble_stream(records: bytes | str | Iterable[Any]) -> Assembled:
    """A streamed message (see the module docstring). Never raises."""
    answer = _Answer()
    message: dict[str, Any] = {}
    usage: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    errors: list[FrameError] = []
    chunks = 0
    done = False
    for frame in frames_of(records):
        if isinstance(frame, BadFrame):
            errors.append(frame.error)
            continue
        if not isinstance(frame, Chunk):  # a ``[DONE]`` Anthropic never sends: ignored
            continue
        chunks += 1
        obj = frame.obj
        kind = obj.get("type") or frame.event
        if kind == "error" or frame.event == "error":
            if error is None:
                inner = obj.get("error")
                error = inner if isinstance(inner, dict) else obj
        elif kind == "message_start" and isinstance(obj.get("message"), dict):
            message = obj["message"]
            if isinstance(message.get("usage"), dict):
                usage = {**(usage or {}), **message["usage"]}
        elif kind == "content_block_start":
            answer.block(obj.get("index"), obj.get("content_block"))
        elif kind == "content_block_delta":
            answer.delta(obj.get("index"), obj.get("delta"))
        elif kind == "message_delta":
            delta = obj.get("delta")
            reason = delta.get("stop_reason") if isinstance(delta, dict) else None
            if isinstance(reason, str):
                answer.finish = reason
            more = obj.get("usage")
            if isinstance(more, dict):  # cumulative: each field's last value is the call's
                usage = {**(usage or {}), **{k: v for k, v in more.items() if v is not None}}
        elif kind == "message_stop":
            done = True
        elif kind is None:
            errors.append(FrameError(frame.index, "an event without a type"))
    return _assembled(
        answer if chunks else None, message, usage, error=error, frame_errors=errors,
        chunks=chunks, done=done,
    )  # fmt: skip
