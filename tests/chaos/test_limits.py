"""Size limits through the real consumer (a process of its own, so its peak memory is its own).

Each hostile call must end in the dead-letter stream with a reason that names the limit, never
crash the consumer, and never make it hold much more than the limits allow: the consumer reads a
call with ``XRANGE … COUNT MAX_ENTRIES+1``, so a stream of a million entries is never fully loaded.
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

from worker.pipeline.entries import MAX_CALL_BYTES, MAX_ENTRIES, MAX_ENTRY_BYTES
from worker.pipeline.keys import Keys

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
            f"limit {self.case:<20} peak_rss_delta={self.report['peak_delta_mb']}MB "
            f"consumer_time={self.report['seconds']}s dead_letters={len(self.letters)} "
            f"reasons={reasons}"
        )
