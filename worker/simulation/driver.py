"""Play simulated calls into Redis the way a busy gateway does: many calls in flight at once.

Each of ``concurrency`` threads owns a ``Publisher`` and keeps up to ``window`` calls in flight; every
iteration advances each of them by one operation (at most ``frames_per_tick`` frame entries) and sends
the lot in one pipeline, so entries of different calls interleave on the notification stream as they
would in production. Frames deferred past a call's close (``late_usage``) are written when due, or
after every thread has finished when they belong at the end of the run.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from worker.contract.keys import Keys
from worker.contract.publisher import Publisher, now_ms
from worker.simulation.calls import SimCall
from worker.simulation.summary import Summary
from worker.simulation.wire import Close, Deferred, Frames, Notify, Op, Open, Response


@dataclass(frozen=True, slots=True)
class PlayReport:
    summary: Summary
    elapsed_seconds: float
    round_trips: int


class _Shared:
    """What the threads share: the call source, the summary, end-of-run frames, the first error."""

    def __init__(self, calls: Iterable[SimCall]) -> None:
        self._calls: Iterator[SimCall] = iter(calls)
        self._lock = threading.Lock()
        self.summary = Summary()
        self.at_end: list[tuple[str, Frames]] = []
        self.round_trips = 0
        self.error: BaseException | None = None
        self.stop = threading.Event()

    def next_call(self) -> SimCall | None:
        with self._lock:
            return next(self._calls, None)

    def finished(self, call: SimCall) -> None:
        with self._lock:
            self.summary.add(call)

    def defer_to_end(self, request_id: str, frames: Frames) -> None:
        with self._lock:
            self.at_end.append((request_id, frames))

    def count_round_trips(self, count: int) -> None:
        with self._lock:
            self.round_trips += count

    def fail(self, error: BaseException) -> None:
        with self._lock:
            if self.error is None:
                self.error = error
        self.stop.set()


def _steps(call: SimCall, frames_per_tick: int) -> deque[Op]:
    """The call's operations with long frame runs split into one slice per round trip."""
    steps: deque[Op] = deque()
    for op in call.ops:
        if isinstance(op, Frames):
            for start in range(0, len(op.entries), frames_per_tick):
                steps.append(Frames(op.entries[start : start + frames_per_tick]))
        else:
            steps.append(op)
    return steps


class _Lane:
    """One thread's share of the run: its publisher, its calls in flight, its delayed frames."""

    def __init__(
        self,
        shared: _Shared,
        client: Any,
        keys: Keys,
        ttl_seconds: int,
        window: int,
        frames_per_tick: int,
        progress: Progress | None,
        task: Any,
    ) -> None:
        self.shared = shared
        self.client = client
        self.keys = keys
        self.publisher = Publisher(client, keys, ttl_seconds=ttl_seconds)
        self.window = window
        self.frames_per_tick = frames_per_tick
        self.progress = progress
        self.task = task
        self.active: list[tuple[SimCall, deque[Op]]] = []
        self.delayed: list[tuple[float, int, str, Frames]] = []
        self.sequence = 0
        self.source_empty = False

    def run(self) -> None:
        try:
            while not self.shared.stop.is_set():
                self._refill()
                now = time.monotonic()
                due = []
                while self.delayed and self.delayed[0][0] <= now:
                    _, _, rid, frames = heapq.heappop(self.delayed)
                    due.append((rid, frames))
                if not self.active and not due:
                    if not self.delayed:
                        return
                    time.sleep(min(0.05, max(0.0, self.delayed[0][0] - now)))
                    continue
                self._tick(due)
        except BaseException as exc:
            self.shared.fail(exc)

    def _refill(self) -> None:
        while not self.source_empty and len(self.active) < self.window:
            call = self.shared.next_call()
            if call is None:
                self.source_empty = True
                return
            self.active.append((call, _steps(call, self.frames_per_tick)))

    def _tick(self, due: list[tuple[str, Frames]]) -> None:
        raw: list[tuple[str, str]] = []
        with self.publisher.batch() as publisher:
            for call, steps in self.active:
                self._apply(publisher, call.request_id, steps.popleft(), raw)
            for request_id, frames in due:
                publisher.frames(request_id, frames.entries)
        round_trips = 1
        if raw:
            # Notifications the publisher would never write; sent after the batch that holds the
            # call's previous operation, so they keep their place in the call's order.
            pipe = self.client.pipeline(transaction=False)
            for request_id, kind in raw:
                fields = {"kind": kind, "request_id": request_id, "ts": now_ms()}
                pipe.xadd(self.keys.events_for(request_id), fields)
            pipe.execute()
            round_trips += 1
        self.shared.count_round_trips(round_trips)
        still = []
        for call, steps in self.active:
            if steps:
                still.append((call, steps))
                continue
            self.shared.finished(call)
            if self.progress is not None:
                self.progress.advance(self.task)
        self.active = still

    def _apply(self, publisher: Publisher, rid: str, op: Op, raw: list[tuple[str, str]]) -> None:
        if isinstance(op, Open):
            publisher.open(op.body, rid)
        elif isinstance(op, Frames):
            publisher.frames(rid, op.entries)
        elif isinstance(op, Response):
            publisher.response(rid, op.status, op.body)
        elif isinstance(op, Close):
            publisher.close(rid, op.reason)
        elif isinstance(op, Notify):
            raw.append((rid, op.kind))
        elif isinstance(op, Deferred):
            if op.delay_ms is None:
                self.shared.defer_to_end(rid, op.frames)
            else:
                self.sequence += 1
                due = time.monotonic() + op.delay_ms / 1000
                heapq.heappush(self.delayed, (due, self.sequence, rid, op.frames))
        else:  # pragma: no cover - the Op union is closed
            raise TypeError(f"unknown operation {op!r}")


def _progress(enabled: bool | None, console: Console | None) -> Progress | None:
    console = console or Console(stderr=True)
    if enabled is None:
        enabled = console.is_terminal
    if not enabled:
        return None
    return Progress(
        TextColumn("simulating"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


def play(
    calls: Iterable[SimCall],
    client: Any,
    keys: Keys | None = None,
    *,
    ttl_seconds: int = 86_400,
    concurrency: int = 4,
    window: int = 32,
    frames_per_tick: int = 16,
    progress: bool | None = None,
    total: int | None = None,
    console: Console | None = None,
) -> PlayReport:
    """Publish ``calls`` through ``concurrency`` threads; returns when every entry is written.

    ``client`` is a ``redis.Redis`` (shared: its connection pool is thread-safe). ``progress`` shows a
    rich bar on stderr: True forces it, None shows it when stderr is a terminal. The first error in any
    thread stops them all and is raised here; what was written so far stays written.
    """
    if concurrency < 1 or window < 1 or frames_per_tick < 1:
        raise ValueError("concurrency, window and frames_per_tick must be at least 1")
    keys = keys or Keys()
    shared = _Shared(calls)
    bar = _progress(progress, console)
    task = bar.add_task("calls", total=total) if bar is not None else None
    started = time.monotonic()
    lanes = [
        _Lane(shared, client, keys, ttl_seconds, window, frames_per_tick, bar, task)
        for _ in range(concurrency)
    ]
    threads = [threading.Thread(target=lane.run, name=f"sim-{i}") for i, lane in enumerate(lanes)]
    if bar is not None:
        bar.start()
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)
    except BaseException:
        shared.stop.set()
        for thread in threads:
            thread.join()
        raise
    finally:
        if bar is not None:
            bar.stop()
    if shared.error is not None:
        raise shared.error
    if shared.at_end:
        publisher = Publisher(client, keys, ttl_seconds=ttl_seconds)
        with publisher.batch():
            for request_id, frames in shared.at_end:
                publisher.frames(request_id, frames.entries)
        shared.count_round_trips(1)
    return PlayReport(shared.summary, time.monotonic() - started, shared.round_trips)
