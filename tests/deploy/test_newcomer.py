"""Issue 39, point 10: a newcomer's next step after ``make demo``.

* the demo ends with command lines that read its ledger: each is run here, as a shell would split
  it, on a ledger that has the demo's account funded;
* ``python -m devtools.recorded_upstream --port N`` serves until stopped (it used to exit at once);
* ``make demo`` installs the ``gateway`` extra only, ``make test`` everything the tests need (read
  from ``make -n``, nothing run), and that extra holds no test tool, fuzzer or linter.
"""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import tomllib
import urllib.request
import uuid
from datetime import UTC, datetime
from pathlib import Path

from click.testing import CliRunner

from devtools.demo import next_steps
from devtools.demo_funds import DEMO_ACCOUNT
from devtools.localservers.ports import free_port
from worker.cli import main
from worker.config import ENV_VARS

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_ends_with_commands_that_read_its_ledger(sqlite_url, monkeypatch) -> None:
    for variable in ENV_VARS:
        monkeypatch.delenv(variable, raising=False)
    runner = CliRunner()
    account = f"newcomer-{uuid.uuid4().hex[:8]}"  # the demo's is DEMO_ACCOUNT
    env = {"DATABASE_URL": sqlite_url}
    fund = ["credit", "add", account, "5", "--note", "t", "--key", account, "--new-account"]
    funded = runner.invoke(main, fund, env=env)
    assert funded.exit_code == 0, funded.output
    lines = next_steps(sqlite_url, f"{datetime.now(UTC):%Y-%m}", ".venv/bin/billing", account)
    assert len(lines) >= 3
    for line in lines:
        words = shlex.split(line)
        assignment, program, *args = words
        variable, _, value = assignment.partition("=")
        assert (variable, value, program) == ("DATABASE_URL", sqlite_url, ".venv/bin/billing")
        done = runner.invoke(main, args, env={variable: value})
        assert done.exit_code == 0, f"{line}\n{done.output}"
    balance = runner.invoke(main, shlex.split(lines[0])[2:], env=env)
    assert account in balance.output
    assert next_steps(sqlite_url, "2026-12", "billing")[0].endswith(f"balance {DEMO_ACCOUNT}")


def test_the_recorded_upstream_serves_until_stopped() -> None:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "devtools.recorded_upstream", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        first = server.stdout.readline()
        assert f"http://127.0.0.1:{port}/v1" in first, first + (
            server.stderr.read() if server.poll() is not None else ""
        )  # type: ignore[union-attr]
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            data=json.dumps({"model": "gpt-4o-mini", "messages": []}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            body = json.load(reply)
        assert body["object"] == "chat.completion" and body["usage"]["prompt_tokens"] > 0
        assert server.poll() is None, "it stopped after one call"
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=10)
    assert code == 0


def dry_run(target: str) -> str:
    """What ``make TARGET`` would run from scratch (``-B``: as if nothing were installed)."""
    done = subprocess.run(
        ["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_make_demo_installs_the_gateway_extra_and_make_test_the_test_extra() -> None:
    demo, test = dry_run("demo"), dry_run("test")
    assert "pip install -q -e '.[gateway]'" in demo
    assert ".[test]" not in demo
    assert "pip install -q -e '.[test]'" in test
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    gateway = {req.split("[")[0].split(">")[0].split("=")[0].lower() for req in extras["gateway"]}
    assert not gateway & {"atheris", "ruff", "import-linter", "pytest", "hypothesis"}, gateway
