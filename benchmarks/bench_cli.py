"""How fast ``billing --help`` and ``billing show --help`` answer, against a bare ``python -c pass``.

Each is a fresh process of the same interpreter (the venv's), started in turn with the others so that
a busy moment of the shared machine falls on all of them alike; the figure is the median wall time of
each, and the ratio the command's over the bare start's. Target (issue 15): ratio <= 8. The heavy
libraries each leaves loaded are checked by tests/cli/test_startup.py, not here.

    .venv/bin/python -m benchmarks.bench_cli [--smoke]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_RATIO = 8.0
BILLING = str(Path(sys.executable).parent / "billing")  # the console script pip installed
COMMANDS = {"help": ["--help"], "show_help": ["show", "--help"]}


def _once(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def run(smoke: bool = False) -> dict[str, object]:
    rounds = 5 if smoke else 40
    argvs = {"bare": [sys.executable, "-c", "pass"]} | {
        name: [BILLING, *args] for name, args in COMMANDS.items()
    }
    for argv in argvs.values():  # warm the page cache and the bytecode files
        _once(argv)
    times: dict[str, list[float]] = {name: [] for name in argvs}
    for _ in range(rounds):
        for name, argv in argvs.items():
            times[name].append(_once(argv))
    median = {name: statistics.median(values) for name, values in times.items()}
    fastest = {name: min(values) for name, values in times.items()}
    figures: dict[str, object] = {"rounds": rounds, "target_ratio": TARGET_RATIO}
    for name in argvs:
        figures[f"{name}_ms"] = median[name] * 1000
        figures[f"{name}_min_ms"] = fastest[name] * 1000
    for name in COMMANDS:
        ratio = median[name] / median["bare"]
        figures[f"{name}_ratio"] = ratio
        figures[f"{name}_min_ratio"] = fastest[name] / fastest["bare"]
        figures[f"{name}_meets_target"] = ratio <= TARGET_RATIO
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    print(json.dumps(run(parser.parse_args().smoke), indent=2))
