"""Inputs for fuzzing the wire: a seed corpus, mutations, and the one target every fuzzer calls.

The target is the consumer's own path from Redis entries to a result (``reconcile_record``: decode
the call's entries, parse the SSE frames, assemble, reconcile, price). It must end every input in a
``Result`` or an ``InputError`` (which the consumer turns into a dead letter with its reason), and
within ``BOUND_SECONDS``: anything else, or a hang, is a failure.
"""

from __future__ import annotations

import json
import random
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson

from worker.consumer.reconciling import reconcile_record
from worker.core.errors import InputError
from worker.core.prices import PriceBook, load_price_book
from worker.core.result import Outcome, Result
from worker.simulation.calls import plan
from worker.simulation.faults import parse_faults
from worker.simulation.wire import Frames, Open, Response

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "streams"
BOUND_SECONDS = 5.0
BOOK: PriceBook = load_price_book()


class Hang(Exception):
    """An input ran past the time bound."""


@contextmanager
def time_bound(seconds: float) -> Iterator[None]:
    """Raise ``Hang`` in this (main) thread if the block runs longer than ``seconds``."""

    def expire(_signum: int, _frame: object) -> None:
        raise Hang(f"input ran longer than {seconds}s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def meta(request_id: str = "req_fuzz", *, stream: bool = True, **fields: object) -> bytes:
    body = {
        "request_id": request_id,
        "account_id": "acct_fuzz",
        "model": "gpt-4o",
        "stream": stream,
        "include_usage": True,
        "reserved_micros": 5000,
        "created_at": "2025-07-01T00:00:00Z",
        "messages": [{"role": "user", "content": "hello there"}],
    }
    body.update(fields)
    return json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")


Entries = list[tuple[bytes, dict[bytes, bytes]]]


def streamed_entries(frames: list[bytes], request: bytes | None = None) -> Entries:
    entries: Entries = [(b"1-0", {b"kind": b"request", b"body": request or meta()})]
    for i, frame in enumerate(frames, start=1):
        entries.append((f"1-{i}".encode(), {b"kind": b"frame", b"body": frame}))
    return entries


def response_entries(status: bytes, body: bytes, request: bytes | None = None) -> Entries:
    return [
        (b"1-0", {b"kind": b"request", b"body": request or meta(stream=False)}),
        (b"1-1", {b"kind": b"response", b"status": status, b"body": body}),
    ]


def atheris_entries(data: bytes) -> Entries:
    """The entries one atheris input stands for: its first byte picks the request's n, usage flag and
    whether the call is non-streamed (high bit: a response whose status is picked by the low bits);
    the rest, split on NUL, is the frame entries (or the response body)."""
    head = data[:1][0] if data else 0
    parts = data[1:].split(b"\x00")
    if head & 0x80:
        return response_entries(str(200 + (head & 0x3) * 100).encode(), parts[0])
    request = meta(n=1 + (head & 0x3) % 3, include_usage=bool(head & 0x4))
    return streamed_entries(parts, request)


def target(entries: Entries) -> str:
    """Run one input through the consumer's path; returns ``result:<outcome>`` or ``input_error``."""
    try:
        result = reconcile_record(entries, "req_fuzz", BOOK)
    except InputError as exc:
        assert str(exc), "an InputError must carry a reason (it becomes the dead letter's)"
        return "input_error"
    assert isinstance(result, Result)
    assert result.outcome in tuple(Outcome)
    assert result.charge_micros is None or int(result.charge_micros) >= 0
    return f"result:{result.outcome}"


def corpus(calls: int = 150, seed: int = 11) -> tuple[list[list[bytes]], list[bytes]]:
    """Seed inputs: the recorded fixture streams and the frames and bodies of simulated calls."""
    streams: list[list[bytes]] = [[path.read_bytes()] for path in sorted(FIXTURES.glob("*.sse"))]
    bodies: list[bytes] = []
    for call in plan(calls, seed, parse_faults("default"), run_id="fuzz"):
        frames: list[bytes] = []
        for op in call.ops:
            if isinstance(op, Frames):
                frames.extend(entry.encode() for entry in op.entries)
            elif isinstance(op, Response):
                bodies.append(op.body)
            elif isinstance(op, Open):
                pass
        if frames:
            streams.append(frames)
    return streams, bodies


_ODD_VALUES: tuple[object, ...] = (
    None, True, -1, 0, 2**63, -(2**63), 1e308, -0.0, "", "x" * 1000, [], {}, [None], {"a": []},
    "\u0000", "\ud800", 3.5, "stop", "error", "length", 99999999999999999999,
)  # fmt: skip
_SNIPPETS = (
    b"\n\n", b"\r\n", b"\r", b"data: ", b"data:", b"event: error\n", b": ping\n", b"[DONE]",
    b"data: [DONE]\n\n", b"{", b"}", b"[", b"]", b'"', b"\\", b"\xff\xfe", b"\xc3", b"\x00",
    b'"finish_reason":"stop"', b'"usage":{"prompt_tokens":-5}', b'"index":1000000',
    b'"choices":[]', b'"error":{"message":"x"}', "\ufeff".encode(), b"id: 7\nretry: 1\n",
)  # fmt: skip


def _mutate_json(rng: random.Random, frame: bytes) -> bytes:
    """Replace one value somewhere in a ``data: {...}`` frame with a value of another type."""
    text = frame.decode(errors="replace")
    start = text.find("{")
    end = text.rfind("}")
    if start < 0 or end <= start:
        return frame
    try:
        obj = orjson.loads(text[start : end + 1])
    except orjson.JSONDecodeError:
        return frame
    node = obj
    for _ in range(rng.randint(1, 4)):
        if isinstance(node, dict) and node:
            key = rng.choice(list(node))
            if rng.random() < 0.5 or not isinstance(node[key], dict | list):
                node[key] = rng.choice(_ODD_VALUES)
                break
            node = node[key]
        elif isinstance(node, list) and node:
            index = rng.randrange(len(node))
            if rng.random() < 0.5 or not isinstance(node[index], dict | list):
                node[index] = rng.choice(_ODD_VALUES)
                break
            node = node[index]
        else:
            break
    try:
        dumped = orjson.dumps(obj)
    except (TypeError, orjson.JSONEncodeError):
        return frame
    return text[:start].encode() + dumped + text[end + 1 :].encode(errors="surrogateescape")


def mutate(rng: random.Random, frames: list[bytes], pool: list[list[bytes]]) -> list[bytes]:
    """A few random edits of a call's frame entries (bytes, structure, JSON values, splices)."""
    frames = list(frames) or [b""]
    for _ in range(rng.randint(1, 6)):
        frames = frames or [b""]
        i = rng.randrange(len(frames))
        frame = frames[i]
        op = rng.randrange(12)
        if op == 0 and frame:
            pos = rng.randrange(len(frame))
            frame = frame[:pos] + bytes([frame[pos] ^ (1 << rng.randrange(8))]) + frame[pos + 1 :]
        elif op == 1:
            pos = rng.randint(0, len(frame))
            frame = frame[:pos] + rng.choice(_SNIPPETS) + frame[pos:]
        elif op == 2 and frame:
            a = rng.randrange(len(frame))
            frame = frame[:a] + frame[a + rng.randint(1, 64) :]
        elif op == 3:
            frame = frame[: rng.randint(0, len(frame))]
        elif op == 4:
            frames.insert(i, frame)
        elif op == 5 and len(frames) > 1:
            del frames[i]
        elif op == 6 and len(frames) > 1:
            j = rng.randrange(len(frames))
            frames[i], frames[j] = frames[j], frames[i]
        elif op == 7:
            other = rng.choice(pool)
            cut = rng.randint(0, len(frames))
            frames = frames[:cut] + other[rng.randint(0, len(other)) :]
            continue
        elif op == 8:
            frame = _mutate_json(rng, frame)
        elif op == 9:
            depth = rng.choice((10, 1000, 5000, 100_000))
            frame = b"data: " + b"[" * depth + b"]" * depth + b"\n\n"
        elif op == 10:
            frame = frame.replace(b"\n", rng.choice((b"\r\n", b"\r", b"", b"\n\n\n")))
        else:
            frame = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 40)))
        if frames:
            frames[min(i, len(frames) - 1)] = frame
        else:
            frames = [frame]
    return frames or [b""]
