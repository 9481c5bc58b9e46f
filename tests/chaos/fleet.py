"""Real Celery worker processes (each with an embedded beat) that a fault may kill with SIGKILL.

Every worker runs in its own process group, so ``kill`` takes the main process and its pool children
at once, as a machine losing power would. Each has its own directory (beat schedule, logs), so two
of them never share a beat schedule file; both running beat only means twice as many drain ticks,
which the consumer group shares out.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from devtools.localservers.processes import die_with_parent

REPO = Path(__file__).resolve().parents[2]


def worker_env(
    redis_url: str, broker_url: str, database_url: str, prefix: str, **overrides: str
) -> dict[str, str]:
    """The environment of a chaos worker: short timings, so claims and sweeps happen within a test."""
    env = {
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": broker_url,
        "DATABASE_URL": database_url,
        "BILLING_PREFIX": prefix,
        "BILLING_DRAIN_MS": "1000",
        "BILLING_BLOCK_MS": "100",
        "BILLING_CLAIM_IDLE_MS": "2000",
        "BILLING_SWEEP_IDLE_MS": "3000",
        # Beat gives a sweep task one interval before it expires; with 1 s a pool busy with
        # back-to-back drains could drop every sweep (seen once with one single-process worker).
        "BILLING_SWEEP_INTERVAL_SECONDS": "2",
        "BILLING_RECHECK_SECONDS": "1",
        "BILLING_GRACE_SECONDS": "3600",
    }
    env.update(overrides)
    return env


class Worker:
    """One ``celery worker --beat`` process group."""

    def __init__(self, env: dict[str, str], workdir: Path, name: str, concurrency: int = 2) -> None:
        self.env = {**os.environ, **env, "PYTHONPATH": str(REPO)}
        self.env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.concurrency = concurrency
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = open(self.workdir / f"worker-{self.starts}.log", "wb")  # noqa: SIM115
        argv = [
            sys.executable, "-m", "celery", "-A", "worker.service.app", "worker",
            f"--concurrency={self.concurrency}", "--loglevel=INFO", "--without-gossip",
            "--without-mingle", "--without-heartbeat", f"--hostname={self.name}-{self.starts}@%h",
            "--beat", f"--schedule={self.workdir / 'beat-schedule'}",
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            argv, env=self.env, cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=die_with_parent,
        )  # fmt: skip

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """kill -9 the worker's whole process group (main process, pool children, beat)."""
        if self.alive:
            assert self.proc is not None
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        self.terminate()
        self.wait_stopped(time.monotonic() + 20)

    def terminate(self) -> None:
        """SIGTERM: Celery's warm shutdown (the running task finishes, then the worker exits)."""
        if self.alive:
            assert self.proc is not None
            os.killpg(self.proc.pid, signal.SIGTERM)

    def wait_stopped(self, deadline: float) -> None:
        """Wait for the exit ``terminate`` asked for until ``deadline``; kill -9 after it."""
        if self.alive:
            assert self.proc is not None
            try:
                self.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill()

    def log_text(self) -> str:
        return "\n".join(
            path.read_text(errors="replace") for path in sorted(self.workdir.glob("worker-*.log"))
        )


class Fleet:
    """A few workers sharing one consumer group; ``kill_random`` is the kill -9 fault."""

    def __init__(self, env: dict[str, str], workdir: Path, size: int = 2) -> None:
        self.workers = [Worker(env, workdir / f"w{i}", f"w{i}") for i in range(size)]
        self.kills = 0
        self.revivals = 0

    def start(self) -> None:
        for worker in self.workers:
            worker.start()

    def stop(self) -> None:
        """Every worker's warm shutdown at once (one after the other, each took a few seconds)."""
        for worker in self.workers:
            worker.terminate()
        deadline = time.monotonic() + 20
        for worker in self.workers:
            worker.wait_stopped(deadline)

    def kill_random(self, rng: random.Random, down_seconds: float = 0.5) -> str:
        """SIGKILL one worker at random, then start it again; the survivor claims its batch."""
        worker = rng.choice(self.workers)
        worker.kill()
        self.kills += 1
        time.sleep(down_seconds)
        worker.start()
        return worker.name

    def revive(self) -> list[str]:
        """Start again every worker that exited (what a process supervisor does); their names."""
        revived = []
        for worker in self.workers:
            if not worker.alive:
                worker.start()
                self.revivals += 1
                revived.append(worker.name)
        return revived

    def check_alive(self) -> None:
        for worker in self.workers:
            if not worker.alive:
                raise AssertionError(f"worker {worker.name} exited:\n{worker.log_text()[-3000:]}")

    def logs(self) -> str:
        return "\n".join(worker.log_text() for worker in self.workers)
