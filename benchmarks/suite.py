"""The suite: each benchmark's figures turned into table rows.

A benchmark module measures and returns a dict (``run(smoke) -> dict``); the functions here only
read those dicts, so a module can be run and inspected on its own. Rows that need another row's
figure (the naive design and the latency row use the end-to-end maximum rate) get it from the
``Context``, which runs the end-to-end benchmark first if ``--only`` skipped it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import (
    bench_assembly,
    bench_capacity,
    bench_cli,
    bench_estimate,
    bench_export,
    bench_gateway,
    bench_latency,
    bench_ledger,
    bench_memory,
    bench_naive,
    bench_pipeline,
    bench_reads,
    bench_reads_pg,
    bench_report,
    bench_scaling,
    bench_spend,
    bench_tokenizers,
)
from benchmarks.harness.own_time import describe
from benchmarks.harness.table import Row, rate


@dataclass
class Context:
    smoke: bool
    profile_dir: Path | None = None
    memory_calls: tuple[int, int] | None = None  # (first, last) checkpoints of row 8
    figures: dict[str, dict[str, Any]] = field(default_factory=dict)

    def e2e(self) -> dict[str, Any]:
        """The end-to-end figures, measured now if this run has not measured them yet."""
        if "e2e" not in self.figures:
            self.figures["e2e"] = bench_pipeline.run(self.smoke, self.profile_dir)
        return self.figures["e2e"]

    def measured(self, name: str) -> dict[str, Any]:
        """Row 4's (``latency``) or row 9's (``scaling``) figures, measured now if this run has
        not measured them yet."""
        if name not in self.figures:
            if name == "latency":
                self.figures[name] = bench_latency.run(self.e2e()["ours_calls_per_s"], self.smoke)
            else:
                self.figures[name] = bench_scaling.run(self.smoke)
        return self.figures[name]


def assembly(ctx: Context) -> list[Row]:
    f = ctx.figures["assembly"] = bench_assembly.run(ctx.smoke)
    return [
        Row(
            "1. stream assembly",
            rate(f["ours_frames_per_s"], "frames/s"),
            f"{rate(f['openai_frames_per_s'], 'frames/s')} (openai ChatCompletionStreamState)",
            f["ratio"],
            f"≥ {f['target_ratio']:.0f}x",
            bool(f["meets_target"]),
            [
                f"parse + assemble from SSE bytes; {f['streams']} seeded streams, {f['frames']:,} frames; results checked field by field",
                f"where ours spends its time (cProfile, own time): {describe(f['ours_profile'])}",
                "what the consumer pays per frame for a whole call (reconcile_stream: decode, "
                "assemble, estimate, price), on the simulator's streamed calls as the consumer "
                f"reads them ({f['calls']:,} calls, {f['call_frames']:,} frame records): "
                f"{f['reconcile_ns_per_frame']:,.0f} ns/frame, of which assembly "
                f"{f['assemble_ns_per_frame']:,.0f} ns; own time: {describe(f['reconcile_profile'])}",
            ],
        )
    ]


def e2e(ctx: Context) -> list[Row]:
    f = ctx.e2e()
    effects = ", ".join(f"{name} {count}" for name, count in sorted(f["effects"].items()))
    return [
        Row(
            "2. end-to-end, one consumer",
            f"{rate(f['ours_frames_per_s'], 'frames/s')} ({rate(f['ours_calls_per_s'], 'calls/s')})",
            f"{rate(f['transport_frames_per_s'], 'frames/s')} (transport limit)",
            f["ratio"],
            f"≥ {f['target_ratio']}",
            bool(f["meets_target"]),
            [
                "Redis → reconcile → PostgreSQL commit → ack, Consumer.drain (the next batch "
                "read and reconciled while the last is applied), against XREADGROUP + pipelined "
                "XRANGE per call (replies left as Redis sends them, as the consumer reads them) + "
                "XACK of the same entries; "
                f"{f['calls']:,} simulated calls (default fault mix), {f['closed_calls']:,} closed, "
                f"{f['frames']:,} frame entries ({f['frames_per_call']:.0f} per closed call), "
                f"{f['notifications']:,} notifications; drain {f['ours_seconds']:.2f} s vs "
                f"transport {f['transport_seconds']:.3f} s; effects: {effects}, dead {f['dead']}; "
                f"the median of {len(f['rounds_frames_per_s'])} rounds, each on its own prefix and "
                f"database (frames/s {', '.join(f'{v:,.0f}' for v in f['rounds_frames_per_s'])}; "
                f"ratios {', '.join(f'{v:.3f}x' for v in f['rounds_ratio'])})",
                _bounds_e2e(f),
                _tried_e2e(f),
            ],
        ),
        Row(
            "Redis memory / in-flight frame",
            f"{f['redis_bytes_per_frame']:,.0f} bytes",
            notes=[
                "INFO used_memory after writing minus before, over the frame entries written "
                "(request entries and notifications included in the delta); other clients of the "
                "server add noise"
            ],
        ),
    ]


def estimate(ctx: Context) -> list[Row]:
    f = ctx.figures["estimate"] = bench_estimate.run(ctx.smoke)
    return [
        Row(
            "5. tiktoken fallback",
            rate(f["estimate_tokens_per_s"], "tokens/s"),
            f"{rate(f['tiktoken_tokens_per_s'], 'tokens/s')} (tiktoken encode_ordinary)",
            f["ratio"],
            f"≥ {f['target_ratio']}",
            bool(f["meets_target"]),
            [
                f"estimate_completion vs encode_ordinary on {f['texts']} texts, "
                f"{f['tokens']:,} tokens; short texts (<200 chars) ratio "
                f"{f['short_ratio']:.2f}"
            ],
        ),
        _spaceless_estimate(ctx),
        _real_tokenizer(ctx),
    ]


def _real_tokenizer(ctx: Context) -> Row:
    f = ctx.figures["estimate_tekken"] = bench_tokenizers.run(ctx.smoke)
    load = f["load"]

    def loaded(kind: str) -> str:
        cost = load.get(kind)
        return (
            "not measured"
            if cost is None
            else (f"+{cost['rss_mb']:.0f} MB RSS, {cost['seconds']:.2f} s to load")
        )

    common = f["mistral_common"]
    compared = (
        "mistral-common is not installed (the `mistral` extra): not compared"
        if common is None
        else (
            f"mistral-common 1.13.1's Tekkenizer on the same texts: {common['differ']} of "
            f"{f['texts']} counted differently, {f['chars'] / common['seconds'] / 1e6:.1f} MB/s "
            f"(the shipped ranks {f['tekken_chars_per_s'] * common['seconds'] / f['chars']:.1f}x "
            f"faster), {loaded('mistral-common')} against the ranks' {loaded('tekken_240718')} "
            f"(cl100k: {loaded('cl100k_base')}); so Tekken ships as ranks in tiktoken, and "
            "mistral-common is only the tests' oracle"
        )
    )
    return Row(
        "5. real tokenizer (Mistral Tekken) vs cl100k",
        f"{f['tekken_chars_per_s'] / 1e6:.1f} MB/s",
        f"{f['peer_chars_per_s'] / 1e6:.1f} MB/s (estimate_completion, gpt-4: cl100k)",
        f["ratio"],
        f"≥ {f['target_ratio']}",
        bool(f["meets_target"]),
        [
            f"estimate_completion for open-mistral-nemo (Tekken ranks in tiktoken) and gpt-4 "
            f"(cl100k) on the same {f['texts']} texts ({f['chars']:,} characters; "
            f"{f['tekken_tokens']:,} Tekken tokens, {f['peer_tokens']:,} cl100k tokens); "
            "ratio = cl100k's time over Tekken's",
            compared,
        ],
    )


def _spaceless_estimate(ctx: Context) -> Row:
    f = ctx.figures["estimate_spaceless"] = bench_estimate.run_spaceless(ctx.smoke)
    kinds = f["kinds"]

    def peak(value: float | None) -> str:
        return "?" if value is None else f"+{value:,.1f} MB"

    each = "; ".join(
        f"{kind} {k['mb_per_s']:.1f} MB/s (x{k['linearity']:.2f}, {peak(k['peak_rss_mb'])})"
        for kind, k in kinds.items()
    )
    return Row(
        "5. tiktoken fallback, text without spaces",
        f"{f['worst_mb_per_s']:.2f} MB/s ({f['worst']}, the slowest)",
        f"{f['target_mb_per_s']:.0f} MB/s (target)",
        f["ratio"],
        "≥ 1x",
        bool(f["meets_target"]),
        [
            f"estimate_completion on one completion of {f['chars']:,} characters of each kind "
            "(MB of UTF-8), best of its rounds; in brackets: MB/s at full size over MB/s at a "
            "quarter (1 when linear), and the peak RSS above the process's while counting: "
            f"{each}. Before the pieces were bounded (COUNT_PIECE_CHARS), a 5.7 MB run of letters "
            "was counted at 0.96 MB/s with 228 MB more RSS, and a run of a million spaces made "
            "tiktoken panic"
        ],
    )


def naive(ctx: Context) -> list[Row]:
    ours = ctx.e2e()
    f = ctx.figures["naive"] = bench_naive.run(ctx.smoke, processes=1)
    cores = os.cpu_count() or 2
    wide = ctx.figures["naive_wide"] = bench_naive.run(ctx.smoke, processes=cores)
    ratio = ours["ours_calls_per_s"] / f["calls_per_s"]
    return [
        Row(
            "3. end-to-end vs a Celery task per frame",
            rate(ours["ours_calls_per_s"], "calls/s"),
            f"{rate(f['calls_per_s'], 'calls/s')} (naive: task per frame, one process)",
            ratio,
            "≥ 100x",
            ratio >= 100,
            [
                "naive: a real `celery worker` (prefork pool of one process, as row 2 is one worker "
                f"process), broker on Redis db {bench_naive.REDIS_DB}; {f['calls']} calls, "
                f"{f['tasks']:,} tasks ({f['tasks_per_s']:,.0f} tasks/s), each frame appended to a "
                "per-call hash, a final task reconciles and settles in its own transaction; ours: "
                "row 2's calls/s",
                f"naive with a pool of {cores} processes (every core): "
                f"{rate(wide['calls_per_s'], 'calls/s')} ({wide['tasks_per_s']:,.0f} tasks/s), "
                f"{ours['ours_calls_per_s'] / wide['calls_per_s']:.0f}x below our one process",
            ],
        )
    ]


def _bounds_e2e(f: dict[str, Any]) -> str:
    steps = f["steps"]

    labels = {"prepare": "in all", "read": "read", "fetch": "stream reads",
              "reconcile": "reconcile", "apply": "in all", "ledger_batched": "batched ledger",
              "ledger_per_call": "per-call ledger"}  # fmt: skip

    def step(name: str) -> str:
        wall, cpu, _calls = steps.get(name, (0.0, 0.0, 0))
        return f"{labels[name]} {cpu:.2f} s CPU ({wall:.2f} s wall)"

    return (
        f"what bounds it: the process spent {f['ours_cpu_seconds']:.2f} s of CPU in the drain "
        f"against the transport's {f['transport_cpu_seconds']:.2f} s: the reader thread "
        f"{step('read')} + {step('prepare')}, of which {step('fetch')} (the transport's own work) "
        f"and {step('reconcile')} (decode, assemble, estimate, price: the plain frames in compiled "
        "code, without the lock for a call's run of them, the rest of every frame and call in "
        "Python, tiktoken's counts without the lock); "
        f"the applier {step('apply')}, of which {step('ledger_batched')} and {step('ledger_per_call')} "
        "(the calls the batch path hands back), the rest commit and acknowledgements. The two threads share one interpreter lock, so "
        "the drain is bound by their CPU together; what would move it is less Python per call "
        "(the ledger's statement building and the per-call work around the assembler) or more "
        "processes (row 9)"
    )


def _tried_e2e(f: dict[str, Any]) -> str:
    """Row 2's budget at its target and what has been tried against it (history: commit messages)."""
    budget = 2 * f["transport_seconds"]
    reconcile_cpu = f["steps"].get("reconcile", (0.0, 0.0, 0))[1]
    rest = f["ours_cpu_seconds"] - reconcile_cpu
    return (
        f"the target's budget: 0.5x is a drain of {budget:.2f} s here; with reconcile free, the "
        f"drain's other CPU ({rest:.2f} s: stream reads, the ledger's Python, commits, "
        "acknowledgements) would "
        + ("still exceed it" if rest > budget else f"leave {budget - rest:.2f} s for reconcile")
        + ", and PostgreSQL's and Redis's CPU per call (row 12) share the same cores. Tried: a "
        "pure-Python fast path for plain chunks (row 1 66x → 148x; row 2 moved little); one "
        "statement per table for a batch's linked rows and the final status inserted, not "
        "updated; the balance check once per statement instead of per row (migration 0013, row 6); "
        "the next batch read while the last is applied; compiling the Python there is, measured "
        "on the speed probe (`reconcile_stream` over 40 calls): Cython 3.3.1 on worker/core/assembly.py "
        "as it is, 3 % faster, mypyc 2.4.1 11 % (the assembler's own Python ~30 % faster; "
        "decoding and token counting are C and Rust already), too little for a compiled build on "
        "every machine; the plain frames compiled (`worker.plain_chunk`: Rust through PyO3 with "
        "Debian's packaged crates, a call's run of plain frames taken in one call, a frame "
        "whose bytes around its content repeat an earlier one's not decoded again): "
        "`reconcile_stream` 2,600 → 1,950 ns a frame record (the two revisions alternated on one "
        "machine), row 1 137x → 264x, row 2 0.156x → 0.172x (rounds 0.17-0.23x, within the "
        "spread of a run's rounds): the reader's Python per call (decoding the entries, the "
        "request, the estimate's tiktoken calls, the result) and the ledger's are what is left; "
        "a shorter interpreter switch interval (0.5 ms) made the drain slower (0.19x against "
        "0.23x, three alternated rounds each), so the lock's hand-overs are not what bounds it"
    )


def _diagnosis(f: dict[str, Any]) -> str:
    d = f["diagnosis"]
    labels = {"transaction_ms": "transaction (ledger_batched and the commit within it)"}
    steps = ", ".join(
        f"{labels.get(name, name.removesuffix('_ms'))} {value:.0%}"
        for name, value in d["slow_window_steps"].items()
    )
    machine, consumer, publisher = d["slow_window_machine"]
    return (
        f"consumer (Consumer.poll, one batch at a time, so each poll can be traced) batch_size "
        f"{f['batch_size']}, block_ms {f['block_ms']}: {d['polls']:,} polls "
        f"read {d['read_p50']:.0f} entries at the median (max {d['read_max']}, {d['at_cap']} at the "
        f"cap), took p50 {d['poll_ms_p50']:,.0f} ms, p99 {d['poll_ms_p99']:,.0f} ms, max "
        f"{d['poll_ms_max']:,.0f} ms; the consumer was in a poll {d['busy_share']:.0%} of the run, "
        f"on CPU {d['cpu_share']:.0%} and waiting for a CPU (runnable, schedstat) "
        f"{d['starved_share']:.0%} of that time; {d['slow_polls']} polls committed a close "
        f"≥ 1 s old; the polls of the 3 s before them read {d['slow_window_read_mean']:.0f} "
        f"entries and took {d['slow_window_ms_mean']:,.0f} ms on average, waiting for a CPU "
        f"{d['slow_window_starved_share']:.0%} of it (steps: {steps}), while the machine's "
        f"{os.cpu_count()} cores were {machine:.2f} busy (consumer {consumer:.2f}, publisher + "
        f"stand-in autovacuum {publisher:.2f}, the rest other processes and the servers); over "
        f"the run the machine was {d['machine_busy_mean']:.2f} cores busy on average; "
        f"{d['vacuums']} VACUUM ANALYZE runs took {d['vacuum_share']:.0%} of the run (longest "
        f"{d['vacuum_max_s']:.2f} s), {d['slow_during_vacuum']} of the slow polls overlapped one; "
        f"publisher up to {f['publisher_behind_ms']:,.0f} ms behind schedule "
        f"({f['publisher_late_calls']:,} calls > 50 ms late)"
    )


def latency(ctx: Context) -> list[Row]:
    f = ctx.measured("latency")
    return [
        Row(
            "4. settle latency close → commit",
            f"p99 {f['p99_ms']:,.0f} ms, p50 {f['p50_ms']:,.0f} ms (median of {f['rounds']} "
            f"rounds; worst p99 {f['worst_p99_ms']:,.0f} ms)",
            f"at {rate(f['rate'], 'calls/s')} (half of row 2's {f['max_rate']:,.0f})",
            None,
            "p99 < 1 s",
            bool(f["meets_target"]),
            [
                f"{f['rounds']} rounds of {f['round_seconds']:.0f} s, each with its own prefix, "
                f"database and consumer process; p99 of each: "
                f"{', '.join(f'{p:,.0f}' for p in f['round_p99s_ms'])} ms; the target is met when "
                f"every round meets it; the figures below are the median round's",
                f"{f['samples']:,} reconciled closes out of {f['calls']:,} calls written at "
                f"{f['achieved_rate']:,.1f} calls/s by this process while one consumer process ran; "
                f"p90 {f['p90_ms']:,.0f} ms, max {f['max_ms']:,.0f} ms",
                _diagnosis(f),
            ],
        )
    ]


def _writes(run: dict[str, Any]) -> str:
    inserted = ", ".join(f"{t} {n:,}" for t, n in sorted(run["inserted"].items()))
    updated = ", ".join(f"{t} {n:,}" for t, n in sorted(run["updated"].items()))
    return (
        f"{run['inserted_per_settlement']:.2f} rows inserted + {run['updated_per_settlement']:.2f} "
        f"updated per settlement (inserted: {inserted}; updated: {updated}), "
        f"{run['statements_per_settlement']:.2f} statements + "
        f"{run['executemany_per_settlement']:.2f} executemany per settlement (round trips, "
        f"savepoints included), commits (the deferred balance triggers) {run['commit_seconds']:.2f} "
        f"s of {run['seconds']:.2f} s, this process on CPU {run['cpu_share']:.0%} of the wall time"
    )


def _ledger_rounds(f: dict[str, Any]) -> str:
    rounds = ", ".join(
        f"{r['ratio']:.3f}x ({r['ours_seconds']:.2f} s against {r['bare_seconds']:.2f} s)"
        for r in f["rounds"]
    )
    return (
        f"rounds, each in a new database, the peer first in every other one: {rounds}; the row is "
        "the median round"
    )


def _ledger_server(f: dict[str, Any]) -> list[str]:
    """What bounds the row: the server's time for one batch's inserts, against the peer's whole
    batch."""
    found = f["explained"]
    if not found:
        return []
    batches = f["settlements"] / f["batch"]
    per_batch_ms = 1000 * f["bare_seconds"] / batches
    ours_ms = 1000 * f["ours"]["seconds"] / batches
    tables = ", ".join(f"{name} {ms:.1f}" for name, ms in found["tables_ms"].items())
    return [
        f"what is left, one more batch of {found['calls']} fresh calls under EXPLAIN ANALYZE "
        f"(each INSERT explained in a savepoint rolled back, then run): the server takes "
        f"{found['server_ms']:.1f} ms for its inserts ({tables} ms; EXPLAIN's own clock reads "
        "included, so a little high), "
        f"{found['foreign_key_ms']:.1f} ms of it the foreign keys' row checks "
        f"({found['foreign_key_ms'] / found['server_ms']:.0%}; the bare table has none), "
        f"against {per_batch_ms:.1f} ms for the peer's whole batch and {ours_ms:.1f} ms for "
        "ours (Python, statements, commit): the server's part alone is "
        f"{found['server_ms'] / ours_ms:.0%} of our batch, so no change to the Python can take "
        f"the row above {per_batch_ms / found['server_ms']:.2f}x without writing fewer rows or "
        "checking fewer keys; the foreign keys stay (an entry without its transaction or account, "
        "a transaction without its reservation, are what the ledger must refuse)"
    ]


def ledger(ctx: Context) -> list[Row]:
    f = ctx.figures["ledger"] = bench_ledger.run(ctx.smoke)
    ours, calls = f["ours"], f["per_call"]
    bare = (
        f"{rate(f['bare_settlements_per_s'], 'settlements/s')} (executemany, "
        f"{f['bare_rows_per_settlement']} rows/settlement, bare table)"
    )
    return [
        Row(
            "6. ledger writes (batched: apply_common + record_findings_many)",
            rate(ours["settlements_per_s"], "settlements/s"),
            bare,
            f["ratio"],
            f"≥ {f['target_ratio']}",
            bool(f["meets_target"]),
            [
                f"{f['settlements']:,} fresh calls held and settled, {f['batch']} per transaction, "
                "in a process whose collector is tuned as a worker's (tune_gc), "
                "as Consumer.process applies a batch: one savepoint around apply_common(holds, "
                "results) + record_findings_many, then the calls it hands back one savepoint each "
                f"(apply_result + record_findings): {f['handed_back']:,} here, every one a charge "
                f"above its hold (a true-up; {f['above_hold']:,} in the work), taking "
                f"{f['handed_back_seconds']:.2f} s of {ours['seconds']:.2f} s; {_writes(ours)}; "
                f"the peer inserts {f['bare_rows_per_settlement']} rows per settlement (the "
                "batched path's inserted rows, rounded up; its updates not counted) and writes "
                "nothing else",
                _ledger_rounds(f),
                *_ledger_server(f),
            ],
        ),
        Row(
            "6. ledger writes, per call (hold + apply_result + record_findings)",
            rate(calls["settlements_per_s"], "settlements/s"),
            bare,
            f["per_call_ratio"],
            "info",
            None,
            [
                "the same calls into a new database, a savepoint per call, as the consumer's step "
                "ledger_per_call does for duplicates, failures, voids and true-ups; "
                f"{_writes(calls)}; the same rows as the batched path"
            ],
        ),
    ]


def _plan(plan: dict[str, Any] | None) -> str:
    if plan is None:
        return ""
    nodes = "; ".join(
        f"{node['node']} {node['exclusive_ms']:,.0f} ms ({node['rows']:,} rows"
        + (f", {node['workers']} workers" if node["workers"] else "")
        + (f", {node['batches']} hash batches" if node["batches"] and node["batches"] > 1 else "")
        + ")"
        for node in plan["nodes"]
    )
    return (
        f"EXPLAIN ANALYZE of {plan['section']} ({plan['execution_ms']:,.0f} ms; buffers hit "
        f"{plan['shared_hit']:,}, read {plan['shared_read']:,}, temp written "
        f"{plan['temp_written']:,}), the nodes taking the most time of their own: {nodes}"
    )


MONEY_BOUND = (
    "what bounds money: entries carry neither their call nor their account's kind, so every entry "
    "row (several per settlement, 5 times the rows the peer scans) is hash-joined to its "
    "transaction (a hash of every ledger transaction), that to the window's reservations (for the "
    "day) and to ledger_accounts (for the kind) before the FILTER sums, all in memory (no temp "
    "files); per-node timing inflates EXPLAIN's own total. A report-side index does not remove "
    "the joins; what would move it is on the ledger's write side: carry the call's day (or "
    "reservation_id) and the account kind on entries, or keep per-day sums by kind written in "
    "the settling transaction, so money becomes one scan of one table, as drift did"
)


CALLS_BOUND = (
    "what bounds calls: nothing per call: calls and providers read calls_daily (every call counted "
    "in the row of its (day, account, model, state), kept by the ledger's writers, a few thousand "
    "rows); drift is what is left per call"
)
DRIFT_BOUND = (
    "what bounds drift: exact percentiles need every drift value in the window: an index-only "
    "scan of ix_usage_records_drift, already in (model, drift) order, cut into model ranges that "
    "a Parallel Append runs one per process (an ordered-set aggregate cannot be split further); "
    "the ranges are cut by calls_daily's counts, so the slowest range bounds it"
)


def report(ctx: Context) -> list[Row]:
    f = ctx.figures["report"] = bench_report.run(ctx.smoke)
    title = "7. billing report"
    seed = f["seed"]
    statuses = ", ".join(f"{name} {n:,}" for name, n in sorted(seed["statuses"].items()))
    counts = ", ".join(f"{name} {n:,}" for name, n in sorted(seed["counts"].items()))
    sections = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in f["sections"].items())
    notes = [
        "the whole report (by day over every call, rendered as JSON) against "
        "SELECT count(*), sum(…) FROM usage_records; best of three each; ratio = report time / "
        "scan time",
        f"seed, what the worker writes: {seed['calls']:,} calls ({statuses}), "
        f"{seed['transactions']:,} ledger transactions (hold, charge, true-up for one settled call "
        f"in ten, release for voids) with {seed['entries']:,} entries, {counts}; usage records "
        "with model, requested_at, output_hash and the drift of streamed reported calls; "
        "bulk-loaded with INSERT … SELECT (triggers off, as a restore does; every transaction "
        f"checked to balance) in {seed['load_seconds']:.0f} s, then VACUUM ANALYZE "
        f"({seed['vacuum_seconds']:.0f} s); the report ties out: {f['ties_out']}",
        "one more run, by section (drift, then providers, run on a second connection of the "
        "report's snapshot, beside calls, money, parity and anomalies: the sections overlap): "
        f"{sections}; slowest: {f['slowest']}; "
        f"{_plan(f['plan'])}",
    ]
    if not f["meets_target"] and f["slowest"] == "money":
        notes.append(MONEY_BOUND)
    if f["slowest"] == "calls":
        notes.append(CALLS_BOUND)
    if f["slowest"] == "drift":
        notes.append(DRIFT_BOUND)
    return [
        Row(
            title,
            f"{f['ours_seconds']:.2f} s",
            f"{f['scan_seconds']:.3f} s (one sequential scan)",
            f["ratio"],
            f"≤ {f['target_ratio']:.0f}x",
            bool(f["meets_target"]),
            notes,
        )
    ]


def memory(ctx: Context) -> list[Row]:
    first, last = ctx.memory_calls or (None, None)
    f = ctx.figures["memory"] = bench_memory.run(ctx.smoke, first, last)
    mib = 1 << 20
    return [
        Row(
            "8. consumer RSS growth",
            f"{f['rss_last'] / mib:,.0f} MiB after {f['last_calls']:,} calls",
            f"{f['rss_first'] / mib:,.0f} MiB after {f['first_calls']:,} calls",
            f["ratio"],
            f"≤ {f['target_ratio']}x",
            bool(f["meets_target"]),
            [
                f"tiny calls (open, 4 frame entries, close) at {f['calls_per_s']:,.0f} calls/s; "
                f"RSS at start {f['rss_start'] / mib:,.0f} MiB; Redis used_memory grew "
                f"{f['redis_growth_per_call']:,.0f} bytes per settled call between the checkpoints "
                "(acknowledged notifications stay until the sweeper trims them, and no sweeper "
                f"runs here); {f['seconds'] / 60:.1f} min to reach {f['last_calls']:,} calls"
            ],
        )
    ]


def spaceless(ctx: Context) -> list[Row]:
    f = ctx.figures["spaceless"] = bench_memory.run_spaceless(ctx.smoke)
    mb = 1e6
    return [
        Row(
            "8. consumer peak RSS, calls without spaces",
            f"{f['peak_rss'] / mb:,.0f} MB peak",
            f"{f['cap'] / mb:,.0f} MB (cap)",
            f["ratio"],
            "≤ 1x",
            bool(f["meets_target"]),
            [
                f"{f['calls']} streamed calls of {f['bytes'] / f['calls'] / (1 << 20):,.1f} MiB "
                f"(frames of ~{bench_memory.SPACELESS_FRAME_BYTES / 1000:,.0f} KB of "
                f"{', '.join(f['kinds'])}; no usage asked for, so each is settled at the "
                "estimate) written before one consumer process started; its peak RSS (VmHWM) "
                f"with its start ({f['rss_start'] / mb:,.0f} MB) included; "
                f"{f['settled']} settled, {f['unsettled']} unsettled, {f['dead']} dead, drained "
                f"in {f['seconds']:.1f} s. Before the estimate's pieces were bounded, the same "
                "calls (a run of letters in place of the spaces) peaked at 1,744 MB and drained "
                "in 204 s, and the call of spaces made tiktoken panic, which ended the consumer "
                "process"
            ],
        )
    ]


def scaling(ctx: Context) -> list[Row]:
    f = ctx.measured("scaling")
    one, two = f["one"], f["two"]

    def shares(run: dict[str, Any]) -> str:
        return (
            f"Redis {run['redis_cpu']:.0%}, PostgreSQL {run['postgres_cpu']:.0%}, "
            f"consumers {run['consumers_cpu']:.0%}, the whole machine {run['machine_cpu']:.0%}"
        )

    return [
        Row(
            "9. two consumer processes vs one",
            rate(two["calls_per_s"], "calls/s"),
            f"{rate(one['calls_per_s'], 'calls/s')} (one process)",
            f["ratio"],
            "report",
            None,
            [
                f"{len(f['ratios'])} pairs of runs (one process, two processes; the order "
                "alternating), the median pair's figures: "
                + ", ".join(f"{ratio:.2f}x" for ratio in f["ratios"])
                + f"; {one['calls']:,} simulated calls each; CPU, as a share of one core, one "
                f"process: {shares(one)}; two processes: {shares(two)} ({f['cores']} cores in all)"
            ],
        )
    ]


def cli(ctx: Context) -> list[Row]:
    f = ctx.figures["cli"] = bench_cli.run(ctx.smoke)
    bare = f"{f['bare_ms']:,.0f} ms (python -c pass, same venv)"
    rows = []
    for name, title in (("help", "billing --help"), ("show_help", "billing show --help")):
        rows.append(
            Row(
                f"10. {title} start-up",
                f"{f[f'{name}_ms']:,.0f} ms",
                bare,
                f[f"{name}_ratio"],
                f"≤ {f['target_ratio']:.0f}x",
                bool(f[f"{name}_meets_target"]),
                [
                    f"median wall time of {f['rounds']} fresh processes each, started in turn "
                    f"with the bare interpreter; fastest {f[f'{name}_min_ms']:,.0f} ms vs "
                    f"{f['bare_min_ms']:,.0f} ms ({f[f'{name}_min_ratio']:.1f}x); the command "
                    "modules are imported only when named and import their heavy libraries "
                    "inside the command (tests/cli/test_startup.py checks which they load)"
                ],
            )
        )
    return rows


READ_COMMANDS = (
    ("balance", "billing balance"),
    ("show", "billing show"),
    ("unsettled", "billing unsettled list"),
    ("prices_which", "billing prices which"),
    ("statement", "billing statement"),
    ("doctor", "billing doctor"),
)


PG_READ_COMMANDS = (
    ("balance", "billing balance"),
    ("unsettled", "billing unsettled list"),
    ("show", "billing show"),
    ("statement", "billing statement"),
    ("report", "billing report"),
    ("export", "billing export calls (one day, CSV)"),
)


def reads_pg(ctx: Context) -> list[Row]:
    f = ctx.figures["reads_pg"] = bench_reads_pg.run(ctx.smoke)
    peer = f"{f['psql_ms']:,.0f} ms (psql -c 'select 1', same database)"
    return [
        Row(
            f"16. {title} on a PostgreSQL ledger of {f['calls']:,} calls",
            f"{f[f'{name}_ms']:,.0f} ms ({f[f'{name}_cpu_ms']:,.0f} ms CPU)",
            peer,
            f[f"{name}_ratio"],
            f"≤ {f['target_ms']:.0f} ms",
            bool(f[f"{name}_meets_target"]),
            [
                f"`billing {f['commands'][name]}`; median wall (and CPU) time of {f['rounds']} "
                f"fresh processes, started in turn with the peer; fastest "
                f"{f[f'{name}_min_ms']:,.0f} ms vs {f['psql_min_ms']:,.0f} ms; psql's CPU "
                f"{f['psql_cpu_ms']:,.0f} ms"
            ],
        )
        for name, title in PG_READ_COMMANDS
    ]


def reads(ctx: Context) -> list[Row]:
    f = ctx.figures["reads"] = bench_reads.run(ctx.smoke)
    bare = f"{f['bare_ms']:,.0f} ms (python -c pass, same venv)"
    return [
        Row(
            f"14. {title} on a small ledger",
            f"{f[f'{name}_ms']:,.0f} ms",
            bare,
            f[f"{name}_ratio"],
            f"≤ {f['target_ms']:.0f} ms",
            bool(f[f"{name}_meets_target"]),
            [
                f"`billing {f['commands'][name]}` on a SQLite ledger of {f['calls']} settled "
                f"calls; median wall time of {f['rounds']} fresh processes, started in turn with "
                f"the bare interpreter; fastest {f[f'{name}_min_ms']:,.0f} ms vs "
                f"{f['bare_min_ms']:,.0f} ms (tests/cli/test_read_imports.py checks which heavy "
                "libraries it loads)"
            ],
        )
        for name, title in READ_COMMANDS
    ]


def export(ctx: Context) -> list[Row]:
    f = ctx.figures["export"] = bench_export.run(ctx.smoke)
    return [
        Row(
            f"15. billing export calls ({f['calls']:,} calls)",
            f"{f['ours_seconds']:.2f} s, peak RSS {f['ours_rss_mb']:,.0f} MB",
            f"{f['peer_seconds']:.2f} s, peak RSS {f['peer_rss_mb']:,.0f} MB (the same SELECT, "
            "streamed, rows dropped)",
            f["ratio"],
            "info",
            None,
            [
                "every call of row 7's seed to one Parquet file (run_export, what `billing export "
                "calls --format parquet` runs: a server-side cursor, 20,000 rows a batch, one row "
                f"group each) in a fresh process; {rate(f['calls_per_s'], 'calls/s')}, "
                f"{f['file_mb']:,.1f} MB written; the peer reads the same rows the same way and "
                "converts and writes nothing; ratio = export time / SELECT time"
            ],
        ),
        Row(
            "export peak RSS: all calls vs a tenth",
            f"{f['ours_rss_mb']:,.0f} MB ({f['calls']:,} calls)",
            f"{f['tenth_rss_mb']:,.0f} MB ({f['tenth_calls']:,} calls)",
            f["rss_ratio"],
            f"≤ {f['rss_target']}x",
            bool(f["meets_target"]),
            [
                "peak RSS (ru_maxrss) of the whole export over that of the first tenth of the "
                "window, each in a fresh process: memory that does not grow with the rows"
            ],
        ),
    ]


def _against(low: float, high: float, target: float) -> str:
    """Where a ratio's interval over one run's rounds lies against a ceiling ``target``. Runs of
    the same code differ by more than their rounds do (docs/gateway.md), so this places the run's
    figure, not the code's."""
    if high < target:
        return "met beyond the spread of this run's rounds"
    if low >= target:
        return "missed beyond the spread of this run's rounds"
    return "within the spread of this run's rounds"


def gateway(ctx: Context) -> list[Row]:
    f = ctx.figures["gateway"] = bench_gateway.run(ctx.smoke)
    cpu, p99, p50 = f["cpu_ms"], f["ttfb_p99_ms"], f["ttfb_p50_ms"]
    low, high = f["added_ttfb_p99_interval_ms"]
    ratios = f["round_ratios"]
    rlow, rhigh = f["ratio_interval"]
    loop = f["billed_loop_cpu_ms"]
    return [
        Row(
            "11. gateway tee: CPU per streamed call",
            f"{cpu['billed']:.2f} ms CPU, TTFB p99 {p99['billed']:.2f} ms",
            f"{cpu['plain']:.2f} ms CPU, TTFB p99 {p99['plain']:.2f} ms (same gateway, no billing)",
            f["ratio"],
            f"< {f['target_ratio']:.2f}x CPU, < {f['target_ttfb_ms']:.0f} ms TTFB p99 added",
            bool(f["meets_target"]),
            [
                f"the example ASGI gateway (uvicorn, Starlette, httpx to a local upstream "
                f"streaming {f['events_per_call']} events, {f['bytes_per_call']:,} bytes a call) "
                f"with BillingMiddleware + Tee vs --no-billing, {f['calls']:,} calls each, "
                f"alternating call by call, one keep-alive httpx client per gateway; CPU of each "
                f"gateway process (all its threads) from /proc over {f['rounds']} rounds, the "
                f"billed one's after its tee wrote the round's calls: {f['ratio']:.3f}x in all "
                f"(95 % bootstrap interval over the rounds {rlow:.3f} … {rhigh:.3f}x, so the "
                f"target is {_against(rlow, rhigh, f['target_ratio'])}), per round "
                f"{ratios[0]:.3f}x … {ratios[len(ratios) // 2]:.3f}x (median) … "
                f"{ratios[-1]:.3f}x; of the billed gateway's {cpu['billed']:.2f} ms, its event "
                f"loop's thread {loop:.2f} ms and the tee's thread {cpu['billed'] - loop:.2f} ms; "
                f"TTFB added at p99 {f['added_ttfb_p99_ms']:+.2f} ms (95 % bootstrap interval "
                f"{low:+.2f} … {high:+.2f} ms), at p50 {p50['billed'] - p50['plain']:+.2f} ms "
                f"({p50['billed']:.2f} vs {p50['plain']:.2f} ms); Redis's CPU not counted"
            ],
        )
    ]


def spend(ctx: Context) -> list[Row]:
    f = ctx.figures["spend"] = bench_spend.run(ctx.smoke)
    p99, p50 = f["ttfb_p99_ms"], f["ttfb_p50_ms"]
    low, high = f["added_ttfb_p99_interval_ms"]
    return [
        Row(
            "13. admission + hold: TTFB added before the upstream call",
            f"TTFB p99 {p99['authorized']:.2f} ms, {f['round_trips']:.2f} Redis round trips/call",
            f"TTFB p99 {p99['plain']:.2f} ms (same gateway, --no-billing)",
            p99["authorized"] / p99["plain"] if p99["plain"] else None,
            f"≤ {f['target_ttfb_ms']} ms p99 added, ≤ {f['target_round_trips']:.0f} round trips",
            bool(f["meets_target"]),
            [
                f"the example ASGI gateway with BillingMiddleware + Tee and --authorize (the hold "
                f"priced, the admission record written and the hold taken in one Redis script "
                f"before the upstream call) against the same gateway --no-billing; "
                f"{f['calls']:,} streamed calls paced open-loop at "
                f"{f['rate']:,.0f} calls/s in all (achieved {f['achieved_rate']:,.0f}), "
                f"alternating the gateways; TTFB added at p99 {f['added_ttfb_p99_ms']:+.2f} ms "
                f"(95 % bootstrap interval {low:+.2f} … {high:+.2f} ms), at p50 "
                f"{p50['authorized'] - p50['plain']:+.2f} ms; admission scripts per "
                f"billed call {f['round_trips']:.2f} (Redis INFO commandstats); "
                f"{f['holds_taken']:,} holds taken"
            ],
        )
    ]


def _commands(traffic: Any, per: float) -> str:
    top = ", ".join(f"{name} {n / per:.2f}" for name, n in traffic.commands.most_common(6))
    return f"{traffic.total / per:.2f} ({top})"


def _unit_costs(m: dict[str, Any], costs: Any) -> list[str]:
    p = m["process"]
    ms = 1000
    gateway_per = max(1, m["calls"])
    closes = m["closes_a"]
    return [
        f"unit costs, phase A (row 2's {m['closes_a']:,} closed calls, {m['polls_a']} polls of "
        f"{m['entries_a']:.0f} entries, Consumer.poll one batch at a time, {m['seconds_a']:.2f} s): "
        f"consumer per closed call ({m['frames_per_close']:.0f} frame entries each): reader "
        f"{p.reader_cpu * ms:.3f} ms CPU ({p.reader_wall * ms:.3f} ms wall), applier "
        f"{p.applier_cpu * ms:.3f} ms CPU ({p.applier_wall * ms:.3f} ms wall), other "
        f"{p.other_cpu * ms:.3f} ms CPU; reconcile CPU {m['reconcile_per_call'] * 1e6:.0f} µs per "
        f"call + {m['reconcile_per_entry'] * 1e6:.2f} µs per entry (least squares over every "
        f"close), stream reads {m['fetch_cpu_per_frame'] * 1e6:.2f} µs CPU per frame: "
        f"{costs.per_frame_cpu * 1e6:.2f} µs per frame in all",
        f"Redis per call (counted in the clients): gateway writes "
        f"{_commands(m['gateway'], gateway_per)} commands, "
        f"{(m['gateway'].sent + m['gateway'].received) / gateway_per:,.0f} bytes on the wire; "
        f"worker per closed call {_commands(m['reads'], closes)} commands, "
        f"{m['reads'].sent / closes:,.0f} bytes sent, {m['reads'].received / closes:,.0f} received; "
        f"the server counted {m['server_commands']:,} commands of every client in the window "
        f"(INFO commandstats), ours executing {m['redis_exec_usec_per_close']:.0f} µs per close; "
        f"Redis CPU (/proc, every client's) {m['redis_write_cpu_per_call'] * 1e6:.0f} µs per call "
        f"written, {m['redis_read_cpu_per_close'] * 1e6:.0f} µs per close read; memory (MEMORY "
        f"USAGE of every call stream, least squares) {m['memory_fixed']:,.0f} bytes + "
        f"{m['memory_per_frame']:,.0f} per frame entry, notifications {m['memory_notes_per_call']:,.0f} "
        "per call",
        f"PostgreSQL per closed call: rows inserted {m['rows_inserted']:.2f}, updated "
        f"{m['rows_updated']:.2f}, deleted {m['rows_deleted']:.2f} (pg_stat_user_tables), "
        f"statements {m['statements']:.3f} (round trips, savepoints included), commits "
        f"{m['commits']:.4f} (the consumer's; the database's, every session's, "
        f"{m['database_commits']:.4f}: pg_stat_database), WAL {m['wal_bytes']:,.0f} bytes "
        f"({m['wal_source']}), CPU {m['pg_cpu_per_close'] * 1e6:.0f} µs (/proc: this database's "
        "backends, the postmaster and the shared background processes)",
    ]


def _sizing(z: Any) -> str:
    mib = 1 << 20
    return (
        f"sizing for {z.calls_per_s:,.0f} calls/s of {z.frames:.0f} frames: worker CPU "
        f"{z.worker_cpu_per_call * 1000:.2f} ms per call, {z.per_process_calls_per_s:,.0f} calls/s "
        f"per process at half load → {z.processes:,} processes (cores), {z.partitions:,} "
        f"partitions with BILLING_DRAIN_MS {z.drain_ms:,} "
        f"({z.notes_per_partition_per_s:,.0f} notifications/s each); Redis "
        f"{z.redis_commands_per_s:,.0f} commands/s, {z.redis_cpu_cores:.1f} cores → "
        f"{z.redis_shards} shards ({z.redis_commands_per_shard:,.0f} commands/s, "
        f"{z.redis_mbytes_per_s_per_shard:,.1f} MB/s each), {z.redis_memory_per_call / 1024:,.1f} KiB "
        f"per call in flight: {z.redis_memory_in_flight_per_shard / mib:,.0f} MiB per shard for "
        f"calls in flight, {z.redis_memory_outage_per_shard / mib:,.0f} MiB per shard over a worker "
        f"outage; PostgreSQL {z.pg_rows_per_s:,.0f} rows/s, {z.pg_statements_per_s:,.0f} "
        f"statements/s, {z.pg_commits_per_s:,.0f} commits/s, WAL {z.pg_wal_mbytes_per_s:,.1f} MB/s "
        f"(a checkpoint every {z.checkpoint_every_s:,.0f} s at max_wal_size 1 GB), "
        f"{z.pg_cpu_cores:.1f} cores busy → {z.pg_cores} cores, {z.pg_connections:,} connections"
    )


def capacity(ctx: Context) -> list[Row]:
    e2e, latency, scaling = ctx.e2e(), ctx.measured("latency"), ctx.measured("scaling")
    f = ctx.figures["capacity"] = bench_capacity.run(ctx.smoke, e2e, latency, scaling)
    m = f["measured"]
    row2, row4, row9 = f["checks"]
    p = f["process"]
    one, two = f["rates9"]["one"], f["rates9"]["two"]
    floored = [
        f"{whose} {run['floored_from']:.2f} raised to {run['free']:.2f}"
        for whose, run in (("one process's", one), ("two processes'", two))
        if run["floored_from"] is not None
    ]
    played = f["played"]
    curve = ", ".join(
        f"{n:.0f} entries {w * 1000:.1f} ms"
        for n, w in zip(f["curve"].sizes, f["curve"].seconds, strict=True)
    )
    twins_speed = ", ".join(f"{r['speed_s'] * 1000:.1f}" for r in played)
    model_notes = [
        f"the machine's speed drifts: the speed probe (benchmarks/harness/speed.py, a fixed "
        f"reconcile_stream workload timed before and after each measurement) read "
        f"{e2e['speed_s'] * 1000:.1f} ms around row 2's median round, {latency['speed_s'] * 1000:.1f}"
        f" ms around row 4's median round, {twins_speed} ms around its rounds' twins, "
        f"{m['speed_a'] * 1000:.1f} and {m['speed_c'] * 1000:.1f} ms around phases A and C, "
        f"reported only: row 2 ran {f['slower2']:.3f}x as slow as phase A, and its speed is in the "
        f"drain CPU factor, measured on its twins in its own minutes; row 4's is in its twins' "
        f"polls, each measured just after a round; row 9 is a ratio of two runs at one speed",
        f"row 2 from phase A: {f['per_call_s'] * 1000:.3f} ms per call = drain CPU factor "
        f"{p.drain_cpu_factor:.3f} x CPU {p.cpu * 1000:.3f} ms / drain efficiency "
        f"{p.drain_efficiency:.3f} (two threads, one interpreter lock: CPU adds up, waits overlap "
        f"in part); both from phase C, the median of row 2's {m['rounds_c']} twins (other calls "
        f"of the same mix, each run as a round of row 2 just after it; {m['calls_c']:,} closed "
        f"calls of {m['frames_c']:.0f} frame entries): {m['cpu_c']:.2f} s of process CPU in "
        f"{m['seconds_c']:.2f} s, {m['drain_cpu_c'] * 1000:.3f} ms per call against phase A's "
        f"{m['serial_cpu_c'] * 1000:.3f} ms at those frames",
        f"row 4: every round played with its twins (other calls of the same mix written whole "
        f"as row 4 writes them, polled just after each round by a consumer process of their own "
        f"at 4 to 64 entries in turn, beside a publisher at the round's rate), pooled: a poll's "
        f"wall by the entries it read, the median of the twins' polls of each size, straight "
        f"between sizes ({curve}), x a factor drawn from every twin poll around that curve "
        f"({f['twin_polls']} polls, batches of {f['twin_entries']:.1f} entries in "
        f"{f['twin_wall'] * 1000:.1f} ms on average; one line over them all would be s0 "
        f"{f['s0'] * 1000:.2f} ms + s1 {f['s1'] * 1000:.3f} ms per entry, which overstates the "
        f"small polls); each round's queue at its rate as published "
        f"({f['fixed_point_entries']:.0f} entries a poll at the planned rate's fixed point), "
        f"{m['notes_per_call']:.2f} notifications per call, batches of at most "
        f"{latency['batch_size']}, the median of {bench_capacity.PLAYS} plays: p99 "
        + ", ".join(f"{r['p99_ms']:,.0f} ms against {r['measured_p99_ms']:,.0f}" for r in played)
        + f"; p50 {f['latency_p50_ms']:,.0f} ms (row 4's median round: "
        f"{latency['p50_ms']:,.0f} ms)",
        f"row 9: other work took {one['background']:.2f} and {two['background']:.2f} of "
        f"{scaling['cores']} cores during row 9's runs (the machine's busy CPUs less Redis, "
        "PostgreSQL and the consumers); "
        + (
            f"free cores {' and '.join(floored)} (at least what one process alone used: its CPU "
            "per call over t_call, so the background was overstated); "
            if floored
            else ""
        )
        + f"predicted {one['rate']:,.0f} and {two['rate']:,.0f} calls/s (row 9: "
        f"{scaling['one']['calls_per_s']:,.0f} and {scaling['two']['calls_per_s']:,.0f})",
    ]
    notes = _unit_costs(m, f["costs"]) + model_notes + [_sizing(z) for z in f["sizing"]]
    rows = []
    for check, unit in ((row2, "frames/s"), (row4, "ms"), (row9, "x")):

        def shown(value: float, unit: str = unit) -> str:
            return f"{value:.2f}x" if unit == "x" else rate(value, unit)

        rows.append(
            Row(
                f"12. capacity model: {check.name}",
                f"predicted {shown(check.predicted)}",
                f"measured {shown(check.measured)}",
                check.predicted / check.measured if check.measured else None,
                "within 20 %",
                check.passed,
            )
        )
    rows[0].notes = notes
    return rows


# In the order they run: the rows the capacity model predicts (2, 4, 9) and the model's own
# measurement (12) one after another, so that the machine's speed has little time to drift between
# them (the model also corrects for what drift there is: ``harness.speed``).
BENCHMARKS: dict[str, Callable[[Context], list[Row]]] = {
    "assembly": assembly,
    "e2e": e2e,
    "latency": latency,
    "scaling": scaling,
    "capacity": capacity,
    "naive": naive,
    "estimate": estimate,
    "ledger": ledger,
    "report": report,
    "memory": memory,
    "spaceless": spaceless,
    "cli": cli,
    "gateway": gateway,
    "spend": spend,
    "reads": reads,
    "export": export,
    "reads_pg": reads_pg,
}
# In the order of the table, by row number.
TABLE = (
    "assembly", "e2e", "naive", "latency", "estimate", "ledger", "report", "memory", "spaceless",
    "scaling", "cli", "gateway", "capacity", "spend", "reads", "export", "reads_pg",
)  # fmt: skip
