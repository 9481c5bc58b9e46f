"""The gateway e2e harness: a real ``billing worker``, a gateway process, and the ledger read back.

* ``BillingWorker(env, workdir)``: the ``billing worker`` command (Celery worker, beat embedded) as a
  process of its own, stopped with its process group.
* ``LiteLLMProxy(config, env, workdir)``: ``litellm --config … --host 127.0.0.1 --port P``, started
  with ``LITELLM_LOCAL_MODEL_COST_MAP=True`` and a master key (no network), ready once
  ``/health/liveliness`` answers; it never sees ``DATABASE_URL`` (LiteLLM would take it as its own).
* ``wait_decided(sessions, accounts, count)``: until ``count`` calls of those accounts are no
  longer ``held``; ``ledger(sessions, accounts)`` reads them back as ``Call`` rows (status, the
  unsettled reason, usage counts, charge).
* ``oracle_charge(prices, usage)``: the price of a usage block from a plain price table, written
  apart from the worker's pricing code.

Every process dies with the test process (``die_with_parent``) and is stopped at the end.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

from chaos.fleet import REPO, die_with_parent
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from devtools.localservers.ports import free_port
from models import Failure, Reservation
from models.usage import UsageRecord

MASTER_KEY = "sk-billing-e2e-master"


def _bin(name: str) -> str:
    found = Path(sys.executable).parent / name
    if found.exists():
        return str(found)
    which = shutil.which(name)
    if which is None:
        raise RuntimeError(f"{name} is not installed in this environment")
    return which


class _Process:
    def __init__(self, argv: list[str], env: dict[str, str], workdir: Path, name: str) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / f"{name}.log"
        self.argv = argv
        self.env = {**os.environ, **env, "PYTHONPATH": str(REPO)}
        self.env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            self.argv, env=self.env, cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=die_with_parent,
        )  # fmt: skip

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if not self.alive:
            return
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]


class BillingWorker(_Process):
    """``billing worker`` (beat embedded) in ``workdir``, its state under ``workdir/var``."""

    def __init__(self, env: dict[str, str], workdir: Path) -> None:
        super().__init__([_bin("billing"), "worker", "--concurrency", "1"], env, workdir, "worker")


class LiteLLMProxy(_Process):
    """The LiteLLM proxy serving ``config`` on a free loopback port."""

    def __init__(self, config: Path, env: dict[str, str], workdir: Path) -> None:
        self.port = free_port()
        proxy_env = {
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_MASTER_KEY": MASTER_KEY,
            "LITELLM_LOG": "ERROR",
            "NO_PROXY": "127.0.0.1,localhost",
            **env,
        }
        argv = [_bin("litellm"), "--config", str(config), "--host", "127.0.0.1",
                "--port", str(self.port)]  # fmt: skip
        super().__init__(argv, proxy_env, workdir, "litellm")
        # LiteLLM reads DATABASE_URL as its own (virtual keys, spend): never the ledger's.
        self.env.pop("DATABASE_URL", None)
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        """SIGINT first: the proxy exits cleanly and the hook's tee flushes (docs/gateway.md)."""
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=20)
        super().stop()

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.port}/health/liveliness"
        while time.monotonic() < deadline:
            if not self.alive:
                raise RuntimeError(f"the LiteLLM proxy exited:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=1) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"the LiteLLM proxy did not answer in {timeout}s:\n{self.log_tail()}")


@dataclass(frozen=True)
class Call:
    """One call as the ledger decided it."""

    request_id: str
    account_id: str
    model: str
    stream: bool
    status: str
    reason: str | None
    usage_source: str | None
    prompt_tokens: int | None
    cached_tokens: int | None
    completion_tokens: int | None
    charge_micros: int | None


def ledger(sessions: sessionmaker[Session], accounts: list[str]) -> list[Call]:
    """Every call of ``accounts``, with its usage record and failure when it has them."""
    with sessions() as s:
        rows = s.execute(
            select(Reservation, UsageRecord, Failure.reason)
            .outerjoin(UsageRecord, UsageRecord.reservation_id == Reservation.id)
            .outerjoin(Failure, Failure.reservation_id == Reservation.id)
            .where(Reservation.account_id.in_(accounts))
            .order_by(Reservation.created_at, Reservation.id)
        ).all()
    calls = []
    for reservation, usage, reason in rows:
        calls.append(
            Call(
                request_id=reservation.request_id,
                account_id=reservation.account_id,
                model=reservation.model,
                stream=reservation.stream,
                status=reservation.status,
                reason=reason,
                usage_source=usage.usage_source if usage else None,
                prompt_tokens=usage.prompt_tokens if usage else None,
                cached_tokens=usage.cached_tokens if usage else None,
                completion_tokens=usage.completion_tokens if usage else None,
                charge_micros=usage.charge_micros if usage else None,
            )
        )
    return calls


def wait_decided(
    sessions: sessionmaker[Session],
    accounts: list[str],
    count: int,
    *,
    timeout: float = 40,
    processes: tuple[_Process, ...] = (),
) -> list[Call]:
    """Wait until ``count`` calls of ``accounts`` left ``held``; the ledger's calls then."""
    deadline = time.monotonic() + timeout
    calls: list[Call] = []
    while time.monotonic() < deadline:
        calls = ledger(sessions, accounts)
        if len(calls) >= count and all(call.status != "held" for call in calls):
            return calls
        for process in processes:
            if not process.alive:
                raise AssertionError(f"{process.argv[0]} exited:\n{process.log_tail()}")
        time.sleep(0.25)
    logs = "\n".join(p.log_tail(1500) for p in processes)
    raise AssertionError(f"timed out: {count} calls wanted, the ledger has {calls}\n{logs}")


def oracle_charge(prices: dict[str, str], usage: dict[str, Any]) -> int:
    """micro-USD for an OpenAI-shaped usage block at ``prices`` (USD per 1M tokens: ``input``,
    ``cached_input``, ``output``): uncached prompt, cached prompt and completion (reasoning inside
    it) each at their price, summed, rounded half-up once."""
    prompt = int(usage["prompt_tokens"])
    cached = int(((usage.get("prompt_tokens_details") or {}).get("cached_tokens")) or 0)
    completion = int(usage["completion_tokens"])
    total = (
        Decimal(prompt - cached) * Decimal(prices["input"])
        + Decimal(cached) * Decimal(prices.get("cached_input", prices["input"]))
        + Decimal(completion) * Decimal(prices["output"])
    )
    return int(total.quantize(Decimal(1), rounding=ROUND_HALF_UP))
