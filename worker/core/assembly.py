"""The assembled completion: chunks of a stream (or one non-streamed body) put back together.

Pure and total: ``StreamAssembler`` accepts any decoded JSON object and never raises on it. A malformed
piece inside a chunk (``choices`` not a list, a delta that is not an object, content that is not a
string) is skipped and recorded as a ``FrameError`` naming the frame and the piece, so a bad frame is
a counted anomaly, never a crash and never silence.

For OpenAI-shaped streams the result equals what the ``openai`` SDK's ``ChatCompletionStreamState``
builds (tests/test_assembly_oracle.py holds us to it). Where providers differ, the rules below follow
what the gateway sees in practice:

* usage is read from every chunk before its choices, and the last block wins: vLLM repeats a cumulative
  block on every chunk, Mistral puts it on the finish chunk, OpenAI on a ``choices: []`` chunk;
* a chunk with empty ``choices`` and no usage (Azure's ``prompt_filter_results``) contributes nothing,
  and its empty ``id`` neither becomes the completion id nor counts as a mixed id;
* a top-level ``error`` object, or an ``event: error`` frame, is recorded (the first one);
* a tool-call fragment carrying a new ``id`` at an index already held by a call with another id
  starts a new call (providers that send whole calls in one chunk, all at index 0);
* ``role`` is taken once; ``content``, ``refusal`` and ``reasoning_content`` are independent
  accumulators that stay None until a fragment arrives; a ``content`` that is a list of typed
  chunks (Mistral's Magistral: ``text`` and ``thinking`` chunks) goes to the content and the
  reasoning;
* a legacy ``function_call`` (name and argument fragments, before ``tool_calls``) is accumulated
  per choice as the SDK does: fragments concatenated, a repeated whole name taken once (as for
  tool calls);
* Groq's ``x_groq.usage`` is kept apart from the top-level ``usage`` (last one wins for each), and
  the response's ``service_tier`` (last one given) is kept for pricing; ``worker.core.usage`` reads them;
* nothing after the first ``[DONE]`` is part of the call: later frames are only counted
  (``frames_after_done``), and whether one held a usage block is noted (``usage_after_done``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import orjson

from worker.core.errors import FrameError
from worker.core.result import Choice, FunctionCall, ToolCall
from worker.core.sse import (
    BadFrame,
    Chunk,
    Done,
    Frame,
    body_text,
    decode_event,
    iter_raw_events,
    json_kind,
)
from worker.plain_chunk import take_run

_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError
_CHUNK_OBJECT = "chat.completion.chunk"


@dataclass(slots=True)
class Assembled:
    """A call's answer as the outcome rules read it, whichever endpoint's reader built it
    (``worker.core.readers``); a field a reader has no word for keeps its default."""

    choices: list[Choice]
    usage_raw: dict[str, Any] | None = None
    completion_id: str | None = None
    model: str | None = None
    created: int | None = None
    system_fingerprint: str | None = None
    error: dict[str, Any] | None = None
    frame_errors: list[FrameError] = field(default_factory=list)
    mixed_id_count: int = 0
    saw_done: bool = False
    chunk_count: int = 0
    foreign_objects: int = 0
    groq_usage: dict[str, Any] | None = None
    service_tier: str | None = None
    frames_after_done: int = 0
    usage_after_done: bool = False


class _Call:
    __slots__ = ("args", "id", "name", "seq", "type", "wire_index")

    def __init__(self, wire_index: int, seq: int) -> None:
        self.wire_index = wire_index
        self.seq = seq
        self.id: str | None = None
        self.type: str | None = None
        self.name: str | None = None
        self.args: list[str] = []


class _ChoiceState:
    __slots__ = (
        "calls",
        "content",
        "current_call",
        "finish_reason",
        "function_args",
        "function_name",
        "lp_content",
        "lp_refusal",
        "reasoning",
        "refusal",
        "role",
    )

    def __init__(self) -> None:
        self.role: str | None = None
        self.content: list[str] | None = None
        self.refusal: list[str] | None = None
        self.reasoning: list[str] | None = None
        self.calls: list[_Call] = []
        self.current_call: dict[int, _Call] = {}
        self.finish_reason: str | None = None
        self.lp_content: list[Any] | None = None
        self.lp_refusal: list[Any] | None = None
        self.function_name: str | None = None
        self.function_args: list[str] | None = None


def _join(parts: list[str] | None) -> str | None:
    return None if parts is None else "".join(parts)


class StreamAssembler:
    """Accumulates the frames of one call, in order; ``finish`` builds the ``Assembled`` result.

    Feed either frames (``feed``) or their parts (``feed_chunk``/``feed_bad``/``feed_done``). Safe to
    call ``finish`` at any point (a dropped stream is just one that was never finished by the server).
    """

    def __init__(self) -> None:
        self._choices: dict[int, _ChoiceState] = {}
        self._frames = 0
        self._meta_pending = True
        self.usage_raw: dict[str, Any] | None = None
        self.completion_id: str | None = None
        self.model: str | None = None
        self.created: int | None = None
        self.system_fingerprint: str | None = None
        self.error: dict[str, Any] | None = None
        self.frame_errors: list[FrameError] = []
        self.mixed_id_count = 0
        self.saw_done = False
        self.chunk_count = 0
        self.foreign_objects = 0
        self.groq_usage: dict[str, Any] | None = None
        self.service_tier: str | None = None
        self.frames_after_done = 0
        self.usage_after_done = False

    # -- frames -------------------------------------------------------------------------------------

    def feed(self, frame: Frame) -> None:
        kind = type(frame)
        if kind is Chunk:
            self.feed_chunk(frame.obj, frame.index, frame.event)  # type: ignore[union-attr]
        elif kind is Done:
            self.feed_done(frame.index)  # type: ignore[union-attr]
        elif kind is BadFrame:
            self.feed_bad(frame.error)  # type: ignore[union-attr]

    def feed_done(self, index: int | None = None) -> None:
        self._frames += 1
        if self.saw_done:
            self.frames_after_done += 1
        self.saw_done = True

    def feed_bad(self, error: FrameError) -> None:
        self._frames += 1
        if self.saw_done:
            self.frames_after_done += 1
            return
        self.frame_errors.append(error)

    def feed_chunk(
        self, obj: dict[str, Any], index: int | None = None, event: str | None = None
    ) -> None:
        """Absorb one decoded data object. ``index`` is its frame position (for errors); it defaults
        to the number of frames fed so far."""
        if index is None:
            index = self._frames
        self._frames += 1
        if self.saw_done:
            self.frames_after_done += 1
            if isinstance(obj, dict) and (obj.get("usage") or obj.get("x_groq")):
                self.usage_after_done = True
            return
        if event == "error":
            if self.error is None:
                inner = obj.get("error") if isinstance(obj, dict) else None
                self.error = inner if isinstance(inner, dict) else obj
            return
        if not isinstance(obj, dict):
            self.frame_errors.append(FrameError(index, f"not a JSON object (got {json_kind(obj)})"))
            return
        self.chunk_count += 1
        kind = obj.get("object")
        if kind and kind != _CHUNK_OBJECT:
            self.foreign_objects += 1
        self._absorb(obj, index, "delta")

    def feed_plain(self, payload: bytes | str) -> bool:
        """Absorb one frame's JSON if it is a plain chunk (``worker.plain_chunk``) with one choice,
        of the completion already identified, and return True; return False, having changed
        nothing, otherwise."""
        if self._meta_pending or self.saw_done:
            return False
        if type(payload) is str:
            try:
                payload = payload.encode()
            except UnicodeEncodeError:  # surrogate-escaped bytes that are not UTF-8: not plain
                return False
        return self._take_plain([payload], 0) == 1

    def _take_plain(self, payloads: list[bytes], start: int) -> int:
        """Absorb the plain chunks of ``payloads`` from ``start`` up to the first that is not one
        (``worker.plain_chunk.take_run``: exactly one choice, of this completion's id, a service
        tier that is a name, a delta of content and/or argument fragments for calls begun) as
        ``feed_chunk`` would absorb their dicts; returns how many were taken. Only for a
        completion identified and not done."""
        begun = {number: list(state.current_call) for number, state in self._choices.items()}
        taken, tier, pieces = take_run(payloads, start, self.completion_id, begun)
        if not taken:
            return 0
        choices = self._choices
        for number, call, text in pieces:
            state = choices.get(number)
            if state is None:
                state = choices[number] = _ChoiceState()
            if call < 0:
                if state.content is None:
                    state.content = [text]
                else:
                    state.content.append(text)
            else:
                state.current_call[call].args.append(text)
        if tier:
            self.service_tier = tier
        self._frames += taken
        self.chunk_count += taken
        return taken

    def feed_data(self, payloads: list[bytes], first_index: int) -> int:
        """Absorb the data of ``data:`` events of one line each (what follows ``data: ``), in order,
        numbered from ``first_index``; returns the number after the last. Each payload becomes
        exactly the one frame the SSE parser and ``decode_event`` make of its event; runs of plain
        chunks are taken in compiled code, without a dict. Runs for nearly every frame of every
        stream."""
        count = len(payloads)
        position = 0
        while position < count:
            # Only the general path below identifies the completion or sees [DONE].
            if not (self._meta_pending or self.saw_done):
                position += self._take_plain(payloads, position)
                if position == count:
                    break
            payload = payloads[position]
            index = first_index + position
            position += 1
            if payload == b"[DONE]":
                self.feed_done(index)
            else:
                try:
                    obj = _loads(payload)
                except _JSONDecodeError:
                    obj = None
                if type(obj) is dict:
                    self.feed_chunk(obj, index)
                else:
                    _feed_events(self, b"data: " + payload + b"\n\n", index)
        return first_index + count

    def feed_json(self, payload: bytes | str, index: int) -> bool:
        """Absorb one data event's JSON text (frame position ``index``) if it is a JSON object: as a
        plain chunk when it is one, else decoded and fed to ``feed_chunk``. Returns False, having
        changed nothing, for anything else (the caller decides the frame the general way)."""
        if self.feed_plain(payload):
            return True
        try:
            obj = _loads(payload)
        except _JSONDecodeError:
            return False
        if type(obj) is not dict:
            return False
        self.feed_chunk(obj, index)
        return True

    def _error(self, index: int, reason: str) -> None:
        self.frame_errors.append(FrameError(index, reason))

    def _absorb(self, obj: dict[str, Any], index: int, delta_key: str) -> None:
        get = obj.get
        usage = get("usage")
        if usage is not None:
            if isinstance(usage, dict):
                self.usage_raw = usage
            else:
                self._error(index, f"usage is not an object (got {json_kind(usage)})")
        groq = get("x_groq")
        if groq is not None:
            groq_usage = groq.get("usage") if type(groq) is dict else None
            if type(groq_usage) is dict:
                self.groq_usage = groq_usage
            elif groq_usage is not None:
                self._error(index, f"x_groq.usage is not an object (got {json_kind(groq_usage)})")
        tier = get("service_tier")
        if tier is not None:
            if isinstance(tier, str) and len(tier) <= 32:
                self.service_tier = tier or self.service_tier
            else:
                self._error(index, f"service_tier is not a name (got {json_kind(tier)})")
        error = get("error")
        if self.error is None and (error or isinstance(error, dict)):
            # Several providers send a JSON error after HTTP 200; a bare string is wrapped.
            self.error = error if isinstance(error, dict) else {"message": error}
        cid = get("id")
        if cid and cid != self.completion_id and isinstance(cid, str):
            if self.completion_id is None:
                self.completion_id = cid
            else:
                self.mixed_id_count += 1
        if self._meta_pending:
            self._take_meta(get)
        choices = get("choices")
        if choices is None:
            return
        if type(choices) is not list:
            self._error(index, f"choices is not a list (got {json_kind(choices)})")
            return
        for pos, choice in enumerate(choices):
            self._absorb_choice(choice, pos, index, delta_key)

    def _take_meta(self, get: Any) -> None:
        if self.model is None:
            model = get("model")
            if model and isinstance(model, str):
                self.model = model
        if self.created is None:
            created = get("created")
            if type(created) is int and created > 0:
                self.created = created
        if self.system_fingerprint is None:
            fingerprint = get("system_fingerprint")
            if fingerprint and isinstance(fingerprint, str):
                self.system_fingerprint = fingerprint
        self._meta_pending = (
            self.model is None or self.created is None or self.system_fingerprint is None
        )

    def _absorb_choice(self, choice: Any, pos: int, index: int, delta_key: str) -> None:
        where = f"choices[{pos}]"
        if type(choice) is not dict:
            self._error(index, f"{where} is not an object (got {json_kind(choice)})")
            return
        get = choice.get
        number = get("index")
        if number is None:
            number = 0
        elif type(number) is not int or number < 0:
            self._error(index, f"{where}.index is not a non-negative integer (got {number!r:.40})")
            return
        state = self._choices.get(number)
        if state is None:
            state = self._choices[number] = _ChoiceState()
        delta = get(delta_key)
        if delta:
            if type(delta) is dict:
                self._absorb_delta(state, delta, where + "." + delta_key, index, delta_key)
            else:
                self._error(index, f"{where}.{delta_key} is not an object (got {json_kind(delta)})")
        elif delta is not None and type(delta) is not dict:
            self._error(index, f"{where}.{delta_key} is not an object (got {json_kind(delta)})")
        logprobs = get("logprobs")
        if logprobs is not None:
            self._absorb_logprobs(state, logprobs, where, index)
        finish = get("finish_reason")
        if finish is not None:
            if isinstance(finish, str):
                if finish:
                    state.finish_reason = finish
            else:
                self._error(
                    index, f"{where}.finish_reason is not a string (got {json_kind(finish)})"
                )

    def _absorb_delta(
        self, state: _ChoiceState, delta: dict[str, Any], where: str, index: int, delta_key: str
    ) -> None:
        get = delta.get
        text = get("content")
        if text is not None:
            if isinstance(text, str):
                parts = state.content
                if parts is None:
                    state.content = [text]
                else:
                    parts.append(text)
            elif type(text) is list:
                self._absorb_typed_content(state, text, where, index)
            else:
                self._error(index, f"{where}.content is not a string (got {json_kind(text)})")
            if len(delta) == 1:
                return
        role = get("role")
        if role is not None:
            if not isinstance(role, str):
                self._error(index, f"{where}.role is not a string (got {json_kind(role)})")
            elif role and state.role is None:
                state.role = role
        text = get("refusal")
        if text is not None:
            if isinstance(text, str):
                if state.refusal is None:
                    state.refusal = [text]
                else:
                    state.refusal.append(text)
            else:
                self._error(index, f"{where}.refusal is not a string (got {json_kind(text)})")
        # DeepSeek names the reasoning channel ``reasoning_content``; OpenRouter ``reasoning``.
        key = "reasoning_content"
        text = get(key)
        if text is None:
            key = "reasoning"
            text = get(key)
        if text is not None:
            if isinstance(text, str):
                if state.reasoning is None:
                    state.reasoning = [text]
                else:
                    state.reasoning.append(text)
            else:
                self._error(index, f"{where}.{key} is not a string (got {json_kind(text)})")
        function = get("function_call")
        if function is not None:
            self._absorb_function_call(state, function, where, index)
        calls = get("tool_calls")
        if calls is not None:
            if type(calls) is list:
                for pos, fragment in enumerate(calls):
                    self._absorb_call(
                        state, fragment, f"{where}.tool_calls[{pos}]", pos, index, delta_key
                    )
            else:
                self._error(index, f"{where}.tool_calls is not a list (got {json_kind(calls)})")

    def _absorb_typed_content(
        self, state: _ChoiceState, parts: list[Any], where: str, index: int
    ) -> None:
        """Content as a list of typed chunks (Mistral's reasoning models, Magistral:
        ``{"type": "text", "text"}`` and ``{"type": "thinking", "thinking": [{"type": "text",
        "text"}]}``): text to the content, thinking to the reasoning. A ``reference`` chunk (its
        citation ids) carries no text; any other chunk is a frame error naming it."""
        for pos, part in enumerate(parts):
            at = f"{where}.content[{pos}]"
            kind = part.get("type") if type(part) is dict else None
            if kind == "text" and isinstance(part.get("text"), str):
                target = "content"
                texts = [part["text"]]
            elif kind == "thinking" and type(part.get("thinking")) is list:
                target = "reasoning"
                texts = [
                    inner["text"]
                    for inner in part["thinking"]
                    if type(inner) is dict and isinstance(inner.get("text"), str)
                ]
            elif kind == "reference":
                continue
            else:
                self._error(index, f"{at} is not a text or thinking chunk")
                continue
            held = getattr(state, target)
            if held is None:
                setattr(state, target, list(texts))
            else:
                held.extend(texts)

    def _absorb_call(
        self, state: _ChoiceState, fragment: Any, where: str, pos: int, index: int, delta_key: str
    ) -> None:
        if type(fragment) is not dict:
            self._error(index, f"{where} is not an object (got {json_kind(fragment)})")
            return
        get = fragment.get
        wire = get("index")
        if wire is None:
            # A streamed fragment without an index belongs to call 0 (the only call of providers
            # that omit it); in a whole message the list position is the index.
            wire = 0 if delta_key == "delta" else pos
        elif type(wire) is not int or wire < 0:
            self._error(index, f"{where}.index is not a non-negative integer (got {wire!r:.40})")
            return
        call_id = get("id")
        if call_id is not None and not isinstance(call_id, str):
            self._error(index, f"{where}.id is not a string (got {json_kind(call_id)})")
            call_id = None
        call = state.current_call.get(wire)
        if call is None or (call_id and call.id is not None and call.id != call_id):
            call = _Call(wire, len(state.calls))
            state.calls.append(call)
            state.current_call[wire] = call
        if call_id and call.id is None:
            call.id = call_id
        kind = get("type")
        if kind is not None:
            if not isinstance(kind, str):
                self._error(index, f"{where}.type is not a string (got {json_kind(kind)})")
            elif kind and call.type is None:
                call.type = kind
        function = get("function")
        if function is None:
            return
        if type(function) is not dict:
            self._error(index, f"{where}.function is not an object (got {json_kind(function)})")
            return
        name = function.get("name")
        if name is not None:
            if not isinstance(name, str):
                self._error(index, f"{where}.function.name is not a string (got {json_kind(name)})")
            elif call.name is None:
                call.name = name
            elif name and name != call.name:
                # A name streamed in pieces (the SDK concatenates them); a repeated name is not.
                call.name += name
        arguments = function.get("arguments")
        if arguments is not None:
            if isinstance(arguments, str):
                call.args.append(arguments)
            else:
                self._error(
                    index,
                    f"{where}.function.arguments is not a string (got {json_kind(arguments)})",
                )

    def _absorb_function_call(
        self, state: _ChoiceState, function: Any, where: str, index: int
    ) -> None:
        if type(function) is not dict:
            self._error(
                index, f"{where}.function_call is not an object (got {json_kind(function)})"
            )
            return
        name = function.get("name")
        if name is not None:
            if not isinstance(name, str):
                self._error(index, f"{where}.function_call.name is not a string")
            elif state.function_name is None:
                state.function_name = name
            elif name and name != state.function_name:
                state.function_name += name
        arguments = function.get("arguments")
        if arguments is not None and not isinstance(arguments, str):
            self._error(index, f"{where}.function_call.arguments is not a string")
            arguments = None
        if state.function_args is None:
            state.function_args = []
        if arguments:
            state.function_args.append(arguments)

    def _absorb_logprobs(self, state: _ChoiceState, logprobs: Any, where: str, index: int) -> None:
        if type(logprobs) is not dict:
            self._error(index, f"{where}.logprobs is not an object (got {json_kind(logprobs)})")
            return
        for key in ("content", "refusal"):
            tokens = logprobs.get(key)
            if tokens is None:
                continue
            if type(tokens) is not list:
                self._error(
                    index, f"{where}.logprobs.{key} is not a list (got {json_kind(tokens)})"
                )
                continue
            slot = "lp_content" if key == "content" else "lp_refusal"
            kept = getattr(state, slot)
            if kept is None:
                setattr(state, slot, list(tokens))
            else:
                kept.extend(tokens)

    # -- result -------------------------------------------------------------------------------------

    def finish(self) -> Assembled:
        """The completion as assembled so far; does not change the assembler."""
        choices = []
        for number in sorted(self._choices):
            state = self._choices[number]
            calls = sorted(state.calls, key=lambda call: (call.wire_index, call.seq))
            choices.append(
                Choice(
                    index=number,
                    role=state.role,
                    content=_join(state.content),
                    refusal=_join(state.refusal),
                    reasoning_content=_join(state.reasoning),
                    tool_calls=[
                        ToolCall(pos, call.id, call.type, call.name, "".join(call.args))
                        for pos, call in enumerate(calls)
                    ],
                    finish_reason=state.finish_reason,
                    logprobs_content=None if state.lp_content is None else list(state.lp_content),
                    logprobs_refusal=None if state.lp_refusal is None else list(state.lp_refusal),
                    function_call=(
                        None
                        if state.function_args is None
                        else FunctionCall(state.function_name, "".join(state.function_args))
                    ),
                )
            )
        return Assembled(
            choices=choices,
            usage_raw=self.usage_raw,
            completion_id=self.completion_id,
            model=self.model,
            created=self.created,
            system_fingerprint=self.system_fingerprint,
            error=self.error,
            frame_errors=list(self.frame_errors),
            mixed_id_count=self.mixed_id_count,
            saw_done=self.saw_done,
            chunk_count=self.chunk_count,
            foreign_objects=self.foreign_objects,
            groq_usage=self.groq_usage,
            service_tier=self.service_tier,
            frames_after_done=self.frames_after_done,
            usage_after_done=self.usage_after_done,
        )


_Body = bytes | bytearray | memoryview | str


def assemble_stream(body: _Body | Iterable[_Body]) -> Assembled:
    """Parse and assemble a streamed body, or a list of records each holding one or more events
    (parsed one by one, fed in order, frame positions numbered across records). Never raises."""
    records = [body] if isinstance(body, _Body) else list(body)
    assembler = StreamAssembler()
    next_index = 0
    for start in range(0, len(records), GROUP_RECORDS):
        group = records[start : start + GROUP_RECORDS]
        # Nearly every call: records of one-line ``data:`` events, taken a group at once.
        payloads = _data_payloads(group)
        if payloads is not None:
            next_index = assembler.feed_data(payloads, next_index)
            continue
        for record in group:
            if not isinstance(record, _Body):
                assembler.feed_bad(
                    FrameError(next_index, f"record is not bytes or text (got {json_kind(record)})")
                )
                next_index += 1
                continue
            payloads = _data_payloads([record])
            if payloads is not None:
                next_index = assembler.feed_data(payloads, next_index)
            else:
                next_index = _feed_events(assembler, record, next_index)
    return assembler.finish()


# Records are joined this many at a time, so that a call of many frames is copied a group at a time
# (a call of 30 MiB in 1 kB frames: 2 MiB more while it is assembled, not 60 MiB).
GROUP_RECORDS = 1024


def _data_payloads(records: list[Any]) -> list[bytes] | None:
    """What follows ``data: `` in each event of ``records``, when they are bytes made only of
    ``data: …`` events of one line each, with no CR anywhere, and either every record ends with the
    blank line that closes its last event or none ends with a line end at all (docs/events.md: a
    record is the raw event text, which a gateway may record without its blank line); None for
    anything else.

    Then the SSE parser finds exactly these events, in this order, whether it reads the records one
    by one or joined: each record ends an event (a record's last event is dispatched where the
    record ends), and a raw CR or LF can only be whitespace in JSON (strings escape them), so with
    no CR and no LF but the blank lines that close events, each line is one whole event."""
    try:
        if not records:
            return None
        if all(map(bytes.endswith, records, repeat(b"\n\n"))):
            joined = records[0] if len(records) == 1 else b"".join(records)
        elif any(map(bytes.endswith, records, repeat(b"\n"))):
            return None
        else:
            joined = b"\n\n".join(records) + b"\n\n"
    except TypeError:  # text records, or not bytes at all: the general path
        return None
    if not joined.startswith(b"data: ") or b"\r" in joined:
        return None
    payloads = joined.split(b"\n\ndata: ")
    if joined.count(b"\n") != 2 * len(payloads):
        return None
    payloads[0] = payloads[0][6:]
    payloads[-1] = payloads[-1][:-2]
    return payloads


def _feed_events(assembler: StreamAssembler, record: _Body, next_index: int) -> int:
    """The general path: SSE-parse ``record`` and feed its frames; returns the next frame index."""
    for index, event, data in iter_raw_events(body_text(record), next_index):
        next_index = index + 1
        # Fast path: a plain data event holding a JSON object (nearly every frame).
        if (
            event is None
            and data is not None
            and data[:1] == "{"
            and assembler.feed_json(data, index)
        ):
            continue
        for frame in decode_event(index, event, data):
            assembler.feed(frame)
    return next_index


def assemble_response(body: Any) -> Assembled:
    """Assemble a non-streamed ``chat.completion`` object (or a top-level ``error`` body)."""
    assembler = StreamAssembler()
    if not isinstance(body, dict):
        assembler.feed_bad(FrameError(0, f"not a JSON object (got {json_kind(body)})"))
        return assembler.finish()
    assembler._absorb(body, 0, "message")
    return assembler.finish()
