"""Waiting for a server to answer, and reaping what a process started when that process dies."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from devtools.localservers import ServerStartError

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """For ``preexec_fn``, in a child before exec: on Linux the kernel sends it SIGTERM when the
    process that started it dies, however it dies (a timeout's SIGKILL included), so no server or
    worker outlives its run as an orphan. Elsewhere a no-op."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def reap_on_exit(argv: list[str]) -> subprocess.Popen[bytes]:
    """A watchdog process that runs ``argv`` when this process dies, however it dies: it waits for
    the end of a pipe only this process holds open. For servers that daemonize (``pg_ctl``), which a
    parent-death signal cannot reach. Kill the watchdog to stand it down."""
    code = "import subprocess, sys; sys.stdin.buffer.read(); subprocess.run(sys.argv[1:])"
    return subprocess.Popen(
        [sys.executable, "-c", code, *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def wait_for(
    ready: Callable[[], bool],
    timeout: float,
    what: str,
    *,
    transient: tuple[type[BaseException], ...] = (OSError,),
    every: float = 0.05,
) -> None:
    """Poll ``ready`` until it returns true; an error in ``transient`` counts as not ready yet.
    Raises ``ServerStartError`` naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if ready():
                return
        except transient:
            pass
        if time.monotonic() >= deadline:
            raise ServerStartError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


def alive(pid: int) -> bool:
    """Running, and not a zombie waiting for its parent (or init) to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
