"""The capacity model's formulas (``benchmarks.capacity_model``), on inputs whose answers are known
by construction; the measurements themselves run in the smoke test of the whole suite."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

# Under pytest ``benchmarks`` names this test package (tests/ is on the path), so the suite's pure
# module is loaded from its file; it imports nothing of the suite.
_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "capacity_model.py"
_SPEC = importlib.util.spec_from_file_location("capacity_model", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
model = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = model  # dataclasses look their module up there
_SPEC.loader.exec_module(model)

# Pure arithmetic; a shared, busy machine makes hypothesis's per-example deadline noise.
quick = settings(deadline=None)
finite = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False)


@quick
@given(a=finite, b=finite, xs=st.lists(st.integers(0, 10_000), min_size=2, unique=True))
def test_fit_line_recovers_the_line_its_points_lie_on(a: float, b: float, xs: list[int]) -> None:
    ys = [a + b * x for x in xs]
    fitted_a, fitted_b = model.fit_line([float(x) for x in xs], ys)
    assert fitted_b == pytest.approx(b, rel=1e-6, abs=1e-6)
    assert fitted_a == pytest.approx(a, rel=1e-6, abs=1e-3)


def test_fit_line_of_one_x_is_flat_at_the_mean() -> None:
    assert model.fit_line([3.0, 3.0], [1.0, 2.0]) == (1.5, 0.0)
    with pytest.raises(ValueError):
        model.fit_line([], [])


@quick
@given(
    s0=st.floats(0, 0.1),
    s1=st.floats(0, 0.01),
    sizes=st.lists(st.integers(1, 200), min_size=2, unique=True),
)
def test_poll_line_recovers_the_line_its_polls_lie_on(
    s0: float, s1: float, sizes: list[int]
) -> None:
    got0, got1 = model.poll_line([(float(n), s0 + s1 * n) for n in sizes])
    assert got0 == pytest.approx(s0, abs=1e-9)
    assert got1 == pytest.approx(s1, abs=1e-9)


def test_poll_line_by_hand() -> None:
    # Polls of 4, 8 and 16 entries taking 6, 10 and 16 ms: x̄ = 28/3, ȳ = 32/3 ms,
    # Sxy = 184/3 ms, Sxx = 224/3: s1 = 23/28 ms per entry, s0 = 32/3 - 23/28 x 28/3 = 3 ms.
    s0, s1 = model.poll_line([(4.0, 0.006), (8.0, 0.010), (16.0, 0.016)])
    assert s1 == pytest.approx(0.023 / 28)
    assert s0 == pytest.approx(0.003)


def test_poll_line_never_goes_below_zero() -> None:
    # The bigger polls faster (noise): flat at the mean poll.
    assert model.poll_line([(4.0, 0.2), (64.0, 0.1)]) == pytest.approx((0.15, 0.0))
    # The line crosses below the origin: through the origin at the total time per entry.
    assert model.poll_line([(4.0, 0.001), (64.0, 0.2)]) == pytest.approx((0.0, 0.201 / 68))


def costs(
    reader_cpu: float,
    reader_wall: float,
    applier_cpu: float,
    applier_wall: float,
    efficiency: float = 1.0,
):
    return model.ProcessCosts(reader_cpu, reader_wall, applier_cpu, applier_wall, 0.0, efficiency)


def test_one_process_adds_up_the_cpu_of_its_two_threads() -> None:
    # CPU adds up across the two threads (one interpreter lock), however long each one's wall.
    assert costs(1.0, 1.5, 1.0, 1.5).seconds_per_call() == 2.0
    assert costs(0.2, 0.3, 0.3, 5.0).seconds_per_call() == 0.5


def test_a_drain_busy_part_of_its_time_takes_its_cpu_over_that_share() -> None:
    # 0.6 + 0.3 ms of CPU, the process on a CPU 90 % of a drain: 1 ms a call.
    assert costs(0.6, 0.7, 0.3, 0.5, 0.9).seconds_per_call() == pytest.approx(1.0)
    # A slow thread shows in the efficiency a drain measures, not in its own wall: 2 ms of reader
    # wall timed one batch at a time leave 0.9 ms / 0.9 as it was.
    assert costs(0.6, 2.0, 0.3, 0.5, 0.9).seconds_per_call() == pytest.approx(1.0)
    # A drain spending 1.25 times its steps' CPU: 0.9 ms x 1.25 / 0.9 = 1.25 ms a call.
    drain = model.ProcessCosts(0.6, 0.7, 0.3, 0.5, 0.0, 0.9, 1.25)
    assert drain.drain_cpu == pytest.approx(0.9 * 1.25)
    assert drain.seconds_per_call() == pytest.approx(1.25)
    assert drain.with_frames(0.001, 100, 200).drain_cpu == pytest.approx(1.0 * 1.25)
    # Moving the frames keeps the efficiency.
    assert costs(0.6, 0.7, 0.3, 0.5, 0.9).with_frames(0.001, 100, 190).drain_efficiency == 0.9
    with pytest.raises(ValueError):
        costs(0.6, 0.7, 0.3, 0.5, 0.0).seconds_per_call()


def test_more_frames_add_their_cpu_to_the_reader() -> None:
    moved = costs(1.0, 2.0, 1.0, 1.0).with_frames(0.01, 100, 150)
    assert moved.reader_cpu == pytest.approx(1.5)
    assert moved.reader_wall == pytest.approx(2.5)
    assert moved.applier_cpu == 1.0


def test_several_processes_share_the_free_cores_with_the_servers() -> None:
    one = costs(0.001, 0.001, 0.0, 0.0)  # 1 ms a call alone, 1 ms of CPU
    # Alone, a process makes what it makes, whatever the cores.
    assert model.calls_per_s_many(one, 1, 3.0, 0.0005) == pytest.approx(1000)
    # By hand: 1.5 ms of CPU on 3 cores is a queue of 0.5 ms and a delay of 0.5 ms; the second
    # process finds the first at the queue half the time: 0.5 x 1.5 = 0.75 ms there, 2 / 1.25 ms.
    assert model.calls_per_s_many(one, 2, 3.0, 0.0005) == pytest.approx(1600)
    # The third finds 1,600 x 0.75 ms = 1.2 there: 0.5 x 2.2 = 1.1 ms, 3 / 1.6 ms.
    assert model.calls_per_s_many(one, 3, 3.0, 0.0005) == pytest.approx(1875)
    # Cores to spare: the processes add up; no cores to spare (1.5 ms on 1.5 cores): one queue.
    assert model.calls_per_s_many(one, 2, 1e6, 0.0) == pytest.approx(2000, rel=1e-5)
    assert model.calls_per_s_many(one, 2, 1.5, 0.0005) == pytest.approx(1000)
    # Cores floored at what one process alone used (its CPU over its time, as bench_capacity does
    # when the background was overstated): no delay, one queue, whatever the float rounding.
    for server in (0.0005, 0.0003, 1e-7):
        least = (one.drain_cpu + server) / one.seconds_per_call()
        assert model.calls_per_s_many(one, 1, least, server) == pytest.approx(1000)
        assert model.calls_per_s_many(one, 2, least, server) == pytest.approx(1000)
    # A process that alone is faster than its CPU spread over every core cannot be.
    with pytest.raises(ValueError):
        model.calls_per_s_many(one, 2, 0.5, 0.0005)
    with pytest.raises(ValueError):
        model.calls_per_s_many(one, 0, 2.0, 0.0)


def _repairman(service: float, delay: float, customers: int) -> float:
    """Throughput of ``customers`` cycling through one exponential server of mean ``service`` and a
    delay of mean ``delay``, from the finite-source queue's stationary distribution (the chance the
    server is idle), not by mean value analysis."""
    ratio = service / delay
    weights = [math.perm(customers, k) * ratio**k for k in range(customers + 1)]
    return (1 - weights[0] / sum(weights)) / service


@quick
@given(
    alone=st.floats(1e-4, 1e-2),
    share=st.floats(0.01, 0.99),
    cores=st.floats(0.5, 8.0),
    processes=st.integers(1, 12),
)
def test_the_shared_cores_solve_as_a_finite_source_queue(
    alone: float, share: float, cores: float, processes: int
) -> None:
    # The CPU over the cores is a share of one process's time alone; the rest is its delay. The
    # process's own CPU is at most its time alone (its efficiency at most 1), the servers' the rest.
    queued = alone * share
    efficiency = min(1.0, share * cores)
    process = costs(efficiency * alone, alone, 0.0, 0.0, efficiency)
    servers = queued * cores - efficiency * alone
    found = model.calls_per_s_many(process, processes, cores, servers)
    assert found == pytest.approx(_repairman(queued, alone - queued, processes), rel=1e-9)
    assert found <= min(processes / alone, 1 / queued) * (1 + 1e-12)
    if processes > 1:
        fewer = model.calls_per_s_many(process, processes - 1, cores, servers)
        assert found >= fewer * (1 - 1e-12)  # equal, to rounding, once the cores are the bound


def test_a_lone_call_waits_for_exactly_its_own_poll() -> None:
    # Calls a second apart, polls of 10 ms: each blocked read returns at its call and takes 10 ms.
    latencies = model.simulate_latency(
        rate=1.0, calls=5, notes_per_call=2, cost=lambda n: 0.004 + 0.003 * n, noise=[1.0],
        batch_size=200,
    )  # fmt: skip
    assert latencies == pytest.approx([0.010] * 5)


def test_a_backlog_is_read_in_batches_of_at_most_batch_size() -> None:
    # Six calls a picosecond apart, 1 s a poll. The blocked first read returns with the first call
    # alone; the other five are there when it ends, read two per batch (4 entries, 2 each).
    latencies = model.simulate_latency(
        rate=1e12, calls=6, notes_per_call=2, cost=lambda n: 1.0, noise=[1.0], batch_size=4
    )
    assert latencies == pytest.approx([1, 2, 2, 3, 3, 4], abs=1e-6)


def test_slower_polls_never_shorten_the_tail() -> None:
    common = dict(rate=400.0, calls=4000, notes_per_call=2, batch_size=200, seed=3)
    noise = [0.5, 1.0, 1.0, 3.0]
    tails = [
        model.percentile(
            model.simulate_latency(cost=lambda n, s1=s1: 0.005 + s1 * n, noise=noise, **common),
            0.99,
        )
        for s1 in (0.0002, 0.0005, 0.001)
    ]
    assert tails == sorted(tails)
    assert tails[0] >= 0.005


def test_poll_cost_by_hand() -> None:
    # Sizes 4 (two polls: 10 and 14 ms, mean 12), 8 (14 ms) and 16 (20 ms).
    cost = model.PollCost.of([(4, 0.010), (8, 0.014), (4, 0.014), (16, 0.020)])
    assert cost.sizes == (4.0, 8.0, 16.0)
    assert cost(4) == pytest.approx(0.012)
    assert cost(6) == pytest.approx(0.013)  # halfway between 12 and 14 ms
    assert cost(12) == pytest.approx(0.017)  # halfway between 14 and 20 ms
    assert cost(32) == pytest.approx(0.032)  # the last segment's 0.75 ms per entry, on
    assert cost(0) == pytest.approx(0.010)  # the first segment's 0.5 ms per entry, back
    assert model.PollCost.of([(4, 0.010)])(100) == pytest.approx(0.010)  # one size: flat
    # The median of a size's polls: one stalled on its commit does not move the curve.
    stalled = model.PollCost.of([(4, 0.010), (4, 0.011), (4, 0.500), (8, 0.014)])
    assert stalled(4) == pytest.approx(0.011)


def test_poll_cost_fixed_point_by_hand() -> None:
    # cost(n) = 10 ms + 0.5 ms x n (sizes 4 and 8); at 1,000 entries/s, n = 10 + 0.5 n: n = 20.
    cost = model.PollCost.of([(4, 0.012), (8, 0.014)])
    assert cost.fixed_point(1000.0) == pytest.approx(20.0, rel=1e-6)
    # At 2,000 entries/s each poll reads more than the last: it never settles.
    assert cost.fixed_point(2000.0) == float("inf")


def test_a_check_passes_within_twenty_percent_either_way() -> None:
    assert model.Check("x", 119, 100).passed
    assert model.Check("x", 81, 100).passed
    assert not model.Check("x", 121, 100).passed
    assert not model.Check("x", 79, 100).passed
    assert model.Check("x", 79, 100).gap == pytest.approx(-0.21)


def unit_costs(**overrides: float) -> model.UnitCosts:
    values = dict(
        process=costs(0.0005, 0.0006, 0.0005, 0.0007),
        frames=100.0,
        per_frame_cpu=0.0,
        notes_per_call=2.0,
        redis_commands=10.0,
        redis_cpu=0.0001,
        redis_bytes=50_000.0,
        redis_memory_fixed=1000.0,
        redis_memory_per_frame=400.0,
        pg_rows=10.0,
        pg_statements=0.1,
        pg_commits=0.005,
        pg_wal_bytes=5000.0,
        pg_cpu=0.0002,
    )
    return model.UnitCosts(**{**values, **overrides})


def test_sizing_counts_processes_at_half_load_and_caps_partitions() -> None:
    a = model.Assumptions()
    # 1 ms per call: 1,000 calls/s a process, 500 at half load.
    small = model.size(unit_costs(), 10_000, 100, a)
    assert small.processes == 20 and small.partitions == 10 and small.drain_ms == 2000
    big = model.size(unit_costs(), 1_000_000, 100, a)
    assert big.processes == 2000
    assert big.partitions == 256
    assert big.drain_ms == 8000  # ceil(2000 / 256) processes per partition, one drain a second
    assert big.redis_shards == math.ceil(1_000_000 * 0.0001 / a.redis_core_load)
    assert big.pg_wal_mbytes_per_s == pytest.approx(5000.0)
    assert big.redis_memory_per_call == 1000 + 400 * 100


def test_sizing_runs_a_process_at_half_its_drain_rate() -> None:
    a = model.Assumptions()
    # 1 ms of CPU per call at 50 % drain efficiency: 500 calls/s a process, 250 at half load.
    slow = unit_costs(process=costs(0.0005, 0.0006, 0.0005, 0.0007, 0.5))
    sized = model.size(slow, 10_000, 100, a)
    assert sized.per_process_calls_per_s == pytest.approx(250)
    assert sized.processes == 40
    assert sized.worker_cpu_per_call == pytest.approx(0.001)


def test_sizing_moves_the_reader_cpu_with_the_frames() -> None:
    a = model.Assumptions()
    base = unit_costs(per_frame_cpu=0.00001)  # 10 µs a frame, measured at 100 frames
    assert model.size(base, 1000, 200, a).worker_cpu_per_call == pytest.approx(0.002)


def test_plays_without_noise_all_give_the_one_queue() -> None:
    # No spread around the curve: every play is the same queue, so the medians are its percentiles.
    common = dict(rate=400.0, calls=2000, notes_per_call=2, batch_size=200)
    cost = model.PollCost.of([(4, 0.008), (16, 0.012), (64, 0.030)])
    alone = model.simulate_latency(cost=cost, noise=[1.0], **common)
    p50, p99 = model.played_percentiles(cost=cost, noise=[1.0], plays=5, **common)
    assert p50 == pytest.approx(model.percentile(alone, 0.5))
    assert p99 == pytest.approx(model.percentile(alone, 0.99))


def test_plays_take_the_median_tail_of_their_draws() -> None:
    # One stall in ten polls: the plays differ by where their draws put the stalls; the median of
    # five p99s lies within the range of the plays' own p99s, each play seeded 1 to 5.
    common = dict(rate=400.0, calls=3000, notes_per_call=2, batch_size=200)
    cost = model.PollCost.of([(4, 0.006), (64, 0.020)])
    noise = [1.0] * 9 + [12.0]
    tails = sorted(
        model.percentile(model.simulate_latency(cost=cost, noise=noise, seed=seed, **common), 0.99)
        for seed in range(1, 6)
    )
    _p50, p99 = model.played_percentiles(cost=cost, noise=noise, plays=5, **common)
    assert p99 == pytest.approx(tails[2])
    with pytest.raises(ValueError):
        model.played_percentiles(cost=cost, noise=noise, plays=0, **common)
