"""Worker memory: the RSS of one consumer process after 10x as many calls as at a first checkpoint.

As the brief asks, a full run checkpoints after 100,000 and 1,000,000 calls (about ten minutes on a
two-core machine); ``--smoke`` uses 300 and 1,500, and ``--memory-calls`` sets other sizes.

Tiny calls (open, four frame entries, close) are written in slices while a consumer process runs,
never more than ``BACKLOG`` notifications ahead of it. At each checkpoint the writer waits until the
consumer group has acknowledged everything, then reads the child's ``VmRSS`` from ``/proc``. A worker
that keeps per-call state (caches keyed by request or account, growing lists) shows up as a ratio
above 1. Redis ``used_memory`` is read at the same checkpoints: acknowledged notifications stay in the
notification stream until something trims it.

``run_spaceless`` (row 8's second line) feeds one consumer process 8 calls of about 24 MiB each
(under the 32 MiB a call may hold), streamed as frames of about 500 KB of text without spaces
(runs of letters, of one letter, of digits, of CJK, of emoji, of punctuation, of spaces, base64:
what makes tiktoken's pre-tokenizer a huge piece), all written before the consumer starts, so its
batches fill to ``BILLING_BATCH_BYTES``. Figure: the child's peak RSS (``VmHWM``, its start
included) against a cap of 600 MB; ``--smoke`` writes 2 calls of 4 MiB.
"""

from __future__ import annotations

import base64
import random
import time
from pathlib import Path
from typing import Any

import orjson

from benchmarks.harness import history, services, workload
from benchmarks.harness.consumer_process import ConsumerProcess, wait_drained
from worker.contract.keys import Keys
from worker.contract.publisher import Publisher

TARGET_RATIO = 1.2
BACKLOG = 20_000
SLICE = 5_000


def _lag(client: Any, stream: str, group: str) -> int:
    for info in client.xinfo_groups(stream):
        if info["name"] in (group, group.encode()):
            return client.xlen(stream) - (info.get("entries-read") or 0)
    return client.xlen(stream)


def run(smoke: bool = False, first: int | None = None, last: int | None = None) -> dict[str, Any]:
    first = first or (300 if smoke else 100_000)
    last = last or (1_500 if smoke else 1_000_000)
    checkpoints: dict[int, dict[str, float]] = {}
    with (
        services.redis_prefix("memory") as (client, prefix),
        services.pg_database("memory") as url,
        services.autovacuum(url),
    ):
        history.warm(url)
        keys = Keys(prefix)
        stream = keys.events(0)
        child = ConsumerProcess(prefix, url, "memory")
        try:
            rss_start = child.rss_bytes()
            child.go()
            started = time.perf_counter()
            written = 0
            publish_s = 0.0
            for checkpoint in (first, last):
                while written < checkpoint:
                    upto = min(checkpoint, written + SLICE)
                    publish_s += workload.publish_tiny(client, keys, prefix, written, upto)
                    written = upto
                    while _lag(client, stream, keys.group) > BACKLOG:
                        time.sleep(0.05)
                wait_drained(client, stream, keys.group, timeout=3600)
                time.sleep(0.5)  # let the last batch's garbage go
                checkpoints[checkpoint] = {
                    "rss": child.rss_bytes(),
                    "seconds": time.perf_counter() - started,
                    "redis_used_memory": client.info("memory")["used_memory"],
                }
            report = child.stop()
        finally:
            child.kill()
    a, b = checkpoints[first], checkpoints[last]
    ratio = b["rss"] / a["rss"]
    return {
        "first_calls": first,
        "last_calls": last,
        "rss_start": rss_start,
        "rss_first": a["rss"],
        "rss_last": b["rss"],
        "ratio": ratio,
        "seconds": b["seconds"],
        "publish_seconds": publish_s,
        "calls_per_s": last / b["seconds"],
        "redis_growth_per_call": (b["redis_used_memory"] - a["redis_used_memory"]) / (last - first),
        "settled": report["settled"],
        "deferred": report["deferred"],
        "target_ratio": TARGET_RATIO,
        "meets_target": ratio <= TARGET_RATIO,
    }


# -- row 8b: calls of text without spaces --------------------------------------------------------

SPACELESS_CALLS = 8
SPACELESS_CALL_BYTES = 24 << 20
SPACELESS_FRAME_BYTES = 500_000
PEAK_RSS_CAP = 600_000_000
SPACELESS_KINDS = (
    "letters", "one letter", "digits", "CJK", "emoji", "punctuation", "spaces", "base64",
)  # fmt: skip


def _spaceless(kind: str, size: int, rng: random.Random) -> str:
    """About ``size`` UTF-8 bytes of one kind of text without a space between two words."""
    if kind == "letters":
        return "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=size))
    if kind == "one letter":
        return "a" * size
    if kind == "digits":
        return "".join(rng.choices("0123456789", k=size))
    if kind == "CJK":
        return "".join(chr(code) for code in rng.choices(range(0x4E00, 0xA000), k=size // 3))
    if kind == "emoji":
        return "".join(chr(code) for code in rng.choices(range(0x1F300, 0x1F650), k=size // 4))
    if kind == "punctuation":
        return "".join(rng.choices("!#$%&()*+,-./:;<=>?@[]^_`{|}~", k=size))
    if kind == "spaces":
        return " " * size
    return base64.b64encode(rng.randbytes(size * 3 // 4)).decode()


def spaceless_frames(number: int, kind: str, call_bytes: int, rng: random.Random) -> list[bytes]:
    """One streamed call: content frames of ~``SPACELESS_FRAME_BYTES`` up to ``call_bytes``, then
    the finish and ``[DONE]`` frames (no usage: the call is settled at the estimate)."""
    top = {"id": f"chatcmpl-spaceless-{number}", "object": "chat.completion.chunk"}
    frames: list[bytes] = []
    size = 0
    while size < call_bytes:
        delta: dict[str, str] = {"content": _spaceless(kind, SPACELESS_FRAME_BYTES, rng)}
        if not frames:
            delta["role"] = "assistant"
        choice = {"index": 0, "delta": delta, "finish_reason": None}
        frame = b"data: " + orjson.dumps({**top, "model": "gpt-4o", "choices": [choice]})
        frames.append(frame)
        size += len(frame)
    stop = {"index": 0, "delta": {}, "finish_reason": "stop"}
    frames.append(b"data: " + orjson.dumps({**top, "model": "gpt-4o", "choices": [stop]}))
    frames.append(b"data: [DONE]")
    return frames


def spaceless_meta(request_id: str, number: int) -> bytes:
    """A call whose client did not ask for usage: it settles at the estimate."""
    return orjson.dumps(
        {
            "request_id": request_id,
            "account_id": f"acct_{number}",
            "model": "gpt-4o",
            "stream": True,
            "include_usage": False,
            "reserved_micros": 1000,
            "created_at": "2026-01-15T12:00:00Z",
            "messages": [{"role": "user", "content": "Write without spaces."}],
        }
    )


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmHWM for {pid}")


def run_spaceless(smoke: bool = False) -> dict[str, Any]:
    calls, call_bytes = (2, 4 << 20) if smoke else (SPACELESS_CALLS, SPACELESS_CALL_BYTES)
    rng = random.Random(20261206)
    written = 0
    with (
        services.redis_prefix("spaceless") as (client, prefix),
        services.pg_database("spaceless") as url,
    ):
        keys = Keys(prefix)
        publisher = Publisher(client, keys)
        child = ConsumerProcess(prefix, url, "spaceless")
        try:
            rss_start = child.rss_bytes()
            began = time.perf_counter()
            for number in range(calls):
                frames = spaceless_frames(
                    number, SPACELESS_KINDS[number % len(SPACELESS_KINDS)], call_bytes, rng
                )
                written += sum(len(frame) for frame in frames)
                rid = f"spaceless_{prefix}_{number}"
                with publisher.batch() as batch:
                    batch.open(spaceless_meta(rid, number), rid)
                    batch.frames(rid, frames)
                    batch.close(rid)
                del frames
            publish_s = time.perf_counter() - began
            started = time.perf_counter()
            child.go()
            wait_drained(client, keys.events(0), keys.group, timeout=1800)
            seconds = time.perf_counter() - started
            peak = _peak_rss(child.pid)
            report = child.stop()
        finally:
            child.kill()
    return {
        "calls": calls,
        "bytes": written,
        "kinds": [SPACELESS_KINDS[number % len(SPACELESS_KINDS)] for number in range(calls)],
        "rss_start": rss_start,
        "peak_rss": peak,
        "cap": PEAK_RSS_CAP,
        "ratio": peak / PEAK_RSS_CAP,
        "meets_target": peak <= PEAK_RSS_CAP,
        "seconds": seconds,
        "publish_seconds": publish_s,
        "settled": report["settled"],
        "dead": report["dead"],
        "unsettled": report["unsettled"],
    }


if __name__ == "__main__":
    import sys

    args = [int(a) for a in sys.argv[1:] if a.isdigit()]
    if "--spaceless" in sys.argv:
        figures = run_spaceless("--smoke" in sys.argv)
    else:
        figures = run("--smoke" in sys.argv, *args)
    for name, value in figures.items():
        print(f"{name}: {value}")
