"""A harness killed from outside (a timeout's SIGKILL) leaves nothing running: its private Redis
and its busy-loop hogs die with it (parent-death signal), and a daemonized server is stopped by its
watchdog (``reap_on_exit``). Before, a stopped chaos run left workers and servers eating the CPU
of every later run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

HARNESS = """
import sys, time
from pathlib import Path
from tests.chaos.harness import Hogs
from devtools.localservers.processes import reap_on_exit
from devtools.localservers.redis_server import PrivateRedis

redis = PrivateRedis(Path(sys.argv[1]))
redis.start()
hogs = Hogs(1)
hogs.start()
reap_on_exit(["touch", sys.argv[2]])
print(redis.proc.pid, hogs.procs[0].pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead too: its parent (the killed harness) is gone and init reaps it.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split()[2] != "Z"


def test_what_the_harness_started_dies_with_it(tmp_path: Path) -> None:
    marker = tmp_path / "reaped"
    harness = subprocess.Popen(
        [sys.executable, "-c", HARNESS, str(tmp_path / "redis"), str(marker)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
    )
    assert harness.stdout is not None
    pids = [int(pid) for pid in harness.stdout.readline().split()]
    assert len(pids) == 2 and all(_alive(pid) for pid in pids)
    harness.send_signal(signal.SIGKILL)
    harness.wait()
    for _ in range(200):  # the kernel signals the children at once; give them time to exit
        if not any(_alive(pid) for pid in pids) and marker.exists():
            break
        time.sleep(0.05)
    try:
        assert [pid for pid in pids if _alive(pid)] == []
        assert marker.exists(), "the watchdog did not run its command"
    finally:
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
