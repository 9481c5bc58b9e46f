"""``billing export calls`` over a million calls: time and peak RSS, against a plain ``SELECT``.

The seed is row 7's (``bench_report.seed``: the ledger the worker writes for ``SETTLED`` settled calls
and the unsettled and void calls beside them, about 1.015 M calls over 30 days). Each measurement is a
fresh process (so its peak RSS, ``ru_maxrss``, is its own):

* ours: ``run_export`` of every call to Parquet (what ``billing export calls --format parquet``
  runs), and the same over the first tenth of the window, whose peak RSS the whole export's must
  stay within ``RSS_TARGET`` of: memory that does not grow with the rows is the point;
* the peer: the same ``SELECT`` (``export.calls_query``) streamed the same way and its rows
  dropped: what reading the rows costs, without converting or writing them.

The time ratio is ours over the peer's (information, not a target); the memory ratio the whole
export's peak RSS over the tenth's.

    .venv/bin/python -m benchmarks.bench_export [--smoke]
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks import bench_report
from benchmarks.harness import services

SETTLED = bench_report.SETTLED
RSS_TARGET = 1.25
START = datetime(2026, 1, 1, tzinfo=UTC)  # the seed's first call
WHOLE = (START, START + timedelta(days=bench_report.DAYS + 1))
TENTH = (START, START + timedelta(days=bench_report.DAYS / 10))


def _child(kind: str, url: str, since: str, until: str, out: str) -> None:
    """One measurement in this (fresh) process; prints its figures as JSON."""
    from worker.ledger.database import make_engine
    from worker.reports import connect_args, snapshot
    from worker.reports.export import BATCH, calls_query, run_export

    window = (datetime.fromisoformat(since), datetime.fromisoformat(until))
    started = time.perf_counter()
    if kind == "export":
        written = run_export(url, *window, "parquet", Path(out), per_day=False)
        rows = written.calls
    else:
        engine = make_engine(url, readonly=True, **connect_args(url))
        rows = 0
        with snapshot(engine) as conn:
            result = conn.execute(
                calls_query(*window),
                execution_options={"stream_results": True, "yield_per": BATCH},
            )
            for batch in result.partitions(BATCH):
                rows += len(batch)
        engine.dispose()
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    print(json.dumps({"seconds": seconds, "rows": rows, "peak_rss": peak}))


def _measure(kind: str, url: str, window: tuple[datetime, datetime], out: Path) -> dict[str, Any]:
    argv = [sys.executable, "-m", "benchmarks.bench_export", "--child", kind, url,
            window[0].isoformat(), window[1].isoformat(), str(out)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"export benchmark child {kind} failed: {done.stderr[-2000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def run(smoke: bool = False) -> dict[str, Any]:
    settled = 200 if smoke else SETTLED
    with services.pg_database("export") as url, tempfile.TemporaryDirectory() as work:
        loaded = bench_report.seed(url, settled)
        out = Path(work) / "calls.parquet"
        peer = _measure("select", url, WHOLE, out)
        ours = _measure("export", url, WHOLE, out)
        size = out.stat().st_size
        tenth = _measure("export", url, TENTH, Path(work) / "tenth.parquet")
    if ours["rows"] != loaded["calls"] or peer["rows"] != loaded["calls"]:
        raise AssertionError(f"exported {ours['rows']}, selected {peer['rows']}: {loaded['calls']}")
    rss_ratio = ours["peak_rss"] / tenth["peak_rss"]
    return {
        "calls": loaded["calls"],
        "ours_seconds": ours["seconds"],
        "peer_seconds": peer["seconds"],
        "ratio": ours["seconds"] / peer["seconds"],
        "ours_rss_mb": ours["peak_rss"] / 2**20,
        "peer_rss_mb": peer["peak_rss"] / 2**20,
        "tenth_calls": tenth["rows"],
        "tenth_rss_mb": tenth["peak_rss"] / 2**20,
        "rss_ratio": rss_ratio,
        "rss_target": RSS_TARGET,
        "meets_target": rss_ratio <= RSS_TARGET,
        "file_mb": size / 2**20,
        "calls_per_s": ours["rows"] / ours["seconds"],
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(*sys.argv[2:7])
    else:
        print(json.dumps(run(smoke="--smoke" in sys.argv), indent=2))
