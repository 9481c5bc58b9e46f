"""``billing report`` over a million settled calls, against one sequential scan of the same table.

``report_json`` is what is timed: the whole report by day over every call (``run_report``, the
snapshot and settings ``billing report`` uses), rendered as JSON.

The seed is what the worker writes, in bulk (``INSERT … SELECT`` over ``generate_series``, through
an unlogged staging table of the calls): ``SETTLED`` settled calls — reservation, hold and charge
transactions with their entries (2 + 3 legs, 2 when the charge is the whole hold), a flagged
``true_up`` transaction (2 more legs) and a ``charge_above_hold`` anomaly for one call in ten, a
usage record with the call's model, creation time, output hash and, for streamed calls with reported
usage, the drift; one in fifty settled at the estimate — and beside them 1 % unsettled calls (hold,
failure, alert event) and 0.5 % voids (hold and release), over 30 days, 20 models and 200 accounts.
The ledger's triggers (the deferred balance check, one per row, and the foreign keys) are off during
the load (``session_replication_role = replica``, as a restore does); the load is checked instead:
every transaction balances with at least two legs, no entry lacks its transaction, and the report
itself ties out. ``money_daily``, the report's per (day, account, model) money the workers keep in
the posting transaction, is filled from the seeded ledger as migration 0004's backfill does
(``worker.reports.query.rebuild_money``, one ``INSERT … SELECT`` of the ledger join) and checked equal
to the join, key by key (``verify_money``); ``calls_daily``, every call counted in the row of its
state, likewise as migration 0014's backfill does (``rebuild_calls``, checked by ``verify_calls``).
Then ``VACUUM ANALYZE`` (the state autovacuum keeps a live
table in).

The report and the peer — ``SELECT count(*), sum(…) FROM usage_records`` — are each timed, best of
three; the ratio is the report's time over the scan's. One more run of the report times each section
(``progress``), and the slowest section's statement is run under ``EXPLAIN (ANALYZE, BUFFERS)`` with
the report's own settings, to say what bounds it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.dialects import postgresql

from benchmarks.harness import services
from worker.ledger.database import make_engine
from worker.reports import PG_SETTINGS, ReportSpec, run_report
from worker.reports.query import rebuild_calls, rebuild_money, verify_calls, verify_money
from worker.reports.render_json import render_json

SETTLED = 1_000_000
TARGET_RATIO = 3.0  # issue 17
DAYS = 30

# A call's fate by ``i % 200``: 0 and 1 unsettled (1 %), 2 voided (0.5 %), the rest settled.
UNSETTLED_OF_200 = 2
VOIDED_OF_200 = 1

STAGE_SQL = (
    """CREATE UNLOGGED TABLE seed_calls AS
       SELECT i,
              CASE WHEN i % 200 < 2 THEN 'unsettled' WHEN i % 200 = 2 THEN 'voided'
                   ELSE 'settled' END AS fate,
              1 + (i * 7) % 200 AS acct,
              'model-' || (i % 20) AS model,
              i % 4 <> 0 AS stream,
              timestamptz '2026-01-01 00:00:00+00'
                + (i::float8 * :seconds / :n) * interval '1 second' AS created,
              1000 + (i * 37) % 50000 AS reserved,
              1 + (i * 7) % 900 AS estimate_completion,
              100 + i % 4000 AS prompt
       FROM generate_series(1, :n) i""",
    """ALTER TABLE seed_calls
         ADD COLUMN settled_at timestamptz, ADD COLUMN charge bigint,
         ADD COLUMN estimated boolean, ADD COLUMN completion int""",
    # One call in ten is charged above its hold (a true-up); the others 10-99 % of it.
    """UPDATE seed_calls
          SET settled_at = created + interval '5 seconds',
              charge = CASE WHEN i % 10 = 5 THEN reserved + 1 + i % 997
                            ELSE reserved * (10 + i % 90) / 100 END,
              estimated = i % 50 = 3,
              completion = greatest(1, estimate_completion + i % 41 - 20)""",
    """CREATE UNLOGGED TABLE seed_accounts AS
       SELECT a AS acct, 'acct_' || a AS account_id FROM generate_series(1, 200) a""",
    "SET session_replication_role = replica",
    """INSERT INTO accounts (id, created_at)
       SELECT account_id, timestamptz '2025-12-01' FROM seed_accounts""",
    """INSERT INTO ledger_accounts (name, kind, account_id)
       SELECT k || ':' || account_id, k, account_id
       FROM seed_accounts, (VALUES ('available'), ('held')) kinds(k)""",
    """CREATE UNLOGGED TABLE seed_ledger AS
       SELECT s.acct, av.id AS available, hd.id AS held,
              (SELECT id FROM ledger_accounts WHERE name = 'revenue') AS revenue
       FROM seed_accounts s
       JOIN ledger_accounts av ON av.account_id = s.account_id AND av.kind = 'available'
       JOIN ledger_accounts hd ON hd.account_id = s.account_id AND hd.kind = 'held'""",
    """INSERT INTO reservations (id, request_id, account_id, model, stream, reserved_micros, status,
                                created_at, updated_at, fingerprint)
       SELECT i, 'req_' || lpad(i::text, 10, '0'), 'acct_' || acct, model, stream, reserved,
              CASE fate WHEN 'settled' THEN 'settled' WHEN 'voided' THEN 'voided'
                        ELSE 'unsettled' END,
              created, created + interval '5 seconds',
              CASE WHEN i % 10 = 0 THEN md5(i::text) || md5('fp' || i) END
       FROM seed_calls""",
    # Transaction ids 4i (hold), 4i + 1 (charge), 4i + 2 (true-up or release).
    """INSERT INTO transactions (id, reservation_id, kind, flagged, created_at)
       SELECT t.id, c.i, t.kind, t.flagged, t.at
       FROM seed_calls c,
       LATERAL (VALUES
         (4 * c.i, 'hold', false, c.created),
         (CASE WHEN c.fate = 'settled' THEN 4 * c.i + 1 END, 'charge', false, c.settled_at),
         (CASE WHEN c.fate = 'settled' AND c.charge > c.reserved THEN 4 * c.i + 2 END, 'true_up',
          true, c.settled_at),
         (CASE WHEN c.fate = 'voided' THEN 4 * c.i + 2 END, 'release', false,
          c.created + interval '5 seconds')
       ) t(id, kind, flagged, at)
       WHERE t.id IS NOT NULL""",
    """INSERT INTO entries (transaction_id, ledger_account_id, amount, direction)
       SELECT e.txn, e.account, e.amount, e.direction
       FROM seed_calls c JOIN seed_ledger l USING (acct),
       LATERAL (VALUES
         (4 * c.i, l.available, c.reserved, 'debit'),
         (4 * c.i, l.held, c.reserved, 'credit'),
         (CASE WHEN c.fate = 'settled' THEN 4 * c.i + 1 END, l.held, c.reserved, 'debit'),
         (CASE WHEN c.fate = 'settled' THEN 4 * c.i + 1 END, l.revenue,
          least(c.charge, c.reserved), 'credit'),
         (CASE WHEN c.fate = 'settled' THEN 4 * c.i + 1 END, l.available,
          c.reserved - least(c.charge, c.reserved), 'credit'),
         (CASE WHEN c.fate = 'settled' THEN 4 * c.i + 2 END, l.available, c.charge - c.reserved,
          'debit'),
         (CASE WHEN c.fate = 'settled' THEN 4 * c.i + 2 END, l.revenue, c.charge - c.reserved,
          'credit'),
         (CASE WHEN c.fate = 'voided' THEN 4 * c.i + 2 END, l.held, c.reserved, 'debit'),
         (CASE WHEN c.fate = 'voided' THEN 4 * c.i + 2 END, l.available, c.reserved, 'credit')
       ) e(txn, account, amount, direction)
       WHERE e.txn IS NOT NULL AND e.amount > 0""",
    # As the worker writes them (operations.usage_values, then findings.record_findings_many).
    """INSERT INTO usage_records (reservation_id, prompt_tokens, cached_tokens, completion_tokens,
                                  reasoning_tokens, usage_source, finish_reasons, charge_micros,
                                  estimate_prompt_tokens, estimate_completion_tokens,
                                  estimate_approximate, system_fingerprint, completion_id,
                                  created_at, model, requested_at, output_hash, drift_ppm)
       SELECT i, prompt, prompt / 2, completion, 0,
              CASE WHEN estimated THEN 'estimated' ELSE 'reported' END, 'stop', charge, prompt,
              estimate_completion, false, 'fp_' || (i % 7), 'chatcmpl-' || i, settled_at, model,
              created, md5(i::text) || md5('out' || i),
              CASE WHEN stream AND NOT estimated
                   THEN ((completion - estimate_completion)::bigint * 1000000)
                        / estimate_completion END
       FROM seed_calls WHERE fate = 'settled'""",
    """INSERT INTO anomalies (reservation_id, kind, detail, detected_at)
       SELECT i, 'charge_above_hold', 'charged ' || charge || ' micros, held ' || reserved,
              settled_at
       FROM seed_calls WHERE fate = 'settled' AND charge > reserved""",
    """INSERT INTO failures (reservation_id, reason, estimate_prompt_tokens,
                             estimate_completion_tokens, exposure_micros, finish_reasons,
                             detected_at)
       SELECT i, (ARRAY['error_finish', 'incomplete', 'missing_usage', 'unpriced'])[1 + (i / 200) % 4],
              prompt, estimate_completion,
              CASE WHEN (i / 200) % 4 <> 3 THEN reserved * 3 / 4 END,
              CASE WHEN (i / 200) % 4 = 0 THEN 'content_filter' END,
              created + interval '5 seconds'
       FROM seed_calls WHERE fate = 'unsettled'""",
    """INSERT INTO alert_events (reservation_id, account_id, model, reason, stream,
                                 exposure_micros, detected_at)
       SELECT f.reservation_id, r.account_id, r.model, f.reason, r.stream, f.exposure_micros,
              f.detected_at
       FROM failures f JOIN reservations r ON r.id = f.reservation_id""",
    "SET session_replication_role = DEFAULT",
    "SELECT setval(pg_get_serial_sequence('reservations', 'id'), (SELECT max(id) FROM reservations))",
    "SELECT setval(pg_get_serial_sequence('transactions', 'id'), (SELECT max(id) FROM transactions))",
    "DROP TABLE seed_calls, seed_accounts, seed_ledger",
)

# What the triggers would have checked, over the whole load at once.
CHECK_SQL = """
SELECT count(*) FILTER (WHERE t.id IS NULL) AS orphan_entries,
       count(*) FILTER (WHERE e.transaction_id IS NULL) AS empty_transactions,
       count(*) FILTER (WHERE e.balance <> 0 OR e.legs < 2) AS unbalanced,
       count(t.id) AS transactions,
       coalesce(sum(e.legs), 0) AS entries
FROM (SELECT transaction_id,
             sum(CASE WHEN direction = 'credit' THEN amount ELSE -amount END) AS balance,
             count(*) AS legs
      FROM entries GROUP BY transaction_id) e
FULL JOIN transactions t ON t.id = e.transaction_id
"""

SCAN_SQL = """SELECT count(*), sum(charge_micros), sum(prompt_tokens), sum(completion_tokens)
              FROM usage_records"""


def calls_for(settled: int) -> int:
    """How many calls make ``settled`` settled ones under the fates above."""
    per_200 = 200 - UNSETTLED_OF_200 - VOIDED_OF_200
    total = settled * 200 // per_200
    while total - _not_settled(total) < settled:
        total += 1
    return total


def _not_settled(total: int) -> int:
    """Calls 1..``total`` whose ``i % 200`` is 0, 1 or 2."""
    return total // 200 + sum((total - r) // 200 + 1 for r in (1, 2) if total >= r)


def report_json(url: str) -> str:
    """What is timed: the whole report by day over every call, rendered as JSON."""
    return render_json(run_report(url, whole_spec()))


def _in_transaction(url: str, work: Callable[[Any], Any]) -> Any:
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            return work(conn)
    finally:
        engine.dispose()


def seed(url: str, settled: int) -> dict[str, Any]:
    """Load the ledger of ``settled`` settled calls (and the others); returns what was loaded."""
    total = calls_for(settled)
    engine = make_engine(url, isolation_level="AUTOCOMMIT")
    started = time.perf_counter()
    try:
        with engine.connect() as conn:
            for statement in STAGE_SQL:
                params = {"n": total, "seconds": DAYS * 86400}
                conn.execute(
                    text(statement), {k: v for k, v in params.items() if f":{k}" in statement}
                )
            # As migration 0004's backfill: the rollup the workers keep, from the seeded ledger.
            rollup_rows = _in_transaction(url, rebuild_money)
            call_rows = _in_transaction(url, rebuild_calls)
            loaded = time.perf_counter() - started
            check = conn.execute(text(CHECK_SQL)).mappings().one()
            compared, differences = _in_transaction(url, verify_money)
            calls_compared, call_differences = _in_transaction(url, verify_calls)
            counts = {
                table: conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()
                for table in ("reservations", "usage_records", "failures", "anomalies")
            }
            found = dict(
                conn.execute(text("SELECT status, count(*) FROM reservations GROUP BY 1")).all()
            )
            vacuum_started = time.perf_counter()
            conn.execute(text("VACUUM ANALYZE"))
            vacuumed = time.perf_counter() - vacuum_started
    finally:
        engine.dispose()
    bad = {k: check[k] for k in ("orphan_entries", "empty_transactions", "unbalanced") if check[k]}
    if bad or found.get("settled") != settled:
        raise AssertionError(f"seed is not a ledger: {bad}, statuses {found}")
    if differences or compared != rollup_rows:
        raise AssertionError(f"money_daily is not the ledger's sums: {differences[:3]}")
    if call_differences or calls_compared != call_rows:
        raise AssertionError(f"calls_daily is not the calls' counts: {call_differences[:3]}")
    return {
        "calls": total,
        "statuses": found,
        "transactions": int(check["transactions"]),
        "entries": int(check["entries"]),
        "money_daily_rows": rollup_rows,
        "calls_daily_rows": call_rows,
        "counts": counts,
        "load_seconds": loaded,
        "vacuum_seconds": vacuumed,
    }


def _best(work: Callable[[], Any], rounds: int = 3) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best


def sections(url: str) -> dict[str, float]:
    """Seconds per section of one more report run (the report's own ``progress`` hook)."""
    times: dict[str, float] = {}

    @contextmanager
    def timed(section: str) -> Iterator[None]:
        started = time.perf_counter()
        yield
        times[section] = time.perf_counter() - started

    run_report(url, whole_spec(), progress=timed)
    return times


def whole_spec() -> ReportSpec:
    """The spec ``report_json`` reports: by day, over every call."""
    return ReportSpec(datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC), ("day",))


def _statement(section: str, conn: Any) -> Any | None:
    """The statement the report runs for ``section`` (for a whole-day window, as ``report_json``)."""
    from worker.reports import drift, providers, query

    spec = whole_spec()
    made = {
        "calls": lambda: query.rollup_calls_statement(spec),
        "money": lambda: query.money_statement(spec, "postgresql"),
        "drift": lambda: drift.percentile_cont_statement(spec, query.drift_bounds(conn, spec)),
        "providers": lambda: providers.statement(spec, rolled=True),
    }.get(section)
    return None if made is None else made()


def _nodes(plan: dict[str, Any], found: list[dict[str, Any]]) -> float:
    """Walk a JSON plan; each node gets its exclusive time (its own minus its children's)."""
    loops = plan.get("Actual Loops", 1) or 1
    total = plan.get("Actual Total Time", 0.0) * loops
    children = sum(_nodes(child, found) for child in plan.get("Plans", ()))
    name = plan["Node Type"]
    if plan.get("Relation Name"):
        name += f" on {plan['Relation Name']}"
    if plan.get("Index Name"):
        name += f" using {plan['Index Name']}"
    detail = {
        "node": name,
        "exclusive_ms": max(0.0, total - children),
        "rows": int(plan.get("Actual Rows", 0) * loops),
        "workers": plan.get("Workers Launched"),
        "batches": plan.get("Hash Batches"),
        "sort": plan.get("Sort Method"),
    }
    found.append(detail)
    return total


def explain(url: str, section: str) -> dict[str, Any] | None:
    """EXPLAIN (ANALYZE, BUFFERS) of a section's statement, in the report's transaction settings."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn, conn.begin():
            statement = _statement(section, conn)
            if statement is None:
                return None
            sql = str(
                statement.compile(
                    dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True}
                )
            )
            for setting in PG_SETTINGS:
                conn.exec_driver_sql(setting)
            raw = conn.exec_driver_sql(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}").scalar()
    finally:
        engine.dispose()
    document = raw if isinstance(raw, list) else json.loads(raw)
    top = document[0]
    nodes: list[dict[str, Any]] = []
    _nodes(top["Plan"], nodes)
    nodes.sort(key=lambda node: -node["exclusive_ms"])
    return {
        "section": section,
        "execution_ms": top.get("Execution Time", 0.0),
        "nodes": nodes[:5],
        "shared_read": top["Plan"].get("Shared Read Blocks", 0),
        "shared_hit": top["Plan"].get("Shared Hit Blocks", 0),
        "temp_written": top["Plan"].get("Temp Written Blocks", 0),
    }


def run(smoke: bool = False) -> dict[str, Any]:
    settled = 20_000 if smoke else SETTLED
    with services.pg_database("report") as url:
        loaded = seed(url, settled)
        engine = make_engine(url)
        try:

            def scan() -> None:
                with engine.connect() as conn:
                    conn.execute(text(SCAN_SQL)).one()

            scan_s = _best(scan)
            ours_s = _best(lambda: report_json(url))
        finally:
            engine.dispose()
        rendered = json.loads(report_json(url))
        per_section = sections(url)
        slowest = max(per_section, key=lambda name: per_section[name])
        plan = explain(url, slowest)
    total = rendered["total"]
    ratio = ours_s / scan_s
    return {
        "settled": settled,
        "seed": loaded,
        "ties_out": rendered["ties_out"],
        "report_calls": total.get("calls"),
        "ours_seconds": ours_s,
        "scan_seconds": scan_s,
        "ratio": ratio,
        "target_ratio": TARGET_RATIO,
        "meets_target": ratio <= TARGET_RATIO,
        "sections": per_section,
        "slowest": slowest,
        "plan": plan,
    }


if __name__ == "__main__":
    import sys

    for name, value in run(smoke="--smoke" in sys.argv).items():
        print(f"{name}: {value}")
