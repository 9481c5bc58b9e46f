"""Ledger writes into PostgreSQL, against an executemany of as many rows into a bare table.

Settled results come from reconciling simulated calls offline (no faults, fixed seed): fresh calls,
each held and then settled. They are written twice, each time into a new database:

* batched (the row's figure) — what the consumer's step ``ledger_batched`` does with a batch whose
  calls are all on the common path: one transaction per ``BATCH`` calls, and inside it one savepoint around
  ``apply_common(session, holds, results, now=…)`` and ``record_findings_many(…)``, the settled list
  built as the consumer builds it (the call's open is in the batch, so ``opened``);
* per call (informational) — what the step ``ledger_per_call`` does for the calls the batched path
  hands back (duplicates, failures, voids, true-ups): a savepoint per call around ``hold``, ``apply_result``
  and ``record_findings``, in the same transactions of ``BATCH`` calls.

Both write the same rows. Rows inserted and updated are read per table from
``pg_stat_xact_user_tables`` inside each transaction, just before its commit; the peer then inserts
as many rows per settlement as the batched path inserted (rounded up) into a table with no index,
constraint or trigger, with one ``cursor.executemany`` per batch, committed as often. Statements
(round trips, savepoints included) are counted with an engine event, and the process's own CPU time
is set against the wall time, to say whether the time goes to Python or to waiting on the server.

The batched path and its peer are measured in ``ROUNDS`` rounds, each in a new database, their order
alternating from round to round; the row is the median round by its ratio, with every round's. One
more batch of fresh calls is then applied under ``EXPLAIN (ANALYZE)``: each INSERT is explained in a
savepoint rolled back, then run, so the figures say how long the server takes for a batch's rows
and how much of it is the foreign-key checks (PostgreSQL's ``RI_ConstraintTrigger``), which the
bare table has none of.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, event, text
from sqlalchemy.orm import Session

from benchmarks.harness import history, services
from benchmarks.harness.history import settled_results
from worker.config import Settings
from worker.core.request import RequestMeta
from worker.core.result import Result
from worker.ledger.batch import apply_common
from worker.ledger.database import make_engine, session_factory
from worker.ledger.findings import columns_of, record_findings, record_findings_many
from worker.ledger.operations import apply_result, hold
from worker.service.runtime import tune_gc

BATCH = 200
TARGET_RATIO = 0.5  # issue 17
# This machine's speed drifts within minutes, and the bare peer's time alone varied by 2x from one
# run to the next: one round measured the drift as often as the ledger.
ROUNDS = 3
GRACE = timedelta(hours=1)
WRITES = text("SELECT relname, n_tup_ins, n_tup_upd FROM pg_stat_user_tables")

Work = list[tuple[RequestMeta, Result]]
# This run's calls the batched path handed back to the per-call path, and the seconds they took.
HANDED_BACK = {"calls": 0, "seconds": 0.0}


def batched(session: Session, batch: Work, settings: Settings, now: datetime) -> None:
    """One batch as ``Consumer.process`` applies it: ``_apply_common`` (one savepoint around
    ``apply_common`` and ``record_findings_many``), then ``_apply`` for each call it handed back
    (a charge above the hold: a true-up), each in its own savepoint."""
    holds = [meta for meta, _ in batch]
    results = [result for _, result in batch]
    with session.begin_nested():
        columns = columns_of(batch, settings.hash_salt)
        applied = apply_common(session, holds, results, now=now, columns=columns)
        settled = []
        for _, result in batch:
            found = applied.settled.get(result.request_id)
            if found is None:
                continue
            # The consumer: ``call.opened or call.request_id not in applied.held``; the open is here.
            settled.append((found, result, True, "settled"))
        record_findings_many(
            session, settled, now=now, non_streamable=settings.non_streamable_models
        )
    if len(applied.held) != len(batch):
        raise AssertionError(f"batched path held {len(applied.held)} of {len(batch)} calls")
    started = time.perf_counter()
    for meta, result in batch:
        if result.request_id not in applied.settled:
            HANDED_BACK["calls"] += 1
            with session.begin_nested():
                _settle_one(session, meta, result, settings, now)
    HANDED_BACK["seconds"] += time.perf_counter() - started


def _settle_one(
    session: Session, meta: RequestMeta, result: Result, settings: Settings, now: datetime
) -> None:
    """A closing call in ``Applier._apply_one``: ``apply_result`` then ``record_findings``."""
    effect = apply_result(session, result, now=now, grace=GRACE)
    record_findings(
        session,
        result,
        effect,
        salt=settings.hash_salt,
        now=now,
        non_streamable=settings.non_streamable_models,
        meta=meta,
        opened=True,
    )
    if effect != "settled":
        raise AssertionError(f"{result.request_id}: {effect}")


def per_call(session: Session, batch: Work, settings: Settings, now: datetime) -> None:
    """One batch call by call, each in its own savepoint: the open's ``hold``, then the close as
    ``Applier._apply_one`` applies it."""
    for meta, result in batch:
        with session.begin_nested():
            hold(session, meta, now=now)
            _settle_one(session, meta, result, settings, now)


def _table_writes(url: str) -> dict[str, tuple[int, int]]:
    """(rows inserted, rows updated) per table so far, from ``pg_stat_user_tables``."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return {table: (ins, upd) for table, ins, upd in conn.execute(WRITES)}
    finally:
        engine.dispose()


def _settled_writes(url: str, before: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """The writes since ``before``, once the writers' statistics have reached the server.

    A backend sends its table counters at most once a second and when it exits; the writer's
    connections are closed by now, so this waits until two reads 0.2 s apart agree.
    """
    last: dict[str, tuple[int, int]] = {}
    for _ in range(25):
        now = _table_writes(url)
        if now == last:
            break
        last = now
        time.sleep(0.2)
    zero = (0, 0)
    return {
        table: (ins - before.get(table, zero)[0], upd - before.get(table, zero)[1])
        for table, (ins, upd) in last.items()
        if (ins, upd) != before.get(table, zero)
    }


def _write(
    url: str,
    work: Work,
    apply: Callable[[Session, Work, Settings, datetime], None],
    settings: Settings,
) -> dict[str, Any]:
    """Time ``apply`` over ``work`` in batches; count statements and rows written per table."""
    now = datetime.now(UTC)
    before = _settled_writes(url, {})
    engine = make_engine(url)
    sessions = session_factory(engine)
    statements = Counter[str]()

    def count_statement(
        _conn: Any, _cursor: Any, _sql: str, _params: Any, _ctx: Any, many: bool
    ) -> None:
        statements["executemany" if many else "execute"] += 1

    event.listen(engine, "before_cursor_execute", count_statement)
    commit_s = 0.0
    try:
        cpu_started = time.process_time()
        started = time.perf_counter()
        for first in range(0, len(work), BATCH):
            with sessions() as session:
                transaction = session.begin()
                apply(session, work[first : first + BATCH], settings, now)
                committing = time.perf_counter()
                # The ledger's balance check is deferred: it runs here, one query per INSERT
                # statement into transactions or entries (migration 0013).
                transaction.commit()
                commit_s += time.perf_counter() - committing
        seconds = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
    finally:
        engine.dispose()
    writes = _settled_writes(url, before)
    inserted = {table: ins for table, (ins, _) in writes.items() if ins}
    updated = {table: upd for table, (_, upd) in writes.items() if upd}
    return {
        "seconds": seconds,
        "commit_seconds": commit_s,
        "cpu_share": cpu / seconds,
        "settlements_per_s": len(work) / seconds,
        "statements_per_settlement": statements["execute"] / len(work),
        "executemany_per_settlement": statements["executemany"] / len(work),
        "inserted_per_settlement": sum(inserted.values()) / len(work),
        "updated_per_settlement": sum(updated.values()) / len(work),
        "inserted": inserted,
        "updated": updated,
    }


def _bare(engine: Engine, work: Work, rows_each: int) -> float:
    """Seconds to insert ``rows_each`` rows per settlement into a bare table, batch by batch."""
    now = datetime.now(UTC)
    with engine.connect() as conn:
        conn.execute(
            text("CREATE TABLE bench_bare (a bigint, b bigint, c text, d bigint, e timestamptz)")
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
        return time.perf_counter() - started
    finally:
        raw.close()


def _explained(url: str, batch: Work, settings: Settings) -> dict[str, Any]:
    """Apply ``batch`` as ``batched`` does, each INSERT first explained (``EXPLAIN (ANALYZE, FORMAT
    JSON)`` in a savepoint rolled back); the server's milliseconds per table written, and of them
    the row triggers of foreign keys. Deferred triggers (the balance checks) run at the commit, which
    this does not explain."""
    engine = make_engine(url)
    plans: list[dict[str, Any]] = []

    def explain(_conn: Any, cursor: Any, sql: str, params: Any, _ctx: Any, many: bool) -> None:
        if many or not sql.lstrip().upper().startswith(("INSERT", "WITH")):
            return
        cursor.execute("SAVEPOINT bench_explain")
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        (found,) = cursor.fetchone()  # the plan as JSON, which psycopg loads: a list of one
        cursor.execute("ROLLBACK TO SAVEPOINT bench_explain")
        plans.append(found[0])

    event.listen(engine, "before_cursor_execute", explain)
    try:
        with session_factory(engine)() as session, session.begin():
            batched(session, batch, settings, datetime.now(UTC))
    finally:
        engine.dispose()
    tables: Counter[str] = Counter()
    foreign_ms = 0.0
    for found in plans:
        tables[" + ".join(_written(found["Plan"]))] += found["Execution Time"]
        foreign_ms += sum(
            trigger["Time"]
            for trigger in found.get("Triggers", [])
            if trigger["Trigger Name"].startswith("RI_ConstraintTrigger")
        )
    return {
        "calls": len(batch),
        "server_ms": sum(tables.values()),
        "foreign_key_ms": foreign_ms,
        "tables_ms": dict(tables.most_common()),
    }


def _written(node: dict[str, Any]) -> list[str]:
    """The tables a plan inserts into, parents first (the linked insert's CTEs: transactions, then
    their entries)."""
    own = [node["Relation Name"]] if node.get("Node Type") == "ModifyTable" else []
    return own + [name for child in node.get("Plans", []) for name in _written(child)]


def _round(
    index: int, work: Work, explain: Work, settings: Settings, rows_each: int | None
) -> dict[str, Any]:
    """One round in a new database: the batched path and the peer (the peer first in odd rounds,
    with the first round's ``rows_each``), then, when ``explain`` holds calls, one batch of them
    explained."""
    with services.pg_database(f"ledger{index}") as url, services.autovacuum(url):
        history.warm(url)
        engine = make_engine(url)
        try:
            HANDED_BACK.update(calls=0, seconds=0.0)
            if rows_each is not None and index % 2 == 1:
                bare_s = _bare(engine, work, rows_each)
                ours = _write(url, work, batched, settings)
            else:
                ours = _write(url, work, batched, settings)
                rows_each = rows_each or math.ceil(ours["inserted_per_settlement"])
                bare_s = _bare(engine, work, rows_each)
            ours.update(
                handed_back=HANDED_BACK["calls"], handed_back_seconds=HANDED_BACK["seconds"]
            )
        finally:
            engine.dispose()
        explained = _explained(url, explain, settings) if explain else None
    return {
        "ours": ours,
        "bare_seconds": bare_s,
        "rows_each": rows_each,
        "ratio": ours["settlements_per_s"] * bare_s / len(work),
        "explained": explained,
    }


def run(smoke: bool = False) -> dict[str, Any]:
    # The process tuned as a worker's (``tune_gc``), for both paths and the peer: untuned, full
    # collections of this process's heap took 12-15 % of the batched path's time, and whether the
    # row ran tuned depended on whether row 2 (``make_consumer``) had run before it.
    tune_gc()
    count = 200 if smoke else 3000
    found = settled_results(count + BATCH)
    work, explain = found[:count], found[count:]
    settings = Settings(hash_salt="benchmark-fingerprint-key")
    first = _round(0, work, explain, settings, None)
    rounds = [first] + [
        _round(index, work, [], settings, first["rows_each"])
        for index in range(1, 1 if smoke else ROUNDS)
    ]
    median = sorted(rounds, key=lambda found: found["ratio"])[len(rounds) // 2]
    ours, bare_s, ratio = median["ours"], median["bare_seconds"], median["ratio"]
    rows_each = first["rows_each"]
    bare_rate = len(work) / bare_s
    with services.pg_database("ledger_calls") as url, services.autovacuum(url):
        history.warm(url)
        calls = _write(url, work, per_call, settings)
    return {
        "settlements": len(work),
        "batch": BATCH,
        "ours": ours,
        "rounds": [
            {
                "ratio": r["ratio"],
                "ours_seconds": r["ours"]["seconds"],
                "bare_seconds": r["bare_seconds"],
            }
            for r in rounds
        ],
        "explained": first["explained"],
        "handed_back": ours["handed_back"],
        "handed_back_seconds": ours["handed_back_seconds"],
        "above_hold": sum(1 for _, r in work if (r.charge_micros or 0) > r.reserved_micros),
        "per_call": calls,
        "per_call_ratio": calls["settlements_per_s"] / bare_rate,
        "bare_rows_per_settlement": rows_each,
        "bare_seconds": bare_s,
        "bare_settlements_per_s": bare_rate,
        "bare_rows_per_s": bare_rate * rows_each,
        "ratio": ratio,
        "target_ratio": TARGET_RATIO,
        "meets_target": ratio >= TARGET_RATIO,
    }


if __name__ == "__main__":
    import logging
    import sys

    logging.getLogger("worker").setLevel(logging.ERROR)  # a warning per charge above its hold
    for name, value in run(smoke="--smoke" in sys.argv).items():
        print(f"{name}: {value}")
