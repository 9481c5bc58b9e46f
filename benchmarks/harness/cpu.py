"""CPU time of the servers during a run, from ``/proc/<pid>/stat`` (utime + stime), and of the
whole machine, from ``/proc/stat``.

Redis is one process (its pid from ``INFO server``) shared with everyone using the server. For
PostgreSQL we count the postmaster, its background processes (checkpointer, WAL writer, …) and the
backends of the benchmark's own database, recognised by their process title; backends of other
databases (other people's work) are left out.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

import redis

TICKS = os.sysconf("SC_CLK_TCK")
_CLIENT_BACKEND = re.compile(r"\d+\.\d+\.\d+\.\d+\(\d+\)|\[local\]|::1\(\d+\)")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid``; 0 if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def busy_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies over every CPU of the machine since boot (``/proc/stat``)."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def machine_busy(since: tuple[int, int], cores: int) -> float:
    """Busy CPUs of the whole machine on average since ``since`` (a ``busy_jiffies``)."""
    busy, total = busy_jiffies()
    return cores * (busy - since[0]) / max(1, total - since[1])


def redis_pids(client: redis.Redis) -> list[int]:
    return [int(client.info("server")["process_id"])]


def postgres_pids(database: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
            title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if comm != "postgres" and not title.startswith("postgres"):
            continue
        if database in title or not _CLIENT_BACKEND.search(title):
            found.append(int(entry.name))
    return found


class CpuMeter:
    """CPU seconds spent by a set of processes between ``start`` and ``stop``."""

    def __init__(self, pids: Iterable[int]) -> None:
        self.pids = list(pids)
        self._start: dict[int, float] = {}
        self.seconds = 0.0

    def start(self) -> None:
        self._start = {pid: cpu_seconds(pid) for pid in self.pids}

    def stop(self, more_pids: Iterable[int] = ()) -> float:
        """Seconds spent since ``start``; a process that exited meanwhile counts for nothing."""
        total = 0.0
        for pid in set(self.pids) | set(more_pids):
            now = cpu_seconds(pid)
            if now > 0.0:
                total += max(0.0, now - self._start.get(pid, 0.0))
        self.seconds = total
        return self.seconds
