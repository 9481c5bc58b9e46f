"""``billing_task``, the one guard of the Celery tasks (issue 40): a transient database or Redis
error is logged, counted and swallowed (the next beat tick tries again); any other error propagates.
Run in a child process, as a worker runs them: a real runtime on a migrated SQLite ledger, a Redis
URL nothing listens on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from devtools.localservers.ports import free_port

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json
from worker import metrics
from worker.service import tasks

@tasks.billing_task("billing.test_value_error", "probe")
def broken(rt, value):
    raise ValueError(value)

found = {"sweep": tasks.sweep(), "drain_retired": tasks.drain_retired()}
found["counted"] = {
    task: metrics.INTERRUPTED.labels(task)._value.get() for task in ("sweep", "drain", "probe")
}
try:
    broken("not transient")
except ValueError as exc:
    found["raised"] = str(exc)
found["names"] = [tasks.sweep.name, tasks.drain.name, broken.name]
print(json.dumps(found))
"""


def test_a_transient_error_is_counted_and_any_other_raised(tmp_path: Path) -> None:
    env = {
        "DATABASE_URL": f"sqlite:///{tmp_path}/b.db",
        "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",  # nothing listens there
        "BILLING_HASH_SALT": "a-secret-of-this-test-only",
        "PATH": "/usr/bin:/bin",
    }
    subprocess.run(
        [str(Path(sys.executable).parent / "billing"), "db", "upgrade"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["sweep"] is None and found["drain_retired"] is None
    assert found["counted"] == {"sweep": 1.0, "drain": 1.0, "probe": 0.0}
    assert found["raised"] == "not transient"
    assert found["names"] == ["billing.sweep", "billing.drain", "billing.test_value_error"]
    assert "billing.sweep interrupted: ConnectionError" in out.stderr
