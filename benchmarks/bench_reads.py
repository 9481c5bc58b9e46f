"""How fast the read commands answer on a small SQLite ledger, against a bare ``python -c pass``.

The ledger is a fresh SQLite file at the migrations' head with ``CALLS`` settled calls of the
simulator (fault-free, fixed seed: ``benchmarks.harness.history.settled_results``), each held and
settled as the worker does (``hold``, ``apply_result``, ``record_findings``). Each command is a
fresh process of the console script pip installed, started in turn with the bare interpreter so
that a busy moment of the shared machine falls on all of them alike; the figure is the median wall
time of each. Target (issue 39): every command <= 300 ms. What a command imports is checked by
tests/cli/test_read_imports.py, not here.

``billing unsettled`` is benchmarked as ``unsettled list`` (the command that existed when the row
was written); ``doctor`` runs every check, against the benchmark's Redis under a prefix of its own.

    .venv/bin/python -m benchmarks.bench_reads [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from benchmarks.harness import services
from benchmarks.harness.history import settled_results

TARGET_MS = 300.0
CALLS = 200
BILLING = str(Path(sys.executable).parent / "billing")
PREFIX = "bench-reads"


def seed(url: str, calls: int) -> dict[str, str]:
    """A ledger at head with ``calls`` settled calls; what the commands are asked about."""
    from worker.ledger.database import make_engine, session_factory, upgrade
    from worker.ledger.findings import record_findings
    from worker.ledger.operations import apply_result, hold

    upgrade(url)
    work = settled_results(calls, run_id="reads")
    engine = make_engine(url)
    try:
        with session_factory(engine)() as session, session.begin():
            for meta, result in work:
                at = meta.created_at
                hold(session, meta, now=at)
                effect = apply_result(session, result, now=at, grace=timedelta(hours=1))
                record_findings(session, result, effect, salt="bench-reads", now=at, meta=meta)
    finally:
        engine.dispose()
    meta, _ = work[-1]
    return {
        "account": meta.account_id,
        "request_id": meta.request_id,
        "model": meta.model,
        "month": meta.created_at.strftime("%Y-%m"),
    }


def commands(about: dict[str, str]) -> dict[str, list[str]]:
    return {
        "balance": ["balance", about["account"]],
        "show": ["show", about["request_id"]],
        "unsettled": ["unsettled", "list"],
        "prices_which": ["prices", "which", about["model"]],
        "statement": ["statement", about["account"], "--month", about["month"]],
        "doctor": ["doctor"],
    }


def _once(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=120)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[1:])} exited {done.returncode}: {done.stderr.strip()}")
    return elapsed


def run(smoke: bool = False) -> dict[str, Any]:
    # The smoke size runs each command once, cold: it shows the row is produced, not its figure.
    rounds = 1 if smoke else 20
    calls = 20 if smoke else CALLS
    with tempfile.TemporaryDirectory(prefix="bench-reads-") as directory:
        url = f"sqlite:///{Path(directory) / 'billing.db'}"
        about = seed(url, calls)
        env = {
            **os.environ,
            "DATABASE_URL": url,
            "REDIS_URL": services.redis_url(),
            "BILLING_PREFIX": PREFIX,
        }
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        argvs = {"bare": [sys.executable, "-c", "pass"]} | {
            name: [BILLING, *args] for name, args in commands(about).items()
        }
        for argv in argvs.values() if not smoke else ():  # warm the page cache and bytecode
            _once(argv, env)
        times: dict[str, list[float]] = {name: [] for name in argvs}
        for _ in range(rounds):
            for name, argv in argvs.items():
                times[name].append(_once(argv, env))
    figures: dict[str, Any] = {"rounds": rounds, "calls": calls, "target_ms": TARGET_MS}
    for name, values in times.items():
        figures[f"{name}_ms"] = statistics.median(values) * 1000
        figures[f"{name}_min_ms"] = min(values) * 1000
    for name in commands(about):
        figures[f"{name}_ratio"] = figures[f"{name}_ms"] / figures["bare_ms"]
        figures[f"{name}_meets_target"] = figures[f"{name}_ms"] <= TARGET_MS
    figures["commands"] = {name: " ".join(args) for name, args in commands(about).items()}
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    print(json.dumps(run(parser.parse_args().smoke), indent=2))
