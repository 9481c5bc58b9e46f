"""Issue 39, points 6 and 7: a worker says what is wrong, once, and is otherwise quiet.

One real Celery worker (as docker-compose.yml starts it, with beat embedded, one pool process, its
own Redis) on a database that refuses connections, watched for a few seconds after it is ready. Beat sends a drain
and a look for retired streams every second, each received, failing to start and returning: before,
that was six lines a second (received, succeeded and sent, for two tasks) plus a warning per task
naming only ``OperationalError``. Now: one warning that names the cause, without the password.

The pieces are tested alone below: the limiter on its own clock, the cause of an error.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devtools.localservers.ports import free_port
from devtools.localservers.processes import wait_for
from devtools.localservers.redis_server import PrivateRedis
from worker.service.logs import Limiter, cause

pytestmark = pytest.mark.e2e

SECRET = "Pw7secretXq"
WATCH_SECONDS = 3.0
# A log line as Celery writes it: "[time: LEVEL/Process] message".
LINE = re.compile(r"^\[[^\]]+: (?P<level>[A-Z]+)/(?P<process>[^\]]+)\] (?P<message>.*)$")


def test_a_worker_on_a_dead_database_says_why_once_and_nothing_else(tmp_path: Path) -> None:
    server = PrivateRedis(tmp_path / "redis", appendonly=False)
    server.start()
    port = free_port()  # nothing listens there
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("BILLING_", "CELERY_"))},
        "REDIS_URL": server.url(0),
        "DATABASE_URL": f"postgresql://billing:{SECRET}@127.0.0.1:{port}/billing",
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prometheus"),
    }
    log = tmp_path / "worker.log"
    celery = Path(sys.executable).parent / "celery"
    with log.open("w") as out:
        worker = subprocess.Popen(
            # As docker-compose.yml runs it, with beat embedded as `billing worker` does.
            [
                str(celery),
                "-A",
                "worker.service.app",
                "worker",
                "--loglevel=INFO",
                "--concurrency=1",
                "--without-gossip",
                "--without-mingle",
                "--beat",
                f"--schedule={tmp_path / 'beat-schedule'}",
            ],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: " ready." in log.read_text(), 60, "the worker ready")
        ready_at = len(log.read_text().splitlines())
        time.sleep(WATCH_SECONDS)
        lines = log.read_text().splitlines()[ready_at:]
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        server.stop()
    logged = [m for line in lines if (m := LINE.match(line))]
    # Three drains at least were sent and failed in the window (they are counted, not logged).
    assert len(logged) <= 2, "\n".join(lines)
    warnings = [m["message"] for m in logged if m["level"] == "WARNING"]
    assert len(warnings) == 1, "\n".join(lines)
    assert "not started: OperationalError" in warnings[0]
    assert f'"127.0.0.1", port {port} failed: Connection refused' in warnings[0]
    assert SECRET not in log.read_text()


def test_the_limiter_admits_one_line_per_cause_a_minute() -> None:
    now = [0.0]
    limiter = Limiter(seconds=60.0, clock=lambda: now[0])
    assert limiter.admit("refused") == 0
    assert limiter.admit("other cause") == 0
    for t in (1.0, 30.0, 59.9):
        now[0] = t
        assert limiter.admit("refused") is None
    now[0] = 60.0
    assert limiter.admit("refused") == 3  # the next line says how many it stands for
    assert limiter.admit("other cause") == 0
    now[0] = 119.9
    assert limiter.admit("refused") is None


def test_a_cause_is_one_line_without_secrets() -> None:
    from sqlalchemy.exc import OperationalError

    inner = ValueError(f"cannot reach redis://:{SECRET}@db.internal:6379/0\nsecond line")
    found = cause(OperationalError("SELECT 1", {}, inner))
    assert found == "OperationalError: cannot reach redis://:***@db.internal:6379/0"
    assert cause(ConnectionError()) == "ConnectionError"
    assert len(cause(ValueError("x" * 1000))) <= 300


def test_an_expired_billing_task_is_counted_not_logged() -> None:
    """A drain that expired before a process was free (a busy machine) is routine: no line, a
    count; another task's expiry still logs as Celery logs it."""
    import logging

    from worker.metrics import EXPIRED_TASKS
    from worker.service.logs import RoutineFilter

    def record(name: str) -> logging.LogRecord:
        return logging.LogRecord(
            "celery.worker.request", logging.INFO, __file__, 1,
            "Discarding revoked task: %s[%s]", (name, "0f9e"), None,
        )  # fmt: skip

    before = EXPIRED_TASKS.labels(task="drain")._value.get()
    keep = RoutineFilter()
    assert keep.filter(record("billing.drain")) is False
    assert keep.filter(record("billing.drain")) is False
    assert EXPIRED_TASKS.labels(task="drain")._value.get() == before + 2
    assert keep.filter(record("other.task")) is True


def test_the_expired_counter_knows_every_billing_task() -> None:
    import worker.service.tasks  # noqa: F401 - registers the billing tasks
    from worker.metrics import TASK_NAMES
    from worker.service.app import app

    billing = sorted(n.removeprefix("billing.") for n in app.tasks if n.startswith("billing."))
    assert sorted(TASK_NAMES) == billing
