"""Ledger writes into PostgreSQL, against an executemany of as many rows into a bare table.

Settled results come from reconciling simulated calls offline (no faults, fixed seed). Ours writes
them as the consumer does: one transaction per batch of ``BATCH`` settlements, each settlement in its
own savepoint, ``hold`` then ``apply_result``. The rows that writes (reservations, transactions,
entries, usage records) are counted afterwards; the peer then inserts that many rows per settlement,
rounded up, into a table with no index, constraint or trigger with one ``cursor.executemany`` per
settlement batch, committed as often. Statements and round trips per settlement are counted with
an engine event, and the process's own CPU time is set against the wall time, to say whether the
time goes to Python or to waiting on the server.
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import event, text

from benchmarks import services
from benchmarks.workload import SEED
from worker.ledger.database import make_engine, session_factory
from worker.ledger.operations import apply_result, hold
from worker.prices import load_price_book
from worker.reconcile import reconcile_response, reconcile_stream
from worker.request import RequestMeta, parse_request
from worker.result import Outcome, Result
from worker.simulation import plan
from worker.simulation.wire import Frames, Open, Response

BATCH = 200
TARGET_RATIO = 0.3
LEDGER_TABLES = (
    "accounts",
    "ledger_accounts",
    "reservations",
    "transactions",
    "entries",
    "usage_records",
)


def settled_results(count: int) -> list[tuple[RequestMeta, Result]]:
    """``count`` settled results (and their request metadata) from fault-free simulated calls."""
    book = load_price_book()
    found: list[tuple[RequestMeta, Result]] = []
    calls = plan(int(count * 1.3) + 10, SEED, run_id="ledger")
    for call in calls:
        meta_body = next(op.body for op in call.ops if isinstance(op, Open))
        meta = parse_request(meta_body)
        frames = [entry for op in call.ops if isinstance(op, Frames) for entry in op.entries]
        response = next((op for op in call.ops if isinstance(op, Response)), None)
        if response is not None:
            result = reconcile_response(meta, response.status, response.body, book)
        else:
            result = reconcile_stream(meta, frames, book)
        if result.outcome is Outcome.SETTLED and result.charge_micros is not None:
            found.append((meta, result))
        if len(found) == count:
            return found
    raise AssertionError(f"only {len(found)} settled results in {len(calls)} calls")


def _count_rows(conn: Any) -> int:
    return sum(
        conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one() for table in LEDGER_TABLES
    )


def run(smoke: bool = False) -> dict[str, Any]:
    count = 200 if smoke else 3000
    work = settled_results(count)
    now = datetime.now(UTC)
    grace = timedelta(hours=1)
    with services.pg_database("ledger") as url, services.autovacuum(url):
        engine = make_engine(url)
        sessions = session_factory(engine)
        statements = {"execute": 0, "executemany": 0}

        def count_statement(
            _conn: Any, _cursor: Any, _sql: str, _params: Any, _ctx: Any, many: bool
        ) -> None:
            statements["executemany" if many else "execute"] += 1

        try:
            with engine.connect() as conn:
                rows_before = _count_rows(conn)
            event.listen(engine, "before_cursor_execute", count_statement)
            cpu_started = time.process_time()
            started = time.perf_counter()
            for first in range(0, len(work), BATCH):
                with sessions() as session, session.begin():
                    for meta, result in work[first : first + BATCH]:
                        with session.begin_nested():
                            hold(session, meta, now=now)
                            effect = apply_result(session, result, now=now, grace=grace)
                        if effect != "settled":
                            raise AssertionError(f"{result.request_id}: {effect}")
            ours_s = time.perf_counter() - started
            ours_cpu = time.process_time() - cpu_started
            event.remove(engine, "before_cursor_execute", count_statement)
            with engine.connect() as conn:
                rows_written = _count_rows(conn) - rows_before
            per_settlement = rows_written / len(work)
            rows_each = math.ceil(per_settlement)

            with engine.connect() as conn:
                conn.execute(
                    text(
                        "CREATE TABLE bench_bare (a bigint, b bigint, c text, d bigint, e timestamptz)"
                    )
                )
                conn.commit()
            raw = engine.raw_connection()
            try:
                cursor = raw.cursor()
                sql = "INSERT INTO bench_bare (a, b, c, d, e) VALUES (%s, %s, %s, %s, %s)"
                started = time.perf_counter()
                for first in range(0, len(work), BATCH):
                    batch = work[first : first + BATCH]
                    rows = [
                        (number, int(result.charge_micros or 0), result.request_id, part, now)
                        for number, (_meta, result) in enumerate(batch, start=first)
                        for part in range(rows_each)
                    ]
                    cursor.executemany(sql, rows)
                    raw.commit()
                bare_s = time.perf_counter() - started
            finally:
                raw.close()
        finally:
            engine.dispose()
    ours_rate = len(work) / ours_s
    bare_rate = len(work) / bare_s
    return {
        "settlements": len(work),
        "batch": BATCH,
        "rows_per_settlement": per_settlement,
        "bare_rows_per_settlement": rows_each,
        "statements_per_settlement": statements["execute"] / len(work),
        "executemany_per_settlement": statements["executemany"] / len(work),
        "ours_seconds": ours_s,
        "ours_cpu_share": ours_cpu / ours_s,
        "bare_seconds": bare_s,
        "ours_settlements_per_s": ours_rate,
        "bare_settlements_per_s": bare_rate,
        "bare_rows_per_s": bare_rate * rows_each,
        "ratio": ours_rate / bare_rate,
        "target_ratio": TARGET_RATIO,
        "meets_target": ours_rate / bare_rate >= TARGET_RATIO,
    }


if __name__ == "__main__":
    import sys

    for name, value in run(smoke="--smoke" in sys.argv).items():
        print(f"{name}: {value}")
