"""A worker process's runtime: built once per process, with the collector tuned for batches."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from worker.service.runtime import GC_THRESHOLDS

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import gc, json
before = gc.get_threshold()
from worker.service import runtime
rt = runtime.current()
print(json.dumps({"before": before, "after": gc.get_threshold(), "frozen": gc.get_freeze_count(),
                  "same": runtime.current() is rt}))
"""


def test_the_runtime_tunes_the_collector_once_per_process(tmp_path: Path) -> None:
    env = {
        "DATABASE_URL": f"sqlite:///{tmp_path}/b.db",
        "BILLING_HASH_SALT": "a-secret-of-this-test-only",  # the database is not migrated
        "PATH": "/usr/bin:/bin",
    }
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert tuple(found["before"]) == (700, 10, 10)  # CPython's own, untouched by importing
    assert tuple(found["after"]) == GC_THRESHOLDS
    assert found["frozen"] > 10_000  # the modules alive after start-up are out of every scan
    assert found["same"]
