"""Where and when the figures were measured: cores, CPU, Python, server versions, date, command."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.harness import services


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _revision() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}{' (uncommitted changes)' if dirty else ''}"


def describe(argv: list[str]) -> dict[str, str]:
    versions = services.server_versions()
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(["python -m benchmarks", *argv]),
        "machine": f"{os.cpu_count()} cores, {_cpu_model()}, {platform.system()} {platform.release()}",
        "python": f"Python {sys.version.split()[0]} ({platform.python_implementation()})",
        "redis": versions["redis"],
        "postgresql": versions["postgresql"],
        "revision": _revision(),
    }
