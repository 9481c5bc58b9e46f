"""Row 12, the capacity model: unit costs measured here, predictions checked against rows 2, 4, 9.

The simulated calls of row 2 (same seed, same count) are written to Redis through a client that
counts its own commands and bytes (``harness.traffic``), then measured in three phases:

* **A**, every notification of those calls, one full batch at a time (``Consumer.poll``, its steps
  timed on the instance): the unit costs. Per closed call: the consumer's CPU and wall time by
  step (reader: read, fetch, reconcile; applier: the transaction and acknowledgements), the
  process's other CPU; each close's reconcile CPU against its entry count (least squares: CPU per
  frame and per call, for calls of other sizes); Redis commands and bytes (the counting client;
  ``INFO commandstats`` of the shared server beside it), Redis server CPU (``/proc``); PostgreSQL
  rows written (``pg_stat_user_tables``), statements and commits (engine events; the database's
  commits of every session, ``pg_stat_database``, reported beside them), WAL bytes of this
  database alone (``pg_walinspect``: the records touching its relations, and their transactions'
  commit records; without the extension, the server's LSN difference, everyone's WAL) and its CPU
  (``/proc``).
* **Row 4's twins** (``harness.poll_costs``, run by ``bench_latency`` just after each of its rounds):
  other calls of the same mix written whole, as row 4's publisher writes them, then polled at
  ``poll_costs.SIZES`` entries in turn while another process writes yet other calls at the round's
  rate: the poll's cost by size in row 4's minutes (``PollCost`` over every twin's polls; the
  least-squares line ``s0 + s1 x entries`` is kept for comparison) and the spread of single polls
  around it (the noise of row 4's queue).
* **C**, row 2's twins: other calls of the same mix (a third seed and the next ones), each run
  exactly as a round of row 2, just after it (``bench_pipeline.run``: its count, its own prefix and
  database, drained by ``Consumer.drain``, two threads), the median twin: the share of its
  wall time the process was on a CPU (process CPU / wall), the drain efficiency, and its CPU per
  call against phase A's (moved to phase C's frames per call), the drain's CPU factor. Nothing
  else of phase C enters the model.

Every phase, twin and row the model predicts reads the speed probe (``harness.speed``) before and
after itself; the ratios are reported, not applied. Row 2's prediction is phase A's CPU times the
drain's CPU factor over its efficiency, both from phase C, whose twins ran in row 2's minutes: a
speed correction from phase A to row 2 and one from phase C back to phase A would cancel but for
the probe's own noise between row 2's median round and the median twin.

Redis memory per call is ``MEMORY USAGE`` of every call stream against its entry count (least
squares), plus the call's share of the notification stream. ``capacity_model`` turns these into the
predictions; ``run`` sets them against the rows measured in the same run.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

from sqlalchemy import Engine, event, text

from benchmarks import capacity_model as model
from benchmarks.harness import cpu, history, services, speed, workload
from benchmarks.harness.consumer import make_consumer, time_steps, warm
from benchmarks.harness.traffic import Traffic, counting_client
from worker.consumer.calls import BatchStats
from worker.consumer.consumer import Consumer
from worker.consumer.reconciling import Reconcile, reconcile_call
from worker.consumer.steps import Step
from worker.contract.keys import Keys
from worker.ledger.database import make_engine

CALLS = int(os.environ.get("BENCH_E2E_CALLS", "2000"))  # row 2's count: the same calls
# Row 4's prediction for a round: the median p99 of this many plays of its queue (other draws of
# the noise), as the row's own figure is the median round's. Fewer plays leave the median to a
# few draws of the stalls (5 plays gave 100 ms where 41 and 101 gave 108 ms, the same polls).
PLAYS = 101
STEPS = ("read", "prepare", "fetch", "reconcile", "apply")
TABLE_WRITES = text(
    "SELECT coalesce(sum(n_tup_ins), 0), coalesce(sum(n_tup_upd), 0), "
    "coalesce(sum(n_tup_del), 0) FROM pg_stat_user_tables"
)
COMMITS = text("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
WAL_OF_DATABASE = text(
    """
    WITH records AS (
        SELECT xid, resource_manager, record_length, block_ref
        FROM pg_get_wal_records_info(CAST(:start AS pg_lsn), CAST(:end AS pg_lsn))
    ), ours AS (
        SELECT * FROM records WHERE block_ref LIKE :pattern
    )
    SELECT coalesce((SELECT sum(record_length) FROM ours), 0)
         + coalesce((SELECT sum(record_length) FROM records
                     WHERE resource_manager = 'Transaction'
                       AND xid IN (SELECT xid FROM ours WHERE xid <> '0')), 0)
    """
)


# -- PostgreSQL counters -----------------------------------------------------------------------------


def _counters(url: str) -> tuple[int, int, int, int]:
    """(rows inserted, updated, deleted, commits) of this database, once the writers' statistics
    reached the server: a backend reports them at most once a second and when it exits, so this
    waits until two reads 0.2 s apart agree."""
    engine = make_engine(url)
    last: tuple[int, int, int, int] | None = None
    try:
        for _ in range(25):
            with engine.connect() as conn:
                ins, upd, dele = conn.execute(TABLE_WRITES).one()
                commits = conn.execute(COMMITS).scalar_one()
            now = (int(ins), int(upd), int(dele), int(commits))
            # Our own reading connection commits too: compare everything but commits.
            if last is not None and now[:3] == last[:3]:
                return now
            last = now
            time.sleep(0.2)
    finally:
        engine.dispose()
    assert last is not None
    return last


def _lsn(url: str) -> tuple[str, int]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            lsn = conn.execute(text("SELECT pg_current_wal_flush_lsn()::text")).scalar_one()
            oid = conn.execute(
                text("SELECT oid FROM pg_database WHERE datname = current_database()")
            ).scalar_one()
    finally:
        engine.dispose()
    return str(lsn), int(oid)


def _wal_bytes(url: str, start: str, end: str, oid: int) -> tuple[float, str]:
    """WAL bytes of this database between two LSNs, and how they were counted."""
    engine = make_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            everyone = conn.execute(
                text("SELECT pg_wal_lsn_diff(CAST(:end AS pg_lsn), CAST(:start AS pg_lsn))"),
                {"start": start, "end": end},
            ).scalar_one()
            try:
                conn.execute(text("CREATE EXTENSION IF NOT EXISTS pg_walinspect"))
                ours = conn.execute(
                    WAL_OF_DATABASE, {"start": start, "end": end, "pattern": f"% rel %/{oid}/%"}
                ).scalar_one()
            except Exception:
                return float(everyone), "server LSN difference (every database's WAL)"
    finally:
        engine.dispose()
    return float(
        ours
    ), f"pg_walinspect, this database's records ({float(everyone):,.0f} B server-wide)"


# -- the consumer, one batch at a time ---------------------------------------------------------------


class ReconcileCosts:
    """Each reconciled close's entry count and reconcile CPU: the consumer's step ``reconcile``
    replaced for the block by one whose per-call function is ``reconcile_call`` timed."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.points: list[tuple[int, float]] = []
        self._replaced: Step[Any] | None = None

    def __enter__(self) -> ReconcileCosts:
        def timed(entries: Any, request_id: str, book: Any) -> Any:
            began = time.thread_time()
            try:
                return reconcile_call(entries, request_id, book)
            finally:
                self.points.append((len(entries), time.thread_time() - began))

        self._replaced = self.consumer.replace_step("reconcile", Reconcile(per_call=timed))
        return self

    def __exit__(self, *_: object) -> None:
        if self._replaced is not None:
            self.consumer.replace_step("reconcile", self._replaced)


def _polls(
    consumer: Consumer, until_acked: int, timeout: float = 600.0
) -> tuple[BatchStats, list[tuple[int, float]]]:
    """``Consumer.poll`` until ``until_acked`` notifications were acknowledged; the totals and each
    poll's (entries read, wall seconds)."""
    total = BatchStats()
    polls: list[tuple[int, float]] = []
    deadline = time.perf_counter() + timeout
    while total.acked < until_acked:
        began = time.perf_counter()
        stats = consumer.poll(0, block_ms=None)
        if stats.read:
            polls.append((stats.read, time.perf_counter() - began))
        total.add(stats)
        if not stats.read and time.perf_counter() > deadline:
            raise TimeoutError(f"acknowledged {total.acked} of {until_acked}")
    return total, polls


def _count_sent(engine: Engine) -> list[int]:
    """``[statements, commits]`` the engine sends from now on (its events: round trips, savepoints
    included; the consumer's own commits, which ``pg_stat_database`` mixes with every other session
    of the database, the stand-in autovacuum's one transaction per table included)."""
    counted = [0, 0]

    def statement(*_args: Any) -> None:
        counted[0] += 1

    def commit(*_args: Any) -> None:
        counted[1] += 1

    event.listen(engine, "before_cursor_execute", statement)
    event.listen(engine, "commit", commit)
    return counted


def _memory(client: Any, keys: Keys, request_ids: list[str]) -> tuple[float, float, float]:
    """(bytes per call stream besides its frames, bytes per frame entry, notification stream bytes)."""
    pipe = client.pipeline(transaction=False)
    for rid in request_ids:
        pipe.xlen(keys.request(rid))
        pipe.memory_usage(keys.request(rid), samples=0)
    replies = pipe.execute()
    points = [
        (int(replies[2 * i]) - 1, float(replies[2 * i + 1]))
        for i in range(len(request_ids))
        if replies[2 * i]
    ]
    fixed, per_frame = model.fit_line([p[0] for p in points], [p[1] for p in points])
    notes = float(client.memory_usage(keys.events(0), samples=0) or 0)
    return fixed, per_frame, notes


def _commandstats(client: Any) -> dict[str, tuple[int, int]]:
    return {
        name.removeprefix("cmdstat_").upper().replace("|", " "): (int(v["calls"]), int(v["usec"]))
        for name, v in client.info("commandstats").items()
    }


def measure(count: int, twins: list[dict[str, Any]]) -> dict[str, Any]:
    """Phases A (``count`` calls) and C (row 2's ``twins``); unit costs per closed call of phase A."""
    with (
        services.redis_prefix("capacity") as (plain, prefix),
        services.pg_database("capacity") as url,
        services.autovacuum(url),
    ):
        history.warm(url)
        keys = Keys(prefix)
        calls = workload.simulated_calls(count, run_id=prefix)
        shape = workload.measure(calls)
        redis_pids = cpu.redis_pids(plain)
        database = url.rsplit("/", 1)[1]

        gateway = Traffic()
        writer = counting_client(services.REDIS_URL, gateway)
        redis_meter = cpu.CpuMeter(redis_pids)
        redis_meter.start()
        workload.publish(calls, writer, keys)
        redis_write_cpu = redis_meter.stop()
        writer.close()
        fixed, per_frame, notes_bytes = _memory(plain, keys, [c.request_id for c in calls])
        notifications = plain.xlen(keys.events(0))

        # Phase A: every notification of row 2's calls, one full batch at a time.
        traffic = Traffic()
        client = counting_client(services.REDIS_URL, traffic)
        consumer, engine = make_consumer(client, url, prefix, "capacity-a")
        warm(consumer)
        sent = _count_sent(engine)
        spent: dict[str, list[float]] = {}
        restore = time_steps(consumer, STEPS, spent)
        start_counters = _counters(url)
        start_lsn, oid = _lsn(url)
        redis_meter, pg_meter = cpu.CpuMeter(redis_pids), cpu.CpuMeter(cpu.postgres_pids(database))
        before_stats, before_traffic = _commandstats(plain), traffic.snapshot()
        speed_a = speed.probe()
        redis_meter.start()
        pg_meter.start()
        cpu_started, started = time.process_time(), time.perf_counter()
        with ReconcileCosts(consumer) as reconciled:
            _stats_a, polls_a = _polls(consumer, notifications)
        seconds_a = time.perf_counter() - started
        process_cpu = time.process_time() - cpu_started
        redis_read_cpu = redis_meter.stop()
        pg_cpu = pg_meter.stop(cpu.postgres_pids(database))
        speed_a = (speed_a + speed.probe()) / 2
        reads = traffic.since(before_traffic)
        after_stats = _commandstats(plain)
        restore()
        engine.dispose()
        end_lsn, _ = _lsn(url)
        end_counters = _counters(url)
        wal, wal_source = _wal_bytes(url, start_lsn, end_lsn, oid)

        client.close()

    # Phase C: row 2's twins, other calls of the same mix, each run as row 2 runs a round, just
    # after it: only the median twin's CPU over its wall is used (the drain's efficiency), and its
    # CPU against phase A's (the drain's CPU factor).
    rounds_c = sorted(twins, key=lambda f: f["ours_seconds"] / max(1, f["closed_calls"]))
    c = rounds_c[len(rounds_c) // 2]
    speed_c, cpu_c, seconds_c = c["speed_s"], c["ours_cpu_seconds"], c["ours_seconds"]

    closes = max(1, shape.closed)
    rec_fixed, rec_per_entry = model.fit_line(
        [float(n) for n, _ in reconciled.points], [s for _, s in reconciled.points]
    )
    frames_a = sum(n - 1 for n, _ in reconciled.points)

    def step(name: str) -> tuple[float, float]:
        wall, cpu_s, _calls = spent.get(name, (0.0, 0.0, 0))
        return wall, cpu_s

    read_wall, read_cpu = step("read")
    prep_wall, prep_cpu = step("prepare")
    apply_wall, apply_cpu = step("apply")
    fetch_wall, fetch_cpu = step("fetch")
    efficiency = min(1.0, cpu_c / seconds_c) if seconds_c > 0 else 1.0
    # The drain's CPU per call against the steps' (phase A) moved to phase C's frames per call.
    per_frame_cpu = rec_per_entry + fetch_cpu / max(1, frames_a)
    frames_c = c["frames_per_call"]
    serial_c = process_cpu / closes + per_frame_cpu * (
        frames_c - frames_a / max(1, len(reconciled.points))
    )
    drain_cpu_c = cpu_c / max(1, c["closed_calls"])
    # Phase C's CPU against phase A's as measured: the twins ran in row 2's minutes, so the factor
    # carries the machine's speed there with it.
    cpu_factor = drain_cpu_c / serial_c if serial_c > 0 else 1.0
    process = model.ProcessCosts(
        reader_cpu=(read_cpu + prep_cpu) / closes,
        reader_wall=(read_wall + prep_wall) / closes,
        applier_cpu=apply_cpu / closes,
        applier_wall=apply_wall / closes,
        other_cpu=max(0.0, process_cpu - read_cpu - prep_cpu - apply_cpu) / closes,
        drain_efficiency=efficiency,
        drain_cpu_factor=cpu_factor,
    )
    server_stats = {
        name: (
            calls_n - before_stats.get(name, (0, 0))[0],
            usec - before_stats.get(name, (0, 0))[1],
        )
        for name, (calls_n, usec) in after_stats.items()
    }
    # Redis execution time of our reads: each command of ours at the server's mean for its kind
    # in the window (other clients' commands of the kind share that mean).
    exec_usec = sum(
        n * server_stats[name][1] / server_stats[name][0]
        for name, n in reads.commands.items()
        if server_stats.get(name, (0, 0))[0] > 0
    )
    ins, upd, dele, commits = (b - a for a, b in zip(start_counters, end_counters, strict=True))
    entries_a = sum(n for n, _ in polls_a) / max(1, len(polls_a))
    wall_a = sum(w for _, w in polls_a) / max(1, len(polls_a))
    calls_total = max(1, shape.calls)
    return {
        "calls": shape.calls,
        "closed": shape.closed,
        "notifications": notifications,
        "closes_a": closes,
        "reconciled_a": len(reconciled.points),
        "seconds_a": seconds_a,
        "speed_a": speed_a,
        "speed_c": speed_c,
        "frames_per_close": frames_a / max(1, len(reconciled.points)),
        "plan_frames_per_close": shape.frames / max(1, shape.closed),
        "process": process,
        "process_cpu": process_cpu,
        "steps": {name: tuple(v) for name, v in spent.items()},
        "reconcile_per_call": rec_fixed,
        "reconcile_per_entry": rec_per_entry,
        "fetch_cpu_per_frame": fetch_cpu / max(1, frames_a),
        "fetch_wall": fetch_wall,
        "gateway": gateway,
        "reads": reads,
        "redis_write_cpu_per_call": redis_write_cpu / calls_total,
        "redis_read_cpu_per_close": redis_read_cpu / closes,
        "redis_exec_usec_per_close": exec_usec / closes,
        "server_commands": sum(n for n, _ in server_stats.values()),
        "memory_fixed": fixed,
        "memory_per_frame": per_frame,
        "memory_notes_per_call": notes_bytes / calls_total,
        "notes_per_call": notifications / calls_total,
        "rows_inserted": ins / closes,
        "rows_updated": upd / closes,
        "rows_deleted": dele / closes,
        "commits": sent[1] / closes,
        "database_commits": commits / closes,
        "statements": sent[0] / closes,
        "wal_bytes": wal / closes,
        "wal_source": wal_source,
        "pg_cpu_per_close": pg_cpu / closes,
        "batch_a": consumer.settings.batch_size,
        "polls_a": len(polls_a),
        "entries_a": entries_a,
        "wall_a": wall_a,
        "calls_c": c["closed_calls"],
        "rounds_c": len(rounds_c),
        "seconds_c": seconds_c,
        "cpu_c": cpu_c,
        "efficiency": efficiency,
        "frames_c": frames_c,
        "drain_cpu_c": drain_cpu_c,
        "serial_cpu_c": serial_c,
        "cpu_factor": cpu_factor,
    }


def unit_costs(m: dict[str, Any]) -> model.UnitCosts:
    """The sizing's inputs from a measurement (per closed call; gateway writes spread over the
    closed calls, since every call's writes land on Redis whether it closes or not)."""
    per_closed = m["calls"] / max(1, m["closed"])
    gateway, reads = m["gateway"], m["reads"]
    closes = m["closes_a"]
    return model.UnitCosts(
        process=m["process"],
        frames=m["frames_per_close"],
        per_frame_cpu=m["reconcile_per_entry"] + m["fetch_cpu_per_frame"],
        notes_per_call=m["notes_per_call"],
        redis_commands=gateway.total / max(1, m["calls"]) * per_closed + reads.total / closes,
        redis_cpu=m["redis_write_cpu_per_call"] * per_closed + m["redis_read_cpu_per_close"],
        redis_bytes=(gateway.sent + gateway.received) / max(1, m["calls"]) * per_closed
        + (reads.sent + reads.received) / closes,
        redis_memory_fixed=m["memory_fixed"] + m["memory_notes_per_call"],
        redis_memory_per_frame=m["memory_per_frame"],
        pg_rows=m["rows_inserted"] + m["rows_updated"] + m["rows_deleted"],
        pg_statements=m["statements"],
        pg_commits=m["commits"],
        pg_wal_bytes=m["wal_bytes"],
        pg_cpu=m["pg_cpu_per_close"],
    )


def predict(
    m: dict[str, Any], e2e: dict[str, Any], latency: dict[str, Any], scaling: dict[str, Any]
) -> dict[str, Any]:
    """The three predictions, each with the measured figure of the same run."""
    costs = unit_costs(m)
    frames = m["plan_frames_per_close"]
    # Phase A's closes are the first half's: scaled to the frames of the whole workload's.
    process = costs.process.with_frames(costs.per_frame_cpu, costs.frames, frames)
    # The machine's speed drifts (``harness.speed``); the probe's ratios are reported only. Row 2's
    # speed is in the drain CPU factor, from its twins (see the module's docstring); row 4's in its
    # twins' polls.
    slower2 = e2e["speed_s"] / m["speed_a"]
    per_call = process.seconds_per_call()
    row2 = model.Check("2. frames/s of one consumer", frames / per_call, e2e["ours_frames_per_s"])

    # Every round played with one curve and one noise from all its twins' polls, each round at
    # its own rate and count (a publisher that fell behind its schedule wrote fewer a second). A
    # twin alone has some 25 polls of a size: their median moves by more than the rounds' minutes
    # differ, and the queue amplifies that several times over in a p99 (each round played with its
    # own twin, the three predictions ranked opposite to the rounds they played).
    rounds = latency["round_figures"]
    pooled = [(float(n), w) for r in rounds for n, w in r["twin"]["polls"]]
    curve = model.PollCost.of(pooled)
    noise = [w / curve(n) for n, w in pooled if curve(n) > 0]
    fixed = curve.fixed_point(latency["rate"] * m["notes_per_call"])
    played = []
    for r in rounds:
        rate = min(latency["rate"], r["achieved_rate"])
        p50, p99 = model.played_percentiles(
            rate=rate,
            calls=r["calls"],
            notes_per_call=m["notes_per_call"],
            cost=curve,
            noise=noise or [1.0],
            batch_size=r["batch_size"],
            plays=PLAYS,
        )
        played.append(
            {
                "rate": rate,
                "p50_ms": p50 * 1000,
                "p99_ms": p99 * 1000,
                "measured_p99_ms": r["p99_ms"],
                "speed_s": r["twin"]["speed_s"],
            }
        )
    p99 = statistics.median(r["p99_ms"] for r in played)
    row4 = model.Check("4. settle latency p99 at half load (ms)", p99, latency["p99_ms"])
    s0, s1 = model.poll_line(pooled)

    cores = float(scaling["cores"] or 1)
    # Row 9 writes its calls before its consumers start: Redis's share of its cores is the reads'.
    server = m["redis_read_cpu_per_close"] + costs.pg_cpu
    # One process alone drained a call in t_call using D of CPU, so at least D / t_call cores were
    # free to it; a smaller figure means the background (busy CPUs less ours, sampled from
    # /proc/stat) was overstated, as on a machine shared with a parallel test run. The free cores
    # are floored there, and the note says by how much, rather than the model refusing to predict.
    least = (process.drain_cpu + server) / process.seconds_per_call()
    rates = {}
    for name in ("one", "two"):
        run = scaling[name]
        background = max(
            0.0, run["machine_cpu"] - run["redis_cpu"] - run["postgres_cpu"] - run["consumers_cpu"]
        )
        measured = cores - background
        free = max(measured, least)
        rates[name] = {
            "rate": model.calls_per_s_many(process, run["processes"], free, server),
            "background": background,
            "free": free,
            "floored_from": measured if free > measured else None,
        }
    row9 = model.Check(
        "9. two consumer processes vs one (ratio)", rates["two"]["rate"] / rates["one"]["rate"],
        scaling["ratio"],
    )  # fmt: skip
    return {
        "checks": [row2, row4, row9],
        "per_call_s": per_call,
        "slower2": slower2,
        "frames": frames,
        "latency_p50_ms": statistics.median(r["p50_ms"] for r in played),
        "played": played,
        "curve": curve,
        "fixed_point_entries": fixed,
        "twin_polls": len(pooled),
        "twin_entries": statistics.fmean(n for n, _ in pooled),  # pooled: never empty (PollCost.of)
        "twin_wall": statistics.fmean(w for _, w in pooled),
        "s0": s0,
        "s1": s1,
        "rates9": rates,
        "process": process,
        "costs": costs,
    }


def run(
    smoke: bool,
    e2e: dict[str, Any],
    latency: dict[str, Any],
    scaling: dict[str, Any],
) -> dict[str, Any]:
    m = measure(60 if smoke else CALLS, e2e["twins"])
    found = predict(m, e2e, latency, scaling)
    assumptions = model.Assumptions()
    found["sizing"] = [
        model.size(found["costs"], rate, 100, assumptions) for rate in (10_000, 100_000)
    ]
    found["assumptions"] = assumptions
    found["measured"] = m
    return found
