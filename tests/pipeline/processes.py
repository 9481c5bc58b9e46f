"""Real Celery worker processes for the end-to-end tests: started, waited on, killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path


class WorkerProcess:
    """``celery worker`` (with embedded beat) in its own process group, so kill -9 takes it whole."""

    def __init__(
        self, env: dict[str, str], workdir: Path, *, beat: bool = True, concurrency: int = 2
    ):
        self.env = {**os.environ, **env}
        self.workdir = workdir
        self.beat = beat
        self.concurrency = concurrency
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = open(self.workdir / f"worker-{self.starts}.log", "wb")  # noqa: SIM115
        argv = [
            sys.executable, "-m", "celery", "-A", "worker.pipeline.app", "worker",
            f"--concurrency={self.concurrency}", "--loglevel=INFO", "--without-gossip",
            "--without-mingle", "--without-heartbeat", f"--hostname=w{self.starts}@%h",
        ]  # fmt: skip
        if self.beat:
            argv += ["--beat", f"--schedule={self.workdir / 'beat-schedule'}"]
        self.proc = subprocess.Popen(
            argv, env=self.env, cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    def kill(self) -> None:
        """kill -9 the worker and its pool children."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()

    def logs(self) -> str:
        return "\n".join(
            p.read_text(errors="replace")[-4000:] for p in self.workdir.glob("worker-*.log")
        )


def wait_for(
    condition: Callable[[], bool], timeout: float, what: str, on_fail: Callable[[], str]
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{on_fail()}")
