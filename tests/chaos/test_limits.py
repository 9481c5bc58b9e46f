"""Size limits through the real consumer (a process of its own, so its peak memory is its own).

Each hostile call must end in the dead-letter stream with a reason that names the limit, never
crash the consumer, and never make it hold much more than the limits allow: the consumer sizes a
call's stream before reading it (``XLEN``, ``MEMORY USAGE``), so a stream of a million entries or of
one huge entry is refused unread, and it reads no more streams at once than its byte budget allows.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import orjson
import pytest
import redis

from worker.config import Settings
from worker.contract.entries import MAX_CALL_BYTES, MAX_ENTRIES, MAX_ENTRY_BYTES
from worker.contract.keys import Keys

from .fleet import REPO, worker_env
from .fuzzing import meta

pytestmark = [pytest.mark.chaos, pytest.mark.postgres]

DEEP = 100_000


def run_consumer(env: dict[str, str]) -> dict:
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("consumer_probe.py"))],
        env={**env, "PATH": "/usr/bin:/bin"},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def publish(client: redis.Redis, keys: Keys, rid: str, request: bytes, entries, close=True) -> None:
    key = keys.request(rid)
    pipe = client.pipeline(transaction=False)
    pipe.xadd(key, {"kind": "request", "body": request})
    pipe.xadd(keys.events(), {"kind": "open", "request_id": rid, "ts": 1})
    for number, fields in enumerate(entries, start=1):
        pipe.xadd(key, fields)
        if number % 10_000 == 0:
            pipe.execute()
    if close:
        pipe.xadd(keys.events(), {"kind": "close", "request_id": rid, "ts": 2, "reason": "done"})
    pipe.execute()


def frame(body: bytes) -> dict[str, bytes]:
    return {"kind": b"frame", "body": body}


def test_orjson_refuses_deep_nesting() -> None:
    with pytest.raises(orjson.JSONDecodeError, match="depth limit"):
        orjson.loads(b"[" * DEEP + b"]" * DEEP)


def cases(scale) -> dict[str, tuple[str, object, object, int]]:
    """name -> (reason the dead letter must give, request body, entries, memory bound in MB)."""
    tiny = scale.pick(200_000, 1_000_000)
    deep = b"[" * DEEP + b"]" * DEEP
    return {
        "oversized_entry": (
            f"larger than {MAX_ENTRY_BYTES} bytes",
            meta("big_entry"),
            [frame(b"data: " + b"x" * (MAX_ENTRY_BYTES + 1))],
            64,
        ),
        "oversized_call": (
            f"call stream larger than {MAX_CALL_BYTES} bytes",
            meta("big_call"),
            [frame(b"x" * MAX_ENTRY_BYTES) for _ in range(40)],
            256,
        ),
        "huge_entry": (
            "call stream larger than the limits",
            meta("huge_entry"),
            [frame(b"data: " + b"x" * (50 << 20))],
            16,
        ),
        "deep_json_request": ("unparsable metadata", deep, [frame(b"data: [DONE]")], 64),
        "deep_json_response": (
            "response body is not JSON",
            meta("deep_response", stream=False),
            [{"kind": b"response", "status": b"200", "body": deep}],
            64,
        ),
        "million_tiny_frames": (
            f"more than {MAX_ENTRIES} entries",
            meta("tiny_frames"),
            ({"kind": b"frame", "body": b"data: {}"} for _ in range(tiny)),
            160,
        ),
    }


@pytest.mark.parametrize(
    "case",
    [
        "oversized_entry",
        "oversized_call",
        "huge_entry",
        "deep_json_request",
        "deep_json_response",
        "million_tiny_frames",
    ],
)
def test_size_limit_is_a_dead_letter(case, scale, private_redis, private_pg, record) -> None:
    reason, request, entries, bound_mb = cases(scale)[case]
    prefix = f"chaos-limit-{uuid.uuid4().hex[:6]}"
    keys = Keys(prefix)
    client = private_redis.client()
    rid = "req_deep_request" if case == "deep_json_request" else orjson.loads(request)["request_id"]
    publish(client, keys, rid, request, entries)
    database = private_pg.create_database(f"chaos_limit_{uuid.uuid4().hex[:6]}")
    env = worker_env(private_redis.url(), private_redis.url(1), database, prefix)
    report = run_consumer(env)
    letters = client.xrange(keys.dead, "-", "+")
    mine = [f for _id, f in letters if f.get(b"orig.request_id") == rid.encode()]
    record.append(_Line(case, report, mine))
    assert mine, f"no dead letter for {case}: {report}"
    assert all(reason in f[b"reason"].decode() for f in mine), [f[b"reason"] for f in mine]
    assert all(not any(b"body" in k for k in f) for f in mine), "a dead letter copied a body"
    assert report["peak_delta_mb"] < bound_mb, report
    client.delete(keys.request(rid))


def test_deep_json_frame_is_a_bad_frame_not_a_crash(scale, private_redis, private_pg, record):
    """100k nested arrays in one data frame: orjson refuses it, the frame counts as bad and the
    call is reconciled (unsettled: it never finished), not dead-lettered."""
    prefix = f"chaos-limit-{uuid.uuid4().hex[:6]}"
    keys = Keys(prefix)
    client = private_redis.client()
    deep = b"data: " + b"[" * DEEP + b"]" * DEEP + b"\n\n"
    publish(client, keys, "deep_frame", meta("deep_frame"), [frame(deep)])
    database = private_pg.create_database(f"chaos_limit_{uuid.uuid4().hex[:6]}")
    report = run_consumer(worker_env(private_redis.url(), private_redis.url(1), database, prefix))
    record.append(_Line("deep_json_frame", report, []))
    assert report["unsettled"] == 1 and report["dead"] == 0, report
    assert report["peak_delta_mb"] < 64, report


class _Line:
    def __init__(self, case: str, report: dict, letters: list) -> None:
        self.case, self.report, self.letters = case, report, letters

    def line(self) -> str:
        reasons = sorted({f[b"reason"].decode()[:70] for f in self.letters})
        return (
            f"limit {self.case:<20} baseline_rss={self.report['baseline_mb']}MB "
            f"peak_rss_delta={self.report['peak_delta_mb']}MB "
            f"consumer_time={self.report['seconds']}s dead_letters={len(self.letters)} "
            f"reasons={reasons}"
        )


def big_call_frames(total_bytes: int, frame_bytes: int = 1000) -> list[dict[str, bytes]]:
    """A call streamed as ``total_bytes`` of content frames (each about ``frame_bytes``), then the
    finish, the usage frame and ``[DONE]``: within every limit when ``total_bytes`` is."""
    words = "the quick brown fox jumps over the lazy dog, "
    text = (words * (frame_bytes // len(words)))[: frame_bytes - 64]
    chunk = orjson.dumps({"choices": [{"index": 0, "delta": {"content": text}}]})
    body = b"data: " + chunk + b"\n\n"
    frames = [frame(body) for _ in range(total_bytes // len(body))]
    finish = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    usage = {
        "choices": [],
        "usage": {"prompt_tokens": 3, "completion_tokens": 9, "total_tokens": 12},
    }
    for tail in (orjson.dumps(finish), orjson.dumps(usage), b"[DONE]"):
        frames.append(frame(b"data: " + tail + b"\n\n"))
    return frames


def test_peak_memory_of_large_calls(scale, private_redis, private_pg, record) -> None:
    """Twenty calls each just within the byte limit, and one stream of a million entries (short:
    twenty of 1 MiB under a 2 MiB budget, and 100,000 entries), drained by a real consumer process:
    every call settles or is refused, and the process's peak memory stays within a few batch
    budgets (the batch being applied, the one read ahead), not the sum of the calls.

    Measured at full size on a 2-core machine: 1,738 MB above the baseline before the budget,
    208 MB with it (``BILLING_BATCH_BYTES`` 64 MiB)."""
    calls = 20
    call_bytes = scale.pick(1 << 20, 30 << 20)
    tiny = scale.pick(100_000, 1_000_000)
    budget = scale.pick(2 << 20, Settings().batch_bytes)
    prefix = f"chaos-memory-{uuid.uuid4().hex[:6]}"
    keys = Keys(prefix)
    client = private_redis.client()
    frames = big_call_frames(call_bytes)
    for number in range(calls):
        rid = f"big_{number}"
        publish(client, keys, rid, meta(rid), frames)
    tiny_frames = ({"kind": b"frame", "body": b"data: {}"} for _ in range(tiny))
    publish(client, keys, "tiny_frames", meta("tiny_frames"), tiny_frames)
    del frames
    database = private_pg.create_database(f"chaos_memory_{uuid.uuid4().hex[:6]}")
    env = worker_env(private_redis.url(), private_redis.url(1), database, prefix)
    report = run_consumer({**env, "BILLING_BATCH_BYTES": str(budget)})
    letters = client.xrange(keys.dead, "-", "+")
    mine = [fields for _id, fields in letters]
    record.append(_Line(f"memory {calls}x{call_bytes >> 20}MiB+{tiny}", report, mine))
    assert report["settled"] == calls, report
    assert report["dead"] == 1 and letters, report
    assert f"more than {MAX_ENTRIES} entries" in letters[0][1][b"reason"].decode()
    assert report["peak_delta_mb"] < 4 * budget / (1 << 20) + 64, report
