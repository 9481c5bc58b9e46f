"""``make demo-gateway``: the real gateway path instead of the simulator, start to finish.

    python -m devtools.demo_gateway --gateway asgi|litellm

Starts the recorded upstream (``devtools.recorded_upstream``, the demo's recordings in
worker/data/examples), a gateway in front of it (``asgi``: the example gateway built on the
middleware, ``python -m devtools.example_app``; ``litellm``: the LiteLLM proxy with the
billing hook named in its config), and a ``billing worker``; plays a mix of calls through the real
``openai`` client (streamed and not, usage asked for, two choices with tool calls, an error finish,
a dropped connection), waits until the worker has decided every call, and prints the books
(``billing report``'s table: settled / unsettled / void, the money and its tie-out), the dead
letters, and whether every settled call's ledger row equals what the upstream sent (its token
counts, and their price in the book).

Redis is ``REDIS_URL`` if it answers, else a private ``redis-server`` (as ``make demo``); the ledger
is a fresh SQLite file under ``var/demo-gateway/``. Needs the ``gateway`` extra (``asgi``) or the
``litellm`` extra, and says how to install whichever is missing.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import redis
from rich.console import Console
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from devtools.demo import DemoError, clear_keys, find_redis, fresh_run, start_worker, stop
from devtools.localservers.ports import free_port
from devtools.recorded_upstream import DEMO_SCENARIOS, SCENARIO_HEADER, Sent, Upstream
from models import Failure, Reservation
from models.usage import UsageRecord
from worker.contract.keys import Keys
from worker.core.prices import load_price_book
from worker.core.usage import usage_from_block
from worker.ledger.balances import ledger_is_balanced
from worker.ledger.database import make_engine
from worker.reports import snapshot
from worker.reports.query import build_report
from worker.reports.render_table import render_table
from worker.reports.spec import ReportSpec

ROOT = Path(__file__).resolve().parents[1]  # the checkout: devtools/ is not installed
WORKDIR = Path("var/demo-gateway")
# The run's own key prefix (see ``devtools.demo.PREFIX``): only its keys are deleted.
PREFIX = f"demo-gw-{uuid.uuid4().hex[:8]}"
ACCOUNT = "acct_demo_gateway"
MASTER_KEY = "sk-demo-gateway"
ROUNDS = int(os.environ.get("DEMO_GATEWAY_ROUNDS", "3"))
MESSAGES = [{"role": "user", "content": "Say hello."}]
NEEDS = {
    "asgi": (("openai", "starlette", "uvicorn", "httpx"), "gateway"),
    "litellm": (("openai", "litellm"), "litellm"),
}
console = Console(stderr=True)


@dataclass(frozen=True)
class Play:
    """One call of the mix: the upstream's recording, the model it names, how it is asked."""

    scenario: str
    model: str
    stream: bool
    n: int = 1


MIX = [
    Play("clean", "gpt-4o-2024-08-06", True),
    Play("clean", "gpt-4o-2024-08-06", False),
    Play("clean_body", "gpt-4o-2024-08-06", True),
    Play("clean_body", "gpt-4o-2024-08-06", False),
    Play("tool_calls_n2", "gpt-4.1-mini", True, n=2),
    Play("tool_calls_n2", "gpt-4.1-mini", False, n=2),
    Play("error_finish", "gpt-4o-2024-08-06", True),
    Play("dropped", "gpt-4o-2024-08-06", True),
]


def missing(gateway: str) -> str | None:
    """The install command when a package the mode needs is not importable; None when all are."""
    packages, extra = NEEDS[gateway]
    absent = [name for name in packages if importlib.util.find_spec(name) is None]
    if not absent:
        return None
    pip = Path(sys.executable).parent / "pip"
    return (
        f"the {gateway} gateway demo needs {', '.join(absent)}: install the '{extra}' extra"
        f" ({pip} install -e '.[{extra}]'; `make demo-gateway` installs the test extra, which"
        " holds it)"
    )


def _wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DemoError(f"the gateway exited; see {log}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError as exc:
            if getattr(exc, "code", None) is not None:  # an HTTP answer: it is serving
                return
            time.sleep(0.3)
    raise DemoError(f"the gateway did not answer in {timeout:.0f}s; see {log}")


def _spawn(argv: list[str], env: dict[str, str], name: str) -> subprocess.Popen[bytes]:
    log = open(WORKDIR / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        argv, env=env, cwd=WORKDIR, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )


def start_asgi(upstream: Upstream, redis_url: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    argv = [
        sys.executable, "-m", "devtools.example_app", "--upstream", upstream.base_url,
        "--port", str(port), "--redis", redis_url, "--prefix", PREFIX, "--spool-dir", "spool",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = _spawn(argv, env, "gateway")
    _wait_http(f"http://127.0.0.1:{port}/", proc, WORKDIR / "gateway.log", 30)
    return proc, f"http://127.0.0.1:{port}/v1"


def litellm_config(deployments: Iterable[tuple[str, str, str]]) -> str:
    """A LiteLLM proxy config with the billing hook and one deployment per (model name, the
    upstream's model, its api_base). The model is an OpenAI one unless it names its LiteLLM
    provider (``anthropic/claude-sonnet-4-5``)."""
    lines = ["model_list:"]
    for name, model, api_base in deployments:
        lines += [
            f"  - model_name: {name}",
            "    litellm_params:",
            f"      model: {model if '/' in model else 'openai/' + model}",
            f"      api_base: {api_base}",
            "      api_key: sk-upstream-unused",
        ]
    lines += [
        "litellm_settings:",
        "  callbacks: worker.gateway.litellm_hook.billing_hook",
        "  num_retries: 0",
        "  request_timeout: 20",
    ]
    return "\n".join(lines) + "\n"


def start_litellm(upstream: Upstream, redis_url: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    config = WORKDIR / "litellm.yaml"
    plays = {p.scenario: p for p in MIX}.values()
    config.write_text(
        litellm_config((p.scenario, p.model, upstream.scenario_url(p.scenario)) for p in plays)
    )
    binary = Path(sys.executable).parent / "litellm"
    argv = [str(binary) if binary.exists() else shutil.which("litellm") or "litellm",
            "--config", str(config.resolve()), "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no network
        "LITELLM_MASTER_KEY": MASTER_KEY,
        "LITELLM_LOG": "ERROR",
        "REDIS_URL": redis_url,
        "BILLING_PREFIX": PREFIX,
        "BILLING_SPOOL_DIR": "spool",
        "BILLING_LITELLM_ACCOUNT": "end_user",
    }
    env.pop("DATABASE_URL", None)  # LiteLLM would take the ledger's as its own
    proc = _spawn(argv, env, "gateway")
    console.print("starting the LiteLLM proxy (about 20 s)")
    _wait_http(f"http://127.0.0.1:{port}/health/liveliness", proc, WORKDIR / "gateway.log", 120)
    return proc, f"http://127.0.0.1:{port}/v1"


def play_mix(gateway: str, base_url: str, upstream: Upstream) -> list[tuple[Play, Sent]]:
    """Every call of ``ROUNDS`` rounds of the mix through the openai client, one at a time; each
    with what the upstream sent for it."""
    import openai

    key = MASTER_KEY if gateway == "litellm" else ACCOUNT
    client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    made: list[tuple[Play, Sent]] = []
    for _ in range(ROUNDS):
        for play in MIX:
            before = len(upstream.sent)
            model = play.scenario if gateway == "litellm" else play.model
            extra: dict[str, Any] = {"user": ACCOUNT, "n": play.n}
            if gateway == "asgi":
                extra["extra_headers"] = {SCENARIO_HEADER: play.scenario}
            if play.stream:
                extra["stream_options"] = {"include_usage": True}
            try:
                answer = client.chat.completions.create(
                    model=model, messages=MESSAGES, stream=play.stream, **extra
                )
                if play.stream:
                    for _chunk in answer:
                        pass
            except openai.APIError:
                pass  # the dropped connection: the client sees a broken body
            made.append((play, upstream.sent[before]))
    time.sleep(0.5)  # the last close is published after the client's last byte
    return made


def wait_decided(sessions: sessionmaker[Session], count: int, worker: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with sessions() as s:
            total = s.scalar(select(func.count()).select_from(Reservation))
            held = s.scalar(
                select(func.count()).select_from(Reservation).where(Reservation.status == "held")
            )
        if total >= count and held == 0:
            return
        if worker.poll() is not None:
            raise DemoError(f"the worker exited; see {WORKDIR / 'worker.log'}")
        time.sleep(0.5)
    raise DemoError(f"not every call was decided in time; see {WORKDIR / 'worker.log'}")


def upstream_usage(sent: Sent) -> dict[str, Any] | None:
    if sent.body is not None:
        return sent.body.get("usage")
    blocks = [f["usage"] for f in sent.frames or [] if isinstance(f, dict) and f.get("usage")]
    return blocks[-1] if blocks else None


def served_model(sent: Sent) -> str | None:
    """The model the upstream's reply names (its body's, else its stream's first chunk's)."""
    if sent.body is not None:
        return sent.body.get("model") or None
    return next(
        (f["model"] for f in sent.frames or [] if isinstance(f, dict) and f.get("model")), None
    )


def check_settled(sessions: sessionmaker[Session], made: list[tuple[Play, Sent]]) -> list[str]:
    """Every settled call against what the upstream sent for it (the calls were made one at a
    time, so the ledger's order of creation is the order of the calls): the same token counts,
    charged at the book's price of them for the model the upstream served (the model billed:
    ``worker.core.substitution``; a dated snapshot priced as the requested model costs the same). The
    disagreements, as sentences."""
    book = load_price_book()
    with sessions() as s:
        rows = s.execute(
            select(Reservation, UsageRecord)
            .outerjoin(UsageRecord, UsageRecord.reservation_id == Reservation.id)
            .order_by(Reservation.created_at, Reservation.id)
        ).all()
    wrong = []
    if len(rows) != len(made):
        return [f"the ledger has {len(rows)} calls, {len(made)} were made"]
    for (reservation, usage), (_play, sent) in zip(rows, made, strict=True):
        if reservation.status != "settled":
            continue
        block = upstream_usage(sent)
        counts = usage_from_block(block)
        if counts is None or usage is None:
            wrong.append(f"{reservation.request_id}: settled without the upstream's usage")
            continue
        at = reservation.created_at
        model = served_model(sent) or reservation.model
        price = book.charge(model, counts, at, provider="openai")
        got = (usage.prompt_tokens, usage.completion_tokens, usage.charge_micros)
        want = (counts.prompt_tokens, counts.completion_tokens, price)
        if got != want:
            wrong.append(f"{reservation.request_id}: ledger {got}, upstream {want}")
    return wrong


def print_books(database_url: str, client: redis.Redis, made: list[tuple[Play, Sent]]) -> bool:
    engine = make_engine(database_url)
    sessions = sessionmaker(engine)
    try:
        with sessions() as s:
            first = s.scalar(select(func.min(Reservation.created_at))) or datetime.now(UTC)
            balanced = ledger_is_balanced(s)
        since = first.replace(hour=0, minute=0, second=0, microsecond=0)
        with snapshot(engine) as conn:
            report = build_report(conn, ReportSpec(since, since + timedelta(days=2), ("day",)))
        wrong = check_settled(sessions, made)
        with sessions() as s:
            outcomes = s.execute(
                select(Reservation.status, Failure.reason, func.count())
                .outerjoin(Failure, Failure.reservation_id == Reservation.id)
                .group_by(Reservation.status, Failure.reason)
                .order_by(Reservation.status, Failure.reason)
            ).all()
    finally:
        engine.dispose()
    out = Console()
    print(render_table(report), end="")
    summary = ", ".join(
        f"{status}{' ' + reason if reason else ''} {count}" for status, reason, count in outcomes
    )
    out.print(f"{len(made)} calls: {summary}", highlight=False)
    out.print(f"dead letters: {client.xlen(Keys(PREFIX).dead)}")
    out.print(f"every ledger transaction sums to zero: {'yes' if balanced else 'NO'}")
    if wrong:
        out.print("settled calls that differ from what the upstream sent:", highlight=False)
        for line in wrong:
            out.print(f"  {line}", highlight=False)
    else:
        out.print(
            "every settled call equals what the upstream sent (its token counts, priced by the"
            " book)",
            highlight=False,
        )
    return balanced and not wrong


def interrupt(proc: subprocess.Popen[bytes], timeout: float = 20) -> None:
    """Ctrl-C for a gateway process: the way the LiteLLM proxy stops with its tee flushed."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):  # ``stop`` follows
            proc.wait(timeout)


def run(gateway: str) -> int:
    started: list[subprocess.Popen[bytes]] = []
    upstream: Upstream | None = None
    try:
        problem = missing(gateway)
        if problem:
            raise DemoError(problem)
        WORKDIR.mkdir(parents=True, exist_ok=True)
        redis_url = find_redis(started)
        client = redis.Redis.from_url(redis_url)
        database_url, env = fresh_run(client, redis_url, WORKDIR, PREFIX, broker_db=14)
        worker = start_worker(env, WORKDIR)
        started.append(worker)
        upstream = Upstream.start(DEMO_SCENARIOS)
        start = start_litellm if gateway == "litellm" else start_asgi
        proxy, base_url = start(upstream, redis_url)
        started.append(proxy)
        console.print(f"{len(MIX) * ROUNDS} calls through the {gateway} gateway at {base_url}")
        made = play_mix(gateway, base_url, upstream)
        engine = make_engine(database_url)
        try:
            wait_decided(sessionmaker(engine), len(made), worker)
        finally:
            engine.dispose()
        ok = print_books(database_url, client, made)
        clear_keys(client, PREFIX)
        return 0 if ok else 1
    except DemoError as exc:
        console.print(f"[red]demo:[/red] {exc}")
        return 1
    finally:
        for proc in reversed(started):
            if proc is started[-1] and gateway == "litellm":
                interrupt(proc)  # SIGINT: the proxy exits and its hook's tee flushes (atexit)
            stop(proc)
        if upstream is not None:
            upstream.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devtools.demo_gateway", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--gateway", choices=sorted(NEEDS), required=True)
    return run(parser.parse_args(argv).gateway)


if __name__ == "__main__":
    sys.exit(main())
