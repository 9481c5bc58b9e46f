"""The gateway side of a chaos run: simulated calls published at a chosen rate, through faults.

``paced`` turns a plan into a timed source for ``worker.simulation.driver.play`` (the driver pulls
calls under a lock, so sleeping in the source paces every publishing thread). ``GatedClient`` lets a
fault pause the gateway while Redis restarts: a real gateway buffers or retries; here every pipeline
waits at the gate, so no write is half-sent and then repeated (a repeated frame entry is not one of
the faults the contract allows). ``play_shuffled`` writes each call's entries in order and its
notifications twice and shuffled (a close before its open, an open after its close).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from worker.contract.keys import Keys
from worker.contract.publisher import now_ms
from worker.simulation.calls import SimCall
from worker.simulation.wire import Close, Deferred, Frames, Notify, Open, Response


def paced(calls: Iterable[SimCall], rate: Callable[[float], float]) -> Iterator[SimCall]:
    """Yield calls so that about ``rate(elapsed_seconds)`` of them start per second."""
    started = time.monotonic()
    budget = 0.0
    last = started
    for call in calls:
        while budget < 1.0:
            now = time.monotonic()
            budget += (now - last) * rate(now - started)
            last = now
            if budget < 1.0:
                time.sleep(0.005)
        budget -= 1.0
        yield call


class Gate:
    """Many publishers may pass at once; a fault closes it and waits until none is inside."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._inside = 0
        self._closed = False

    @contextmanager
    def passage(self) -> Iterator[None]:
        with self._cond:
            while self._closed:
                self._cond.wait()
            self._inside += 1
        try:
            yield
        finally:
            with self._cond:
                self._inside -= 1
                self._cond.notify_all()

    @contextmanager
    def closed(self) -> Iterator[None]:
        with self._cond:
            self._closed = True
            while self._inside:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._closed = False
                self._cond.notify_all()


class _GatedPipeline:
    def __init__(self, pipe: Any, gate: Gate) -> None:
        self._pipe = pipe
        self._gate = gate

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pipe, name)

    def execute(self) -> Any:
        with self._gate.passage():
            return self._pipe.execute()


class GatedClient:
    """A ``redis.Redis`` whose pipelines pass through a ``Gate`` (all the driver uses)."""

    def __init__(self, client: Any, gate: Gate) -> None:
        self._client = client
        self.gate = gate

    def pipeline(self, transaction: bool = False) -> _GatedPipeline:
        return _GatedPipeline(self._client.pipeline(transaction=transaction), self.gate)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def _stream_commands(pipe: Any, keys: Keys, call: SimCall, ttl: int) -> list[str]:
    """Queue the call's stream entries in order; return its notifications in gateway order."""
    key = keys.request(call.request_id)
    notes: list[str] = []
    for op in call.ops:
        if isinstance(op, Open):
            pipe.xadd(key, {"kind": "request", "body": op.body})
            pipe.expire(key, ttl)
            notes.append("open")
        elif isinstance(op, Frames):
            for entry in op.entries:
                pipe.xadd(key, {"kind": "frame", "body": entry})
        elif isinstance(op, Response):
            pipe.xadd(key, {"kind": "response", "status": op.status, "body": op.body})
        elif isinstance(op, Close):
            notes.append(f"close:{op.reason}")
        elif isinstance(op, Notify):
            notes.append(op.kind)
    return notes


def _notify(pipe: Any, keys: Keys, request_id: str, note: str) -> None:
    kind, _, reason = note.partition(":")
    fields: dict[str, Any] = {"kind": kind, "request_id": request_id, "ts": now_ms()}
    if reason:
        fields["reason"] = reason
    pipe.xadd(keys.events_for(request_id), fields)


def play_shuffled(
    calls: Iterable[SimCall],
    client: Any,
    keys: Keys,
    *,
    twice: bool,
    seed: int,
    batch: int = 25,
    ttl: int = 86_400,
) -> dict[str, int]:
    """Publish calls in batches; with ``twice`` every notification is sent twice, in shuffled order.

    Each call's stream is complete before any of its notifications is written (the contract allows a
    close to overtake its open, never to overtake the call's own entries). With ``twice``, half of a
    call's shuffled notifications go out with its entries and the rest up to three batches later.
    Late usage frames are written at the end of the run, after every notification, in both modes,
    so a clean run and a shuffled one differ only in delivery.
    """
    rng = random.Random(seed)
    pending: list[tuple[int, str, str]] = []
    late: list[tuple[str, Frames]] = []
    counts = {"notifications": 0, "close_before_open": 0}
    source = iter(calls)
    number = 0
    while True:
        chunk = [call for _, call in zip(range(batch), source, strict=False)]
        if not chunk and not pending:
            break
        pipe = client.pipeline(transaction=False)
        for call in chunk:
            notes = _stream_commands(pipe, keys, call, ttl)
            late.extend((call.request_id, op.frames) for op in call.ops if isinstance(op, Deferred))
            if twice:
                notes = notes + notes
                rng.shuffle(notes)
                kinds = [note.split(":")[0] for note in notes]
                if (
                    "open" in kinds
                    and "close" in kinds
                    and kinds.index("close") < kinds.index("open")
                ):
                    counts["close_before_open"] += 1
                half = len(notes) // 2
                for note in notes[:half]:
                    _notify(pipe, keys, call.request_id, note)
                for note in notes[half:]:
                    pending.append((number + rng.randint(0, 3), call.request_id, note))
            else:
                for note in notes:
                    _notify(pipe, keys, call.request_id, note)
            counts["notifications"] += len(notes)
        due = [item for item in pending if item[0] <= number or not chunk]
        pending = [item for item in pending if item[0] > number and chunk]
        for _, request_id, note in due:
            _notify(pipe, keys, request_id, note)
        pipe.execute()
        number += 1
    pipe = client.pipeline(transaction=False)
    for request_id, frames in late:
        for entry in frames.entries:
            pipe.xadd(keys.request(request_id), {"kind": "frame", "body": entry})
    pipe.execute()
    return counts
