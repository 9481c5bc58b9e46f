"""What admission costs a call before its first byte (row 13): time to first byte through the billed
gateway with spend control (the hold priced, the admission record written and the hold taken in one
Redis script before the upstream call) against the same gateway serving the bare proxy
(``--no-billing``), under paced load, and the Redis round trips it adds per call.

Three real processes: the upstream (``benchmarks.gateway_upstream``) and the example gateway
(``devtools.example_app``) twice, one billing through the tee with ``--authorize`` (its account
funded in the authorization store far beyond the run, so every call is admitted and the full check
runs), one ``--no-billing``. This process paces the calls open-loop: call ``i`` starts at
``i / rate`` whatever the others do, alternating the gateways, so both see the same load at the
same moments (``rate`` calls/s in all). Time to first byte: request sent → first body byte. The
added p99 comes with a bootstrap interval. Round trips: Redis's ``INFO commandstats`` count of
``EVALSHA``/``EVAL`` (the admission script is the only script the gateway runs before the call)
over the run, per billed call.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from typing import Any

import httpx

from benchmarks.bench_gateway import _free_port, _start, _wait_closes
from benchmarks.bench_latency import percentile
from benchmarks.harness import services
from benchmarks.resampling import bootstrap_interval
from worker.contract.authorization import AuthorizationStore
from worker.contract.keys import Keys

TARGET_TTFB_MS = 0.5
TARGET_ROUND_TRIPS = 2.0
# Calls/s in all, half to each gateway. The issue asks for 500; on the 2-core machine the two
# gateways, the upstream, this client and Redis together saturate near 100 streamed calls/s
# (past it the open-loop queue grows without bound and TTFB is seconds of queueing), so the row
# runs at 60% of that and says so.
RATE = 60
CHUNKS = 4  # short streams: the row is about the time before the first byte
ACCOUNT = "acct-bench"


def _scripts(client: Any) -> int:
    stats = client.info("commandstats")
    return sum(
        int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("evalsha", "eval")
    )


async def _call(client: httpx.AsyncClient, body: dict[str, Any]) -> float:
    """Time to first byte (ms) of one streamed call, read to its end."""
    start = time.perf_counter()
    first = 0.0
    async with client.stream("POST", "/v1/chat/completions", json=body) as reply:
        if reply.status_code != 200:
            raise AssertionError(f"the gateway answered {reply.status_code}")
        async for _chunk in reply.aiter_raw():
            if not first:
                first = time.perf_counter()
    return (first - start) * 1000


async def _paced(
    gateways: dict[str, httpx.AsyncClient], body: dict[str, Any], calls: int, rate: float
) -> tuple[dict[str, list[float]], float]:
    ttfb: dict[str, list[float]] = {name: [] for name in gateways}
    names = list(gateways)
    began = time.perf_counter()

    async def one(i: int) -> None:
        delay = began + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        name = names[i % 2]
        ttfb[name].append(await _call(gateways[name], body))

    await asyncio.gather(*(one(i) for i in range(calls)))
    return ttfb, calls / (time.perf_counter() - began)


def run(smoke: bool = False, calls: int | None = None, rate: float | None = None) -> dict[str, Any]:
    """``calls`` in all (default 200 in a smoke run, else 6,000) at ``rate`` calls/s (default
    40 in a smoke run, else ``RATE``), half through each gateway."""
    calls = calls or (200 if smoke else 6_000)
    rate = rate or (40 if smoke else RATE)
    warmup = 20 if smoke else 200
    body = {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "Write forty words about rivers."}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 64,
    }
    up_port, plain_port, authorized_port = _free_port(), _free_port(), _free_port()
    procs = []
    with (
        services.redis_prefix("spend") as (client, prefix),
        tempfile.TemporaryDirectory() as spool,
    ):
        store = AuthorizationStore(client, prefix)
        store.install(ACCOUNT, funds=10**15, charged=0, fields={})
        store.mark_ready()
        try:
            procs.append(_start(["benchmarks.gateway_upstream", "--port", str(up_port),
                                 "--chunks", str(CHUNKS)], up_port))  # fmt: skip
            common = ["devtools.example_app", "--upstream", f"http://127.0.0.1:{up_port}/v1",
                      "--redis", services.REDIS_URL, "--prefix", prefix]  # fmt: skip
            procs.append(_start([*common, "--port", str(plain_port), "--no-billing"],
                                plain_port))  # fmt: skip
            procs.append(_start([*common, "--port", str(authorized_port), "--spool-dir",
                                 f"{spool}/authorized", "--authorize"], authorized_port))  # fmt: skip
            headers = {"Authorization": f"Bearer {ACCOUNT}"}
            limits = httpx.Limits(max_connections=500, max_keepalive_connections=500)

            async def measure() -> tuple[dict[str, list[float]], float, int]:
                async with (
                    httpx.AsyncClient(base_url=f"http://127.0.0.1:{plain_port}", headers=headers,
                                      limits=limits, timeout=60) as plain,
                    httpx.AsyncClient(base_url=f"http://127.0.0.1:{authorized_port}",
                                      headers=headers, limits=limits, timeout=60) as authorized,
                ):  # fmt: skip
                    gateways = {"plain": plain, "authorized": authorized}
                    await _paced(gateways, body, warmup, min(rate, 200))
                    before = _scripts(client)
                    ttfb, achieved = await _paced(gateways, body, calls, rate)
                    return ttfb, achieved, _scripts(client) - before

            ttfb, achieved, scripts = asyncio.run(measure())
            _wait_closes(client, Keys(prefix).events(), (warmup + calls) // 2)
            held = len(store.calls(ACCOUNT))
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(timeout=10)
                except Exception:
                    proc.kill()
    p99 = {name: percentile(values, 0.99) for name, values in ttfb.items()}
    p50 = {name: percentile(values, 0.5) for name, values in ttfb.items()}
    added = p99["authorized"] - p99["plain"]
    authorized_calls = len(ttfb["authorized"])
    round_trips = scripts / authorized_calls if authorized_calls else float("nan")
    return {
        "calls": calls,
        "rate": rate,
        "achieved_rate": achieved,
        "ttfb_p99_ms": p99,
        "ttfb_p50_ms": p50,
        "added_ttfb_p99_ms": added,
        "added_ttfb_p99_interval_ms": bootstrap_interval(
            ttfb["authorized"], ttfb["plain"], lambda v: percentile(v, 0.99)
        ),
        "round_trips": round_trips,
        "holds_taken": held,
        "target_ttfb_ms": TARGET_TTFB_MS,
        "target_round_trips": TARGET_ROUND_TRIPS,
        "meets_target": added <= TARGET_TTFB_MS and round_trips <= TARGET_ROUND_TRIPS,
    }
