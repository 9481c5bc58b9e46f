"""OpenAI's Responses API (``POST …/responses``): its event stream or its ``response`` body.

Shapes: platform.openai.com/docs/api-reference/responses (the response object) and
…/responses-streaming (the events). The call's one answer is choice 0:

* its text is the ``output_text`` parts of the ``message`` output items (in a stream: the
  ``response.output_text.delta`` events, or the final response's items when it came), its tool
  calls the ``function_call`` items (``response.function_call_arguments.delta``), its reasoning the
  ``reasoning`` items' summaries;
* it finished as the response's ``status`` says: ``completed`` → ``stop`` (``tool_calls`` when it
  called a function), ``incomplete`` → ``incomplete_details.reason`` (``max_output_tokens`` →
  ``length``, ``content_filter``), ``failed`` and ``cancelled`` → ``error`` with the response's
  ``error`` (an error finish: exposure, never 0); ``queued``/``in_progress`` is no finish;
* a stream's final response comes in ``response.completed``, ``response.incomplete`` or
  ``response.failed``; an ``error`` event is the call's error; a stream that ends without a final
  response did not finish (``incomplete``);
* usage is the final response's ``usage`` (``input_tokens``, ``input_tokens_details.cached_tokens``,
  ``output_tokens``, ``output_tokens_details.reasoning_tokens``, ``total_tokens``). Built-in tools
  billed per call (web search, file search, code interpreter, image generation, computer use) are
  counted from the output items into the block as ``tool_calls.<type>``: the book has no per-call
  price for them yet, so such a call is unsettled ``unpriced_component``, never settled without them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from worker.core.assembly import Assembled
from worker.core.errors import FrameError
from worker.core.readers.frames import count_of, frames_of, text_of
from worker.core.result import Choice, ToolCall
from worker.core.sse import BadFrame, Chunk, json_kind

# Output item types billed per call beside the tokens (platform.openai.com/docs/pricing, "Built-in
# tools"): counted into the usage block, where no reader prices them (``unpriced_component``).
PER_CALL_TOOLS = frozenset({
    "web_search_call", "file_search_call", "code_interpreter_call", "image_generation_call",
    "computer_call",
})  # fmt: skip
_FINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})
_INCOMPLETE_FINISH = {"max_output_tokens": "length", "content_filter": "content_filter"}


def _finish(response: dict[str, Any], calls: bool) -> tuple[str | None, dict[str, Any] | None]:
    """(the finish reason, the error) the response's status says."""
    status = response.get("status")
    if status == "completed":
        return ("tool_calls" if calls else "stop"), None
    if status == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        return _INCOMPLETE_FINISH.get(str(reason), "length"), None
    if status in ("failed", "cancelled"):
        error = response.get("error")
        if not isinstance(error, dict):
            error = {"code": str(status), "message": f"the response was {status}"}
        return "error", error
    return None, None


class _Answer:
    """What one call answered so far: text, reasoning, function calls, per-call tools."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[str, ToolCall] = {}
        self.tools: dict[str, int] = {}

    def item(self, item: object) -> None:
        """Take a whole output item."""
        if not isinstance(item, dict):
            return
        kind = item.get("type")
        if kind == "message":
            for part in item.get("content") or ():
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    self.text.append(part["text"])
        elif kind == "function_call":
            key = str(item.get("call_id") or item.get("id") or len(self.calls))
            call = self.calls.setdefault(key, ToolCall(len(self.calls), type="function"))
            call.id = item.get("call_id") if isinstance(item.get("call_id"), str) else call.id
            call.name = item.get("name") if isinstance(item.get("name"), str) else call.name
            if isinstance(item.get("arguments"), str):
                call.arguments = item["arguments"]
        elif kind == "reasoning":
            for part in item.get("summary") or ():
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    self.reasoning.append(part["text"])
        if isinstance(kind, str) and kind in PER_CALL_TOOLS:
            self.tools[kind] = self.tools.get(kind, 0) + 1

    def choice(self, finish: str | None) -> Choice:
        return Choice(
            0,
            role="assistant",
            content="".join(self.text) if self.text else None,
            reasoning_content="".join(self.reasoning) if self.reasoning else None,
            tool_calls=list(self.calls.values()),
            finish_reason=finish,
        )


def _usage(response: dict[str, Any], tools: dict[str, int]) -> dict[str, Any] | None:
    usage = response.get("usage")
    if not tools:
        return usage if usage is not None else None
    block = dict(usage) if isinstance(usage, dict) else {}
    block["tool_calls"] = dict(tools)
    return block


def _assembled(
    response: dict[str, Any] | None,
    answer: _Answer,
    *,
    error: dict[str, Any] | None,
    frame_errors: list[FrameError],
    chunks: int,
    done: bool,
) -> Assembled:
    finish: str | None = None
    usage = None
    if response is not None:
        finish, failed = _finish(response, bool(answer.calls))
        error = error or failed
        usage = _usage(response, answer.tools)
    tier = response.get("service_tier") if response is not None else None
    model = response.get("model") if response is not None else None
    rid = response.get("id") if response is not None else None
    created = response.get("created_at") if response is not None else None
    return Assembled(
        choices=[answer.choice(finish)] if response is not None or chunks else [],
        usage_raw=usage,
        completion_id=text_of(rid),
        model=text_of(model),
        created=count_of(created),
        error=error,
        frame_errors=frame_errors,
        saw_done=done,
        chunk_count=chunks,
        service_tier=text_of(tier),
    )


def assemble_body(body: Any) -> Assembled:
    """A non-streamed answer: the ``response`` object (or an ``error`` body)."""
    answer = _Answer()
    if not isinstance(body, dict):
        problem = FrameError(0, f"not a JSON object (got {json_kind(body)})")
        return _assembled(None, answer, error=None, frame_errors=[problem], chunks=0, done=False)
    error = body.get("error") if isinstance(body.get("error"), dict) else None
    if body.get("object") != "response" and "status" not in body:
        return _assembled(None, answer, error=error, frame_errors=[], chunks=0, done=False)
    for item in body.get("output") or ():
        answer.item(item)
    return _assembled(body, answer, error=error, frame_errors=[], chunks=1, done=True)


def assemble_stream(records: bytes | str | Iterable[Any]) -> Assembled:
    """A streamed answer: the Responses API's events (see the module docstring)."""
    answer = _Answer()
    streamed = _Answer()  # the deltas, for a stream that never sent its final response
    final: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    errors: list[FrameError] = []
    chunks = 0
    calls: dict[object, ToolCall] = {}
    for frame in frames_of(records):
        if isinstance(frame, BadFrame):
            errors.append(frame.error)
            continue
        if not isinstance(frame, Chunk):  # a ``[DONE]`` no Responses stream sends: ignored
            continue
        chunks += 1
        obj = frame.obj
        kind = obj.get("type") or frame.event
        if kind == "error" or frame.event == "error":
            if error is None:
                inner = obj.get("error")
                error = inner if isinstance(inner, dict) else obj
            continue
        response = obj.get("response")
        if isinstance(response, dict):  # created and in progress carry it too: only a final counts
            if kind in _FINAL_EVENTS and final is None:
                final = response
            continue
        if kind == "response.output_text.delta" and isinstance(obj.get("delta"), str):
            streamed.text.append(obj["delta"])
        elif kind == "response.reasoning_summary_text.delta" and isinstance(obj.get("delta"), str):
            streamed.reasoning.append(obj["delta"])
        elif kind == "response.function_call_arguments.delta" and isinstance(obj.get("delta"), str):
            key = obj.get("item_id") or obj.get("output_index")
            call = calls.setdefault(key, ToolCall(len(calls), type="function"))
            call.arguments += obj["delta"]
        elif kind == "response.output_item.done":
            streamed.item(obj.get("item"))
        elif kind is None:
            errors.append(FrameError(frame.index, "an event without a type"))
    if final is not None and final.get("output"):
        for item in final["output"]:
            answer.item(item)
    else:
        answer = streamed
        if not answer.calls:  # arguments streamed, their items never done
            answer.calls = {str(key): call for key, call in calls.items()}
    return _assembled(
        final, answer, error=error, frame_errors=errors, chunks=chunks, done=final is not None
    )
