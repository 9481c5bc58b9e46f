"""The cost of the tee (row 11): the example gateway's CPU per streamed call and its time to first
byte, with the billing middleware and the tee against the same gateway without them.

Three real processes: the upstream (``benchmarks.gateway_upstream``, a fixed 44-event stream), and
the example gateway (``devtools.example_app``) twice, once ``--no-billing``. This process is
the client (httpx, one keep-alive connection per gateway) and calls the two gateways in turn, call
by call, so both see the same machine at the same moments. Time to first byte: request sent →
first body byte received, per call; the added p99 comes with a bootstrap interval, the p99 of a
few thousand calls on a shared machine being a handful of outliers. CPU: user + system seconds of
each gateway process, all its threads (``/proc``), measured apart in each of several rounds so the
ratio comes with its spread; the billed process's event-loop thread is also read apart (its other
thread is the tee's). The billed round ends when every ``close`` is in Redis. Redis's own CPU for
the writes is not counted (it is the worker's side).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.bench_latency import percentile
from benchmarks.harness import cpu, services
from benchmarks.resampling import bootstrap_interval, ratio_interval
from worker.contract.keys import Keys

TARGET_CPU_RATIO = 1.10
TARGET_TTFB_MS = 1.0
CHUNKS = 40
ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start(argv: list[str], port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", *argv], cwd=ROOT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{argv[0]} exited: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{argv[0]} did not listen on {port}")


def _call(client: httpx.Client, body: dict[str, Any]) -> tuple[float, int]:
    """(time to first byte in ms, bytes received) of one streamed call."""
    start = time.perf_counter()
    first = 0.0
    size = 0
    with client.stream("POST", "/v1/chat/completions", json=body) as reply:
        for chunk in reply.iter_raw():
            if not size:
                first = time.perf_counter()
            size += len(chunk)
    return (first - start) * 1000, size


def _thread_cpu(pid: int) -> float:
    """CPU seconds of ``pid``'s main thread (the event loop's; the process's other threads are
    the tee's)."""
    try:
        stat = Path(f"/proc/{pid}/task/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / cpu.TICKS


def run(smoke: bool = False, calls: int | None = None, rounds: int | None = None) -> dict[str, Any]:
    """``calls``: how many calls each gateway serves (default 60 for smoke, else 4,000), in
    ``rounds`` (default 3 for smoke, else 20); each round's CPU is measured apart, so the ratio
    comes with its spread over the rounds."""
    warmup = 10 if smoke else 100
    rounds = rounds or (3 if smoke else 20)
    calls = calls or (60 if smoke else 4000)
    per_round = max(1, calls // rounds)
    calls = per_round * rounds
    body = {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "Write forty words about rivers."}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 64,
    }
    up_port, plain_port, billed_port = _free_port(), _free_port(), _free_port()
    procs: list[subprocess.Popen[bytes]] = []
    with (
        services.redis_prefix("gateway") as (client, prefix),
        tempfile.TemporaryDirectory() as spool,
    ):
        try:
            procs.append(_start(["benchmarks.gateway_upstream", "--port", str(up_port),
                                 "--chunks", str(CHUNKS)], up_port))  # fmt: skip
            upstream = f"http://127.0.0.1:{up_port}/v1"
            common = ["devtools.example_app", "--upstream", upstream]
            plain = _start([*common, "--port", str(plain_port), "--no-billing"], plain_port)
            billed = _start([*common, "--port", str(billed_port), "--redis", services.REDIS_URL,
                             "--prefix", prefix, "--spool-dir", spool], billed_port)  # fmt: skip
            procs += [plain, billed]
            pids = {"plain": plain.pid, "billed": billed.pid}
            headers = {"Authorization": "Bearer acct-bench"}
            gateways = {
                "plain": httpx.Client(base_url=f"http://127.0.0.1:{plain_port}", headers=headers),
                "billed": httpx.Client(base_url=f"http://127.0.0.1:{billed_port}", headers=headers),
            }
            sizes = {name: _call(c, body)[1] for name, c in gateways.items()}
            if sizes["plain"] != sizes["billed"]:
                raise AssertionError(f"the gateways answered differently: {sizes}")
            for _ in range(warmup):
                for c in gateways.values():
                    _call(c, body)
            events = Keys(prefix).events()
            closed = warmup + 1
            _wait_closes(client, events, closed)
            ttfb: dict[str, list[float]] = {"plain": [], "billed": []}
            cpu_rounds: dict[str, list[float]] = {"plain": [], "billed": [], "loop": []}
            for r in range(rounds):
                start = {name: cpu.cpu_seconds(pid) for name, pid in pids.items()}
                loop = _thread_cpu(billed.pid)
                for i in range(per_round):
                    order = ("plain", "billed") if (r + i) % 2 == 0 else ("billed", "plain")
                    for name in order:
                        ttfb[name].append(_call(gateways[name], body)[0])
                closed += per_round
                _wait_closes(client, events, closed)  # the tee's writes of the round done
                for name, pid in pids.items():
                    cpu_rounds[name].append(cpu.cpu_seconds(pid) - start[name])
                cpu_rounds["loop"].append(_thread_cpu(billed.pid) - loop)
            for c in gateways.values():
                c.close()
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
    cpu_ms = {name: sum(cpu_rounds[name]) * 1000 / calls for name in ("plain", "billed")}
    per_round_ratios = sorted(
        b / p for b, p in zip(cpu_rounds["billed"], cpu_rounds["plain"], strict=True) if p
    )
    p99 = {name: percentile(values, 0.99) for name, values in ttfb.items()}
    p50 = {name: percentile(values, 0.5) for name, values in ttfb.items()}
    ratio = cpu_ms["billed"] / cpu_ms["plain"] if cpu_ms["plain"] else float("nan")
    added_ms = p99["billed"] - p99["plain"]
    return {
        "calls": calls,
        "rounds": rounds,
        "events_per_call": CHUNKS + 4,
        "bytes_per_call": sizes["billed"],
        "cpu_ms": cpu_ms,
        "billed_loop_cpu_ms": sum(cpu_rounds["loop"]) * 1000 / calls,
        "round_ratios": per_round_ratios,
        "ratio_interval": ratio_interval(cpu_rounds["billed"], cpu_rounds["plain"]),
        "ttfb_p99_ms": p99,
        "ttfb_p50_ms": p50,
        "ratio": ratio,
        "added_ttfb_p99_ms": added_ms,
        "added_ttfb_p99_interval_ms": bootstrap_interval(
            ttfb["billed"], ttfb["plain"], lambda v: percentile(v, 0.99)
        ),
        "target_ratio": TARGET_CPU_RATIO,
        "target_ttfb_ms": TARGET_TTFB_MS,
        "meets_target": ratio < TARGET_CPU_RATIO and added_ms < TARGET_TTFB_MS,
    }


def _wait_closes(client: Any, events: str, count: int, timeout: float = 60) -> None:
    """Until ``count`` close notifications are in Redis (the tee is asynchronous)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.xlen(events) >= 2 * count:  # an open and a close per call
            return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} calls closed in {timeout} s")
