"""Rendering a conversation as a provider would send it: SSE chunks for a stream (bent by a fault),
or one ``chat.completion`` body.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import orjson

from worker.core.result import Usage
from worker.simulation.conversation import MISTRAL, OPENAI, VLLM, Choice, Conversation
from worker.simulation.faults import (
    DROPPED_CONNECTION,
    ERROR_FINISH,
    ERROR_OBJECT,
    LATE_USAGE,
    MISSING_USAGE,
)
from worker.simulation.wire import DONE, ChunkHeader, choice_delta, sse

# Faults that cut or break a stream: cumulative usage on every chunk would contradict them.
_BROKEN = frozenset({ERROR_FINISH, DROPPED_CONNECTION, MISSING_USAGE, ERROR_OBJECT, LATE_USAGE})


def _interleave(rng: random.Random, choices: list[Choice]) -> list[tuple[int, dict | None]]:
    """Deltas of all choices in arrival order; ``None`` marks a choice's finish chunk."""
    if len(choices) == 1:
        return [(0, d) for d in choices[0].deltas] + [(0, None)]
    position = {c.index: 0 for c in choices}
    by_index = {c.index: c for c in choices}
    items: list[tuple[int, dict | None]] = []
    while position:
        index = rng.choice(sorted(position))
        choice = by_index[index]
        items.append((index, choice.deltas[position[index]]))
        position[index] += 1
        if position[index] == len(choice.deltas):
            items.append((index, None))
            del position[index]
    return items


@dataclass(slots=True)
class StreamWire:
    """The SSE events of one streamed call, and what they add up to."""

    events: list[str]
    finished: bool
    errored: bool
    usage: Usage | None  # the final usage block among ``events``
    late_entry: str | None = None  # written after the close (late_usage)


def stream_wire(
    rng: random.Random,
    conv: Conversation,
    completion_id: str,
    *,
    include_usage: bool,
    fault: str | None,
    cut: bool,
) -> StreamWire:
    placement = conv.placement
    cut = cut or fault in (ERROR_FINISH, ERROR_OBJECT)
    if placement == VLLM and (fault in _BROKEN or cut):
        placement = OPENAI
    usage_wanted = include_usage and fault not in (MISSING_USAGE, LATE_USAGE)
    header = ChunkHeader(
        completion_id,
        int(conv.created_at.timestamp()),
        conv.model.served,
        conv.fingerprint,
        "default" if conv.model.openai else None,
        usage_null=include_usage and conv.model.openai,
    )
    cumulative = placement == VLLM and include_usage
    events: list[str] = []
    shown = 0

    def running() -> dict[str, Any] | None:
        return conv.usage_block(shown) if cumulative else None

    for choice in conv.choices:
        events.append(header.chunk([choice_delta(choice.index, choice.role_delta)], running()))
    items = _interleave(rng, conv.choices)
    stop = len(items)
    if cut:
        first_finish = next(i for i, (_, d) in enumerate(items) if d is None)
        stop = rng.randint(1, first_finish) if first_finish else 0
    finishes_left = len(conv.choices)
    for choice_index, delta in items[:stop]:
        if delta is None:
            finishes_left -= 1
            reason = conv.choices[choice_index].finish_reason
            usage = running()
            if placement == MISTRAL and usage_wanted and not finishes_left:
                usage = conv.usage_block()
            events.append(header.chunk([choice_delta(choice_index, {}, reason)], usage))
        else:
            shown += 1
            events.append(header.chunk([choice_delta(choice_index, delta)], running()))
    if fault == ERROR_OBJECT:
        error = {"message": "The server had an error while processing your request. Sorry!",
                 "type": "server_error", "param": None, "code": None}  # fmt: skip
        events.append(sse({"error": error}))
        return StreamWire(events, finished=False, errored=True, usage=None)
    if fault == ERROR_FINISH:
        with_usage = include_usage and rng.random() < 0.2
        for index in range(len(conv.choices)):  # the cut came before any finish
            events.append(header.chunk([choice_delta(index, {}, "error")]))
        if with_usage:
            events.append(header.chunk([], conv.usage_block(shown)))
        events.append(DONE)
        return StreamWire(events, False, True, conv.usage(shown) if with_usage else None)
    if cut:  # dropped connection or a gateway crash: the stream just stops
        return StreamWire(events, finished=False, errored=False, usage=None)
    if fault == LATE_USAGE:
        late = header.chunk([], conv.usage_block()) + DONE
        return StreamWire(events, True, False, conv.usage(), late_entry=late)
    reported = None
    if usage_wanted:
        reported = conv.usage()
        if placement != MISTRAL:
            events.append(header.chunk([], conv.usage_block()))
    events.append(DONE)
    return StreamWire(events, finished=True, errored=False, usage=reported)


def response_body(conv: Conversation, completion_id: str) -> bytes:
    body: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(conv.created_at.timestamp()),
        "model": conv.model.served,
        "choices": [
            {
                "index": c.index,
                "message": c.message,
                "logprobs": None,
                "finish_reason": c.finish_reason,
            }
            for c in conv.choices
        ],
        "usage": conv.usage_block(),
    }
    if conv.model.openai:
        body["service_tier"] = "default"
    body["system_fingerprint"] = conv.fingerprint
    return orjson.dumps(body)
