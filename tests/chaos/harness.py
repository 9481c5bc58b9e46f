"""One chaos run: private services, real workers, a seeded simulator run, a fault, then the books.

``ChaosRun`` owns a fresh ledger database on the private PostgreSQL, a key prefix and the Celery broker
database on the private Redis, and a ``Fleet`` of worker processes. ``publish`` plays the plan while
a fault thread injects its fault; ``settle`` waits until the ledger has decided every call and the
notification backlog is empty; ``verdict`` compares the ledger with the model. ``Figures`` is the line
each fault prints: calls, faults injected, lost, charged twice, wrong outcome (all three must be 0).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.orm import sessionmaker

from devtools.localservers.postgres_server import PrivatePostgres
from devtools.localservers.processes import die_with_parent
from devtools.localservers.redis_server import PrivateRedis
from worker.consumer.backlog import stream_backlog
from worker.contract.keys import Keys
from worker.ledger.database import make_engine
from worker.simulation.calls import SimCall

from .fleet import Fleet, worker_env
from .model import Verdict, check, dead_letter_ids, decided, digest, read_ledger


@dataclass
class Figures:
    fault: str
    calls: int
    injected: int
    sim_faults: int
    lost: int
    charged_twice: int
    wrong_outcome: int
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        extra = " ".join(f"{k}={v}" for k, v in self.extra.items())
        return (
            f"{self.fault:<22} calls={self.calls} faults_injected={self.injected} "
            f"sim_faults={self.sim_faults} lost={self.lost} charged_twice={self.charged_twice} "
            f"wrong_outcome={self.wrong_outcome} time={self.seconds:.0f}s {extra}"
        ).rstrip()


class LagProbe:
    """Samples the consumer group's backlog (undelivered + pending) a few times a second."""

    def __init__(self, client: Any, keys: Keys, interval: float = 0.25) -> None:
        self.client = client
        self.keys = keys
        self.interval = interval
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lag-probe", daemon=True)
        self._started = time.monotonic()

    def backlog(self) -> int | None:
        try:
            info = stream_backlog(self.client, self.keys.events(), self.keys.group)
        except Exception:  # Redis restarting: no sample
            return None
        lag = info.lag if info.lag is not None else 0
        return lag + info.pending

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            value = self.backlog()
            if value is not None:
                self.samples.append((time.monotonic() - self._started, value))

    def start(self) -> LagProbe:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def max(self) -> int:
        return max((value for _, value in self.samples), default=0)


class Hogs:
    """A CPU hog per core (busy loops in their own processes), for the *busy machine* mode."""

    def __init__(self, count: int | None = None) -> None:
        self.count = count or os.cpu_count() or 2
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        for _ in range(self.count):
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", "while True: pass"], preexec_fn=die_with_parent
                )
            )

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()
        self.procs.clear()


def busy_mode() -> bool:
    """``make chaos-busy`` (``--chaos-busy`` or ``CHAOS_BUSY=1``): every run gets a CPU hog per
    core and one more worker process."""
    return os.environ.get("CHAOS_BUSY", "") not in ("", "0")


class Background:
    """``work`` in a thread; ``join`` waits and re-raises its error."""

    def __init__(self, work: Callable[[], Any], name: str) -> None:
        self._box: dict[str, Any] = {}

        def target() -> None:
            try:
                self._box["value"] = work()
            except BaseException as exc:
                self._box["error"] = exc

        self._thread = threading.Thread(target=target, name=name, daemon=True)
        self._thread.start()

    def done(self) -> bool:
        return not self._thread.is_alive()

    def join(self) -> Any:
        self._thread.join()
        if "error" in self._box:
            raise self._box["error"]
        return self._box.get("value")


class ChaosRun:
    def __init__(
        self,
        name: str,
        redis_server: PrivateRedis,
        postgres: PrivatePostgres,
        workdir: Path,
        *,
        workers: int = 2,
        supervised: bool = False,
        **env: str,
    ) -> None:
        # supervised: a worker that exits is started again, as compose's `restart: unless-stopped`
        # or systemd would; otherwise an exited worker fails the run.
        self.supervised = supervised
        self.name = name
        self.redis = redis_server
        self.postgres = postgres
        self.prefix = f"chaos-{name}-{uuid.uuid4().hex[:6]}"
        self.keys = Keys(self.prefix)
        self.database_url = postgres.create_database(f"chaos_{name}_{uuid.uuid4().hex[:6]}")
        broker = redis_server.url(1)
        redis_server.client(1).flushdb()
        self.env = worker_env(redis_server.url(0), broker, self.database_url, self.prefix, **env)
        self.busy = busy_mode()
        self.hogs = Hogs() if self.busy else None
        self.fleet = Fleet(self.env, workdir / self.prefix, size=workers + self.busy)
        self.engine = make_engine(self.database_url, pool_pre_ping=True)
        self.sessions = sessionmaker(self.engine)
        self.started = time.monotonic()
        self.progress: list[tuple[float, int, int | None]] = []

    # -- running -------------------------------------------------------------------------------

    def start(self) -> ChaosRun:
        if self.hogs is not None:
            self.hogs.start()
        self.fleet.start()
        return self

    def stop(self) -> None:
        try:
            self.fleet.stop()
        finally:
            if self.hogs is not None:
                self.hogs.stop()
            self.engine.dispose()

    def __enter__(self) -> ChaosRun:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def in_background(self, work: Callable[[], Any]) -> Background:
        return Background(work, f"{self.name}-gateway")

    def dead_letters(self) -> list[tuple[bytes, dict[bytes, bytes]]]:
        return self.redis.client().xrange(self.keys.dead, "-", "+")

    def settle(self, calls: list[SimCall], timeout: float) -> None:
        """Wait until every call is decided, every dead letter written, and the backlog is empty."""
        client = self.redis.client()
        probe = LagProbe(client, self.keys)
        want_dead = {c.request_id for c in calls if c.expected.dead_letter is not None}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.supervised:
                self.fleet.revive()
            else:
                self.fleet.check_alive()
            with self.sessions() as session:
                booked = read_ledger(session)
            done = decided(calls, booked)
            self.progress.append(
                (round(time.monotonic() - self.started, 1), len(booked), probe.backlog())
            )
            if not done:
                waiting = [c.request_id for c in calls if not decided([c], booked)][:3]
                print("settling", self.name, self.progress[-1], "waiting for", waiting, flush=True)
            if done and probe.backlog() == 0:
                lettered = set(dead_letter_ids(self.dead_letters()))
                if want_dead <= lettered:
                    return
            time.sleep(0.5)
        # Not settled: the verdict will say what is missing.

    def verdict(self, calls: list[SimCall]) -> Verdict:
        with self.sessions() as session:
            return check(calls, session, self.dead_letters())

    def digest(self) -> str:
        with self.sessions() as session:
            return digest(read_ledger(session))

    def worker_errors(self) -> int:
        """Log lines where a worker met a broken connection or deferred a call (the fault landed)."""
        marks = ("interrupted", "deferred", "OperationalError", "ConnectionError", "Traceback")
        return sum(
            1 for line in self.fleet.logs().splitlines() if any(mark in line for mark in marks)
        )

    def figures(
        self, verdict: Verdict, calls: list[SimCall], injected: int, **extra: Any
    ) -> Figures:
        extra.setdefault("worker_error_lines", self.worker_errors())
        extra["dead_letters"] = verdict.dead_letters
        return Figures(
            fault=self.name,
            calls=len(calls),
            injected=injected,
            sim_faults=sum(1 for call in calls if call.fault is not None),
            lost=verdict.lost,
            charged_twice=verdict.charged_twice,
            wrong_outcome=verdict.wrong_outcome,
            seconds=time.monotonic() - self.started,
            extra={**extra, "busy": self.busy} if self.busy else extra,
        )


def assert_clean(verdict: Verdict, figures: Figures, logs: str = "") -> None:
    """The three figures must be 0, and every other check of the model must hold."""
    detail = "\n".join(verdict.problems)
    assert verdict.ok, (
        f"{figures.line()}\n{verdict}\n{detail}\n--- worker logs (tail)\n{logs[-4000:]}"
    )
