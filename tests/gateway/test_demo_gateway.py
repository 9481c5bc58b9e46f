"""``python -m devtools.demo_gateway --gateway asgi``: the demo's real gateway path, run as a user runs it
(one round of the mix, against a private Redis, in a scratch directory)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.demo_gateway import MIX, missing
from devtools.localservers.redis_server import PrivateRedis

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def test_the_asgi_gateway_demo_settles_what_the_upstream_sent(tmp_path: Path) -> None:
    server = PrivateRedis(tmp_path / "redis", appendonly=False)
    server.start()
    try:
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "REDIS_URL": server.url(0),
            "DEMO_GATEWAY_ROUNDS": "1",
        }
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        done = subprocess.run(
            [sys.executable, "-m", "devtools.demo_gateway", "--gateway", "asgi"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    finally:
        server.stop()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # The ASGI gateway passes the upstream's bytes through: the two n = 2 streams settle, the
    # error finish and the dropped stream stay unsettled.
    assert f"{len(MIX)} calls: settled 6, unsettled error_finish 1, unsettled incomplete 1" in (
        done.stdout.replace("\n", " ")
    )
    assert "every settled call equals what the upstream sent" in done.stdout.replace("\n", " ")
    assert "dead letters: 0" in done.stdout


def test_a_missing_extra_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    assert missing("asgi") is None  # the test extra holds the gateway extra
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "litellm" else real(name)
    )
    problem = missing("litellm")
    assert problem is not None
    assert "needs litellm" in problem and "install -e '.[litellm]'" in problem
    assert missing("asgi") is None
