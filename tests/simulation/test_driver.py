"""Publishing a plan into real Redis: every entry and notification lands where the contract says."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest
import redis

from worker.contract.keys import Keys
from worker.simulation import parse_faults, plan, play
from worker.simulation.wire import Deferred, Frames, Notify, Open, Response

pytestmark = pytest.mark.redis


def _decode(fields: dict[bytes, bytes]) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in fields.items()}


def _ms(entry_id: bytes) -> int:
    return int(entry_id.split(b"-")[0])


def test_play_writes_every_entry_and_notification(redis_client: redis.Redis, prefix: str):
    keys = Keys(prefix, partitions=2)
    faults = parse_faults(
        "duplicate_entries=0.15,malformed=0.15,gateway_crash=0.1,late_usage=0.2,http_error=0.2"
    )
    calls = plan(80, 17, faults, twins=0.1, run_id="t1")
    report = play(calls, redis_client, keys, ttl_seconds=600, concurrency=2, window=5,
                  frames_per_tick=7, progress=False)  # fmt: skip
    assert report.summary.calls == len(calls)
    assert report.round_trips > 10

    notes: dict[str, list[tuple[bytes, dict[str, str]]]] = defaultdict(list)
    for stream in keys.all_events():
        for entry_id, fields in redis_client.xrange(stream):
            note = _decode(fields)
            assert stream == keys.events_for(note["request_id"])
            assert int(note["ts"]) > 0
            notes[note["request_id"]].append((entry_id, note))
    assert sum(map(len, notes.values())) == report.summary.notifications

    entries_seen = 0
    for call in calls:
        kinds = Counter(note["kind"] for _, note in notes[call.request_id])
        key = keys.request(call.request_id)
        if call.meta is None:  # an orphan close: a notification and no stream
            assert kinds == {"close": 1} and not redis_client.exists(key)
            continue
        opens = 1 + sum(isinstance(op, Notify) and op.kind == "open" for op in call.ops)
        closes = sum(type(op).__name__ == "Close" for op in call.ops)
        assert kinds["open"] == opens and kinds["close"] == closes
        unknown = {op.kind for op in call.ops if isinstance(op, Notify) and op.kind != "open"}
        assert set(kinds) - {"open", "close"} == unknown
        assert 0 < redis_client.ttl(key) <= 600

        stored = [(entry_id, _decode(f)) for entry_id, f in redis_client.xrange(key)]
        entries_seen += len(stored)
        assert stored[0][1] == {"kind": "request", "body": next(
            op.body.decode() for op in call.ops if isinstance(op, Open))}  # fmt: skip
        rest = [fields for _, fields in stored[1:]]
        if call.stream:
            sent = [e for op in call.ops if isinstance(op, Frames) for e in op.entries]
            sent += [e for op in call.ops if isinstance(op, Deferred) for e in op.frames.entries]
            assert rest == [{"kind": "frame", "body": e} for e in sent]
        else:
            (response,) = [op for op in call.ops if isinstance(op, Response)]
            assert rest == [
                {"kind": "response", "status": str(response.status), "body": response.body.decode()}
            ]
        late = [op for op in call.ops if isinstance(op, Deferred)]
        if late and late[0].delay_ms is not None:
            close_ms = max(_ms(i) for i, note in notes[call.request_id] if note["kind"] == "close")
            assert _ms(stored[-1][0]) - close_ms >= late[0].delay_ms - 50
        if late:
            assert json.loads(rest[-1]["body"].split("\n\n")[0][6:])["choices"] == []
    assert entries_seen == report.summary.stream_entries


def test_play_is_quiet_without_a_terminal_and_counts_match_the_plan(redis_client, prefix):
    calls = plan(20, 2, run_id="t2")
    report = play(iter(calls), redis_client, Keys(prefix), concurrency=3, progress=None)
    assert report.summary.calls == 20
    assert redis_client.xlen(f"{prefix}:events") == 40  # an open and a close each


def test_play_raises_the_first_thread_error(redis_client, prefix):
    calls = plan(10, 2, run_id="t3")

    def broken():
        yield from calls[:3]
        raise RuntimeError("generator failed")

    with pytest.raises(RuntimeError, match="generator failed"):
        play(broken(), redis_client, Keys(prefix), concurrency=2, progress=False)


def test_play_rejects_bad_sizes(redis_client, prefix):
    with pytest.raises(ValueError):
        play([], redis_client, Keys(prefix), concurrency=0)
