"""The example gateway stopped by SIGTERM (what a process manager sends) right after a call: the
tee's queue is flushed by the server's lifespan shutdown, so the call's entries reach Redis. (uvicorn
re-raises the signal after its graceful shutdown: a ``finally`` around ``uvicorn.run`` never runs.)"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import redis

from devtools.localservers.ports import free_port
from worker.contract.keys import Keys

from .upstream import SCENARIO_HEADER, Upstream


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with Upstream.start() as up:
        yield up


def _listening(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"the gateway did not listen on {port}")


def test_sigterm_right_after_a_call_loses_none_of_its_entries(
    upstream: Upstream, prefix: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    port = free_port()
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    gateway = subprocess.Popen(
        [sys.executable, "-m", "devtools.example_app", "--upstream", upstream.base_url,
         "--port", str(port), "--redis", url, "--prefix", prefix,
         "--spool-dir", str(tmp_path / "spool")],
    )  # fmt: skip
    try:
        _listening(port)
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key="acct_shutdown", max_retries=0,
            default_headers={SCENARIO_HEADER: "clean"},
        )  # fmt: skip
        chunks = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True,
            stream_options={"include_usage": True},
        )  # fmt: skip
        assert sum(1 for _ in chunks) > 1
        gateway.send_signal(signal.SIGTERM)  # within the tee's linger: the entries are queued
        gateway.wait(timeout=30)
    finally:
        if gateway.poll() is None:
            gateway.kill()
            gateway.wait()
    keys = Keys(prefix)
    notes = [fields[b"kind"] for _, fields in redis_client.xrange(keys.events(0))]
    assert notes == [b"open", b"close"]
    request_id = redis_client.xrange(keys.events(0))[0][1][b"request_id"].decode()
    kinds = [fields[b"kind"] for _, fields in redis_client.xrange(keys.request(request_id))]
    assert kinds[:2] == [b"admission", b"request"] and kinds.count(b"frame") >= 1
    assert not any((tmp_path / "spool").glob("*")), "nothing left in the spool: all sent"
