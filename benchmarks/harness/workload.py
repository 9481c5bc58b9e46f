"""Workloads: realistic calls from the gateway simulator, and tiny calls for long runs.

Realistic calls come from ``worker.simulation.plan`` with the default fault mix (tool calls, n > 1,
reported, estimated and missing usage, dropped streams, duplicates, crashes, late usage, HTTP errors),
fixed by a seed, and are written through the simulator's threaded driver, so the entries of many
calls interleave on the notification stream as they do behind a busy gateway. Tiny calls (three
content frames and a usage frame) are for the runs that need a million calls and care only that the
worker keeps up and keeps its memory.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import redis

from worker.contract.keys import Keys
from worker.contract.publisher import Publisher, now_ms
from worker.core.errors import RequestMetaError
from worker.core.request import RequestMeta, parse_request
from worker.simulation import SimCall, parse_faults, plan, play
from worker.simulation.wire import Close, Deferred, Frames, Notify, Open, Response

SEED = 20260509
FAULTS = "default"


@dataclass(frozen=True, slots=True)
class Workload:
    """What a set of calls puts into Redis, counted from the plan (not from the server)."""

    calls: int
    closed: int  # calls with a close notification: the ones a drain reconciles
    notifications: int
    frames: int  # frame entries in the streams of closed calls
    frames_written: int  # frame entries of every call
    entries: int  # every stream entry, request entries included


def simulated_calls(count: int, run_id: str, seed: int = SEED) -> list[SimCall]:
    return plan(count, seed, parse_faults(FAULTS), run_id=run_id)


def streamed_calls(count: int) -> list[tuple[RequestMeta, list[bytes]]]:
    """The simulator's streamed calls (default fault mix) with their metadata and frame records."""
    calls = []
    for call in simulated_calls(count, run_id="assembly"):
        opens = [op.body for op in call.ops if isinstance(op, Open)]
        if not opens or any(isinstance(op, Response) for op in call.ops):
            continue
        try:
            meta = parse_request(opens[0])
        except RequestMetaError:
            continue  # a fault of the mix: metadata the consumer dead-letters
        frames = [
            entry if isinstance(entry, bytes) else entry.encode()
            for op in call.ops
            if isinstance(op, Frames)
            for entry in op.entries
        ]
        calls.append((meta, frames))
    return calls


def measure(calls: Iterable[SimCall]) -> Workload:
    total = closed = notifications = frames = written = entries = 0
    for call in calls:
        total += 1
        call_frames = 0
        closing = False
        for op in call.ops:
            if isinstance(op, Open):
                notifications += 1
                entries += 1
            elif isinstance(op, Frames):
                call_frames += len(op.entries)
            elif isinstance(op, Deferred):
                call_frames += len(op.frames.entries)
            elif isinstance(op, Response):
                entries += 1
            elif isinstance(op, Close):
                notifications += 1
                closing = True
            elif isinstance(op, Notify):
                notifications += 1
                closing = closing or op.kind == "close"
        entries += call_frames
        written += call_frames
        if closing:
            closed += 1
            frames += call_frames
    return Workload(total, closed, notifications, frames, written, entries)


def publish(calls: Sequence[SimCall], client: redis.Redis, keys: Keys) -> float:
    """Write every call with the simulator's driver; returns the seconds it took."""
    report = play(calls, client, keys, concurrency=2, window=32, progress=False)
    return report.elapsed_seconds


def write_call(client: redis.Redis, publisher: Publisher, keys: Keys, call: SimCall) -> None:
    """Write one whole call at once (open, frames, close, late frames) in one or two round trips."""
    raw: list[str] = []
    with publisher.batch() as batch:
        for op in call.ops:
            if isinstance(op, Open):
                batch.open(op.body, call.request_id)
            elif isinstance(op, Frames):
                batch.frames(call.request_id, op.entries)
            elif isinstance(op, Response):
                batch.response(call.request_id, op.status, op.body)
            elif isinstance(op, Close):
                batch.close(call.request_id, op.reason)
            elif isinstance(op, Deferred):
                batch.frames(call.request_id, op.frames.entries)
            elif isinstance(op, Notify):
                raw.append(op.kind)
    if raw:
        pipe = client.pipeline(transaction=False)
        for kind in raw:
            fields = {"kind": kind, "request_id": call.request_id, "ts": now_ms()}
            pipe.xadd(keys.events_for(call.request_id), fields)
        pipe.execute()


# -- tiny calls ------------------------------------------------------------------------------------


def _chunk(number: int, choices: list[dict[str, Any]], **extra: Any) -> bytes:
    top = {"id": f"chatcmpl-{number}", "object": "chat.completion.chunk", "model": "gpt-4o"}
    return b"data: " + orjson.dumps({**top, "choices": choices, **extra})


def tiny_frames(number: int) -> list[bytes]:
    delta = {"role": "assistant", "content": "Hi there."}
    return [
        _chunk(number, [{"index": 0, "delta": delta, "finish_reason": None}]),
        _chunk(number, [{"index": 0, "delta": {}, "finish_reason": "stop"}]),
        _chunk(number, [], usage={"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}),
        b"data: [DONE]",
    ]


def tiny_meta(request_id: str, number: int) -> bytes:
    return orjson.dumps(
        {
            "request_id": request_id,
            "account_id": f"acct_{number % 50}",
            "model": "gpt-4o",
            "stream": True,
            "include_usage": True,
            "reserved_micros": 1000,
            "created_at": "2026-01-15T12:00:00Z",
            "messages": [{"role": "user", "content": "Say hi."}],
        }
    )


def publish_tiny(
    client: redis.Redis, keys: Keys, run_id: str, start: int, stop: int, per_trip: int = 500
) -> float:
    """Write tiny calls ``start``..``stop - 1`` (open, 4 frame entries, close); returns seconds."""
    publisher = Publisher(client, keys)
    began = time.perf_counter()
    for first in range(start, stop, per_trip):
        with publisher.batch() as batch:
            for number in range(first, min(stop, first + per_trip)):
                rid = f"tiny_{run_id}_{number:08d}"
                batch.open(tiny_meta(rid, number), rid)
                batch.frames(rid, tiny_frames(number))
                batch.close(rid)
    return time.perf_counter() - began


TINY_FRAMES = 4
TINY_NOTIFICATIONS = 2
