"""The capacity model: measured unit costs in, predicted rates, latencies and sizes out. Pure: no IO.

``bench_capacity`` measures the unit costs (``UnitCosts``) and checks three predictions against the
rows of the same run; docs/capacity.md states the model in words. The formulas:

* **One consumer process (row 2)** runs two threads under one interpreter lock: the reader (read a
  batch, fetch its streams, reconcile) and the applier (the ledger transaction, acknowledgements).
  Their Python does not overlap, and their waits overlap only in part: a drain keeps its process on
  a CPU for a share ``u`` (its *drain efficiency*, < 1) of its wall time, the rest lost to moments
  when both threads wait (at once on Redis and PostgreSQL, or on the lock's hand-over, or for a
  CPU held by other work), and the hand-overs cost CPU too: a drain spends a factor ``k`` more CPU
  per call than its steps do one batch at a time. So the time per call is ``k x CPU / u``: the CPU
  per call measured by timing the consumer's steps one batch at a time over the workload's calls,
  ``u`` and ``k`` by a drain of other calls of the same mix (its CPU over its wall; its CPU per
  call over the steps' moved to its calls' frames). A thread whose waits
  outlast the other's work lowers ``u``, so the threads' own walls are not a separate bound (timed
  one batch at a time they also hold waits for a CPU, which ``u`` already counts).
* **Two processes on a machine (row 9)**: each is bound as above alone, and together they,
  PostgreSQL and Redis share the cores that other work leaves free: a closed queueing network
  solved by mean value analysis (``calls_per_s_many``), the processes its customers, the cores one
  queue of the consumer's, PostgreSQL's and Redis's CPU per call over the free cores, the rest of
  a process's time alone a delay. Its asymptotes are the bounds ``n / t`` and ``free cores / CPU
  per call``; two processes on two cores sit near the knee, where it falls below both.
* **Settle latency at half load (row 4)**: the consumer is a self-clocked batch server. A poll
  reads what arrived while the last one ran (at most ``batch_size`` entries; it blocks only when
  nothing did) and takes ``cost(entries)`` times a noise factor drawn from the measured polls
  (``PollCost``: the median wall of polls of calls written whole, as row 4 writes them, at each
  of several batch sizes, straight between them, measured by the rounds' twins, each in its
  round's minutes, and pooled: one twin's few polls of a size move its median by more than the
  rounds' minutes differ; the factor is each poll's time over that curve).
  A close waits for the poll running when it arrived, then for its own poll. ``simulate_latency``
  plays that queue with the benchmark's arrivals (every call written whole at its scheduled
  instant) and gives every close's latency; ``played_percentiles`` takes the median of several
  plays, and the prediction for the row is the median over its rounds, as the row's figure is.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

# A prediction within this fraction of the measured figure passes.
TOLERANCE = 0.20


@dataclass(frozen=True)
class ProcessCosts:
    """Seconds per closed call of one consumer process, as its steps measured them."""

    reader_cpu: float
    reader_wall: float
    applier_cpu: float
    applier_wall: float
    other_cpu: float  # the process's CPU outside the timed steps
    # The share of a pipelined drain's wall time its process is on a CPU (process CPU / wall of a
    # drain): 1 if every wait hid behind the other thread's work; below 1 by what did not.
    drain_efficiency: float = 1.0
    # A drain's CPU per call over the steps' timed one batch at a time (the same calls): what the
    # two threads' hand-overs of the lock cost in CPU (switches, caches on another core).
    drain_cpu_factor: float = 1.0

    @property
    def cpu(self) -> float:
        """CPU per call of the steps, one batch at a time."""
        return self.reader_cpu + self.applier_cpu + self.other_cpu

    @property
    def drain_cpu(self) -> float:
        """CPU per call of a pipelined drain."""
        return self.cpu * self.drain_cpu_factor

    def seconds_per_call(self) -> float:
        """The pipelined drain: the lock serialises CPU, which keeps the process busy only a share
        ``drain_efficiency`` of the time (the walls are kept for the notes, not a bound: see the
        module docstring)."""
        if not 0 < self.drain_efficiency <= 1:
            raise ValueError(f"drain efficiency {self.drain_efficiency} is not in (0, 1]")
        return self.drain_cpu / self.drain_efficiency

    def with_frames(
        self, per_frame_cpu: float, frames_from: float, frames_to: float
    ) -> ProcessCosts:
        """The same process for calls of ``frames_to`` frames instead of ``frames_from``: the
        per-frame CPU is the reader's (fetch and reconcile), wall time moves with it."""
        delta = per_frame_cpu * (frames_to - frames_from)
        return ProcessCosts(
            self.reader_cpu + delta,
            self.reader_wall + delta,
            self.applier_cpu,
            self.applier_wall,
            self.other_cpu,
            self.drain_efficiency,
            self.drain_cpu_factor,
        )


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least squares ``y = a + b x``; returns (a, b). With fewer than two distinct x, b is 0."""
    n = len(xs)
    if n == 0:
        raise ValueError("no points to fit")
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return my, 0.0
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return my - b * mx, b


def calls_per_s_many(
    costs: ProcessCosts, processes: int, free_cores: float, server_cpu_per_call: float
) -> float:
    """``processes`` consumer processes sharing ``free_cores`` with the servers: the mean value
    analysis of a closed network (Lazowska et al., *Quantitative System Performance*, ch. 6) whose
    customers are the processes, each cycling through calls. A call visits the cores for its CPU
    ``D`` (the drain's and the servers'), a station of ``free_cores`` servers taken as one queue of
    demand ``D / cores`` and a delay of the rest (Seidmann's approximation for a multi-server
    station); the delay ``Z`` is what makes one process alone take ``seconds_per_call``: its own
    waits, less the overlap of its threads with the servers. The result is below both bounds the
    asymptotes give (``n`` alone, the cores' ``cores / D``) and meets them far from the knee."""
    if processes < 1 or free_cores <= 0:
        raise ValueError(f"{processes} processes on {free_cores} free cores")
    alone = costs.seconds_per_call()
    queued = (costs.drain_cpu + server_cpu_per_call) / free_cores
    delay = alone - queued
    if delay < -1e-9 * alone:  # below rounding: free cores floored at D / t_call land at 0
        raise ValueError(
            f"one process's {alone * 1e3:.3f} ms a call is less than its CPU over the free cores "
            f"({queued * 1e3:.3f} ms): the measured costs contradict each other"
        )
    delay = max(delay, 0.0)
    waiting = 0.0  # customers at the queue, with one fewer in the network
    rate = 0.0
    for n in range(1, processes + 1):
        residence = queued * (1 + waiting)
        rate = n / (residence + delay)
        waiting = rate * residence
    return rate


def poll_line(polls: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """``(s0, s1)`` of a poll's wall time ``s0 + s1 x entries``: least squares over measured
    ``(entries, seconds)`` polls; neither is below 0 (noise can tilt the line past either axis:
    then the line is through the origin, or flat at the mean)."""
    s0, s1 = fit_line([n for n, _ in polls], [w for _, w in polls])
    if s1 < 0:
        return sum(w for _, w in polls) / len(polls), 0.0
    if s0 < 0:
        return 0.0, sum(w for _, w in polls) / sum(n for n, _ in polls)
    return s0, s1


@dataclass(frozen=True)
class PollCost:
    """A poll's wall seconds by the entries it read, from measured polls: the median wall of the
    polls of each size, straight between sizes, and past the largest (or below the smallest) along
    the nearest segment, never below 0. A poll has a fixed cost that one line over every size
    tilts: fitted over 4 to 64 entries it overstates the small polls row 4 runs at. The median,
    not the mean: a poll stalled on its commit (hundreds of ms, a few a minute on a shared VM)
    would move a mean of some fifty polls by several ms, and the queue amplifies that
    (``fixed_point``); the stalls stay in the spread of the polls around the curve, which the
    latency simulation draws from."""

    sizes: tuple[float, ...]
    seconds: tuple[float, ...]

    @classmethod
    def of(cls, polls: Sequence[tuple[float, float]]) -> PollCost:
        """From measured ``(entries, seconds)`` polls (at least one)."""
        if not polls:
            raise ValueError("no measured polls")
        walls: dict[float, list[float]] = {}
        for n, w in polls:
            walls.setdefault(float(n), []).append(w)
        sizes = tuple(sorted(walls))
        return cls(sizes, tuple(statistics.median(walls[n]) for n in sizes))

    def __call__(self, entries: float) -> float:
        xs, ys = self.sizes, self.seconds
        if len(xs) == 1:
            return ys[0]
        i = 1
        while i < len(xs) - 1 and entries > xs[i]:
            i += 1
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return max(0.0, y0 + (y1 - y0) * (entries - x0) / (x1 - x0))

    def fixed_point(self, entries_per_s: float, limit: float = 1e6) -> float:
        """Entries per poll when each poll reads what arrived during the last: n = λ cost(n)
        (iterated from the smallest poll; inf when it does not settle below ``limit``)."""
        n = entries_per_s * self(self.sizes[0])
        for _ in range(10_000):
            following = entries_per_s * self(n)
            if following > limit:
                break
            if abs(following - n) <= 1e-9 * max(1.0, n):
                return following
            n = following
        return float("inf")


def simulate_latency(
    *,
    rate: float,
    calls: int,
    notes_per_call: float,
    cost: Callable[[float], float],
    noise: Sequence[float],
    batch_size: int,
    seed: int = 1,
) -> list[float]:
    """Seconds from each call's write to the end of the poll that commits it. Call ``i`` is
    written whole (its notifications together) at ``i / rate``; a poll of ``n`` entries takes
    ``cost(n)`` times a factor drawn from ``noise``."""
    if not noise:
        raise ValueError("no measured polls to draw the noise from")
    rng = random.Random(seed)
    per_poll = max(1, int(batch_size // max(notes_per_call, 1e-9)))
    latencies: list[float] = []
    now = 0.0
    first = 0
    while first < calls:
        now = max(now, first / rate)  # a blocked read returns as soon as an entry arrives
        last = first
        while last < calls and last / rate <= now and last - first < per_poll:
            last += 1
        now += cost((last - first) * notes_per_call) * rng.choice(noise)
        latencies.extend(now - number / rate for number in range(first, last))
        first = last
    return latencies


def played_percentiles(
    *,
    rate: float,
    calls: int,
    notes_per_call: float,
    cost: Callable[[float], float],
    noise: Sequence[float],
    batch_size: int,
    plays: int,
) -> tuple[float, float]:
    """The median p50 and the median p99 (seconds) of ``plays`` plays of ``simulate_latency``, each
    with its own draws of the noise (seeds 1 to ``plays``): what one round of ``calls`` calls is
    expected to show, as a round's p99 rests on a few of its slowest polls."""
    if plays < 1:
        raise ValueError("at least one play")
    p50s, p99s = [], []
    for seed in range(1, plays + 1):
        played = simulate_latency(
            rate=rate,
            calls=calls,
            notes_per_call=notes_per_call,
            cost=cost,
            noise=noise,
            batch_size=batch_size,
            seed=seed,
        )
        p50s.append(percentile(played, 0.5))
        p99s.append(percentile(played, 0.99))
    return statistics.median(p50s), statistics.median(p99s)


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile, as bench_latency takes it."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


@dataclass(frozen=True)
class Check:
    """A prediction set against the measured figure of the same run."""

    name: str
    predicted: float
    measured: float

    @property
    def gap(self) -> float:
        """(predicted - measured) / measured."""
        return (self.predicted - self.measured) / self.measured if self.measured else math.inf

    @property
    def passed(self) -> bool:
        return abs(self.gap) <= TOLERANCE


# -- sizing ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UnitCosts:
    """Everything the sizing needs, per closed call unless named otherwise (measured by
    ``bench_capacity``; docs/capacity.md says where each comes from)."""

    process: ProcessCosts  # at ``frames`` frames per call
    frames: float
    per_frame_cpu: float
    notes_per_call: float
    redis_commands: float  # gateway writes + worker reads and acknowledgements
    redis_cpu: float  # seconds of the Redis server per call (writes + reads)
    redis_bytes: float  # on the wire, both directions, gateway + worker
    redis_memory_fixed: float  # bytes of a call's stream besides its frame entries
    redis_memory_per_frame: float
    pg_rows: float  # inserted + updated + deleted
    pg_statements: float
    pg_commits: float
    pg_wal_bytes: float
    pg_cpu: float  # seconds of PostgreSQL per call


@dataclass(frozen=True)
class Assumptions:
    """What the sizing takes as given rather than measured here; docs/capacity.md gives reasons."""

    worker_load: float = 0.5  # a process run at half its maximum: row 4's settle-latency regime
    processes_per_partition: float = 2.0  # BILLING_DRAIN_MS 2 s, one drain per partition a second
    max_partitions: int = 256  # docs/events.md section 2
    redis_core_load: float = 0.5  # one Redis shard's main thread kept at half a core
    call_seconds: float = 30.0  # a streamed call's stream lives from open to settle
    outage_seconds: float = 600.0  # a worker outage the streams must absorb
    pg_core_load: float = 0.6  # PostgreSQL's CPUs at 60 %
    max_wal_size: float = 1 << 30  # this server's setting
    checkpoint_completion_target: float = 0.9  # this server's setting
    checkpoint_timeout: float = 300.0  # this server's setting
    max_connections: int = 100  # this server's setting


@dataclass(frozen=True)
class Sizing:
    calls_per_s: float
    frames: float
    worker_cpu_per_call: float
    per_process_calls_per_s: float
    processes: int
    partitions: int
    drain_ms: int  # BILLING_DRAIN_MS that keeps every process busy with that many partitions
    notes_per_partition_per_s: float
    redis_commands_per_s: float
    redis_cpu_cores: float
    redis_shards: int
    redis_commands_per_shard: float
    redis_mbytes_per_s_per_shard: float
    redis_memory_per_call: float
    redis_memory_in_flight_per_shard: float
    redis_memory_outage_per_shard: float
    pg_rows_per_s: float
    pg_statements_per_s: float
    pg_commits_per_s: float
    pg_wal_mbytes_per_s: float
    pg_cpu_cores: float
    pg_cores: int
    pg_connections: int
    checkpoint_every_s: float


def size(costs: UnitCosts, calls_per_s: float, frames: float, a: Assumptions) -> Sizing:
    """A deployment for ``calls_per_s`` calls of ``frames`` frame entries each."""
    process = costs.process.with_frames(costs.per_frame_cpu, costs.frames, frames)
    per_process = a.worker_load / process.seconds_per_call()
    processes = math.ceil(calls_per_s / per_process)
    # Beat starts one drain per partition a second, each reading for BILLING_DRAIN_MS: past the
    # partition cap, longer drains keep more processes reading.
    partitions = min(a.max_partitions, math.ceil(processes / a.processes_per_partition))
    drain_ms = max(2000, math.ceil(processes / partitions) * 1000)
    redis_cpu = calls_per_s * costs.redis_cpu
    shards = max(1, math.ceil(redis_cpu / a.redis_core_load))
    memory = costs.redis_memory_fixed + costs.redis_memory_per_frame * frames
    wal = calls_per_s * costs.pg_wal_bytes
    pg_cpu = calls_per_s * costs.pg_cpu
    return Sizing(
        calls_per_s=calls_per_s,
        frames=frames,
        worker_cpu_per_call=process.drain_cpu,
        per_process_calls_per_s=per_process,
        processes=processes,
        partitions=partitions,
        drain_ms=drain_ms,
        notes_per_partition_per_s=calls_per_s * costs.notes_per_call / partitions,
        redis_commands_per_s=calls_per_s * costs.redis_commands,
        redis_cpu_cores=redis_cpu,
        redis_shards=shards,
        redis_commands_per_shard=calls_per_s * costs.redis_commands / shards,
        redis_mbytes_per_s_per_shard=calls_per_s * costs.redis_bytes / shards / 1e6,
        redis_memory_per_call=memory,
        redis_memory_in_flight_per_shard=calls_per_s * memory * a.call_seconds / shards,
        redis_memory_outage_per_shard=calls_per_s * memory * a.outage_seconds / shards,
        pg_rows_per_s=calls_per_s * costs.pg_rows,
        pg_statements_per_s=calls_per_s * costs.pg_statements,
        pg_commits_per_s=calls_per_s * costs.pg_commits,
        pg_wal_mbytes_per_s=wal / 1e6,
        pg_cpu_cores=pg_cpu,
        pg_cores=math.ceil(pg_cpu / a.pg_core_load),
        pg_connections=processes,
        # PostgreSQL requests a checkpoint once max_wal_size / (1 + completion target) of WAL
        # was written since the last one (CheckPointSegments in xlog.c).
        checkpoint_every_s=min(
            a.checkpoint_timeout, a.max_wal_size / (1 + a.checkpoint_completion_target) / wal
        )
        if wal
        else math.inf,
    )
