"""``billing report`` over a million settled calls, against one sequential scan of the same table.

``locate_report`` finds ``worker.reports.bench_entry_point`` (a callable taking the database URL);
while no report is built it returns None and the row says so instead of showing a figure. The
database is seeded in bulk with ``SETTLED`` settled calls (accounts, reservations and
their usage records, spread over 30 days, 20 models and 200 accounts, with ``generate_series``;
add the ledger transactions to ``SEED_SQL`` if the report reads them), then the report and the peer — ``SELECT … sum(…) FROM usage_records`` — are each timed, best of three.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import text

from benchmarks import services
from worker.ledger.database import make_engine

SETTLED = 1_000_000

SEED_SQL = (
    """INSERT INTO accounts (id, created_at)
       SELECT 'acct_' || a, timestamptz '2026-01-01' FROM generate_series(1, 200) a""",
    """INSERT INTO reservations (request_id, account_id, model, stream, reserved_micros, status,
                                 created_at, updated_at)
       SELECT 'req_' || i, 'acct_' || (1 + i % 200), 'model-' || (i % 20), i % 4 <> 0,
              20000, 'settled', timestamptz '2026-01-01' + (i % 2592000) * interval '1 second',
              timestamptz '2026-01-01' + (i % 2592000) * interval '1 second'
       FROM generate_series(1, :n) i""",
    # As the worker writes them: the call's model and creation time, and the drift of streamed calls.
    """INSERT INTO usage_records (reservation_id, prompt_tokens, cached_tokens, completion_tokens,
                                  reasoning_tokens, usage_source, finish_reasons, charge_micros,
                                  estimate_prompt_tokens, estimate_completion_tokens,
                                  estimate_approximate, created_at, model, requested_at, drift_ppm)
       SELECT id, 100 + id % 4000, (id % 4000) / 2, 1 + id % 900, 0, 'reported', 'stop',
              id % 15000, 100 + id % 4000, 1 + (id * 7) % 900, false, updated_at, model,
              created_at,
              CASE WHEN stream THEN ((id % 900 - (id * 7) % 900) * 1000000::bigint)
                                    / (1 + (id * 7) % 900) END
       FROM reservations""",
    # The state autovacuum keeps a live table in: visibility map set, so index-only scans stay
    # index-only (right after a bulk load they visit the heap for every row).
    "VACUUM ANALYZE",
)

SCAN_SQL = """SELECT count(*), sum(charge_micros), sum(prompt_tokens), sum(completion_tokens)
              FROM usage_records"""


def locate_report() -> Callable[[str], Any] | None:
    """The report entry point, ``report(database_url)``, or None while it is not built."""
    for module in ("worker.reports", "worker.report"):
        try:
            found = importlib.import_module(module)
        except ImportError:
            continue
        return getattr(found, "bench_entry_point", None)
    return None


def seed(url: str, settled: int) -> None:
    engine = make_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            for statement in SEED_SQL:
                conn.execute(text(statement), {"n": settled} if ":n" in statement else {})
    finally:
        engine.dispose()


def _best(work: Callable[[], Any], rounds: int = 3) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best


def run(smoke: bool = False) -> dict[str, Any]:
    report = locate_report()
    if report is None:
        return {"pending": "report not built"}
    settled = 20_000 if smoke else SETTLED
    with services.pg_database("report") as url:
        seed(url, settled)
        engine = make_engine(url)
        try:

            def scan() -> None:
                with engine.connect() as conn:
                    conn.execute(text(SCAN_SQL)).one()

            scan_s = _best(scan)
            ours_s = _best(lambda: report(url))
        finally:
            engine.dispose()
    return {
        "settled": settled,
        "ours_seconds": ours_s,
        "scan_seconds": scan_s,
        "ratio": scan_s / ours_s,
    }
