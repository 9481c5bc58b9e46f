"""Fault tests: a seeded simulator run through real worker processes while something breaks.

Each test ends with the same check against the model (``model.check``): every call settled,
unsettled or voided exactly once with the simulator's expected reason, usage source and charge;
every ledger transaction sums to zero; every account's held, charged and available balances equal
the model's; every dead letter is one the simulator planned, and every planned one is there.
"""

from __future__ import annotations

import random
import time

import pytest

from worker.simulation.calls import plan
from worker.simulation.driver import play
from worker.simulation.faults import parse_faults

from .gateway import Gate, GatedClient, paced, play_shuffled
from .harness import ChaosRun, LagProbe, assert_clean

pytestmark = [pytest.mark.chaos, pytest.mark.e2e, pytest.mark.postgres]

FAULTS = parse_faults("default")
SETTLE_TIMEOUT = 240.0


def _plan(n: int, seed: int, name: str):
    return plan(n, seed, FAULTS, twins=0.05, run_id=f"{name}{seed}")


def test_kill_9_random_worker(scale, private_redis, private_pg, workdir, record) -> None:
    """kill -9 one of two workers at random moments (at least 5 times), restarting it each time."""
    seed, rate = 101, scale.pick(150, 120)
    calls = _plan(scale.pick(700, 20_000), seed, "kill")
    rng = random.Random(seed)
    publish_seconds = len(calls) / rate
    kills_wanted = scale.pick(5, 12)
    run = ChaosRun("kill-9", private_redis, private_pg, workdir)
    with run:
        gateway = run.in_background(
            lambda: play(paced(calls, lambda _t: rate), private_redis.client(), run.keys)
        )
        time.sleep(2.0)
        victims = []
        while not gateway.done() or len(victims) < kills_wanted:
            pause = max(1.0, publish_seconds / (kills_wanted + 1))
            time.sleep(rng.uniform(0.5 * pause, 1.2 * pause) if not gateway.done() else 2.0)
            victims.append(run.fleet.kill_random(rng, down_seconds=rng.uniform(0.1, 1.0)))
        gateway.join()
        run.settle(calls, SETTLE_TIMEOUT)
        verdict = run.verdict(calls)
        logs = run.fleet.logs()
    figures = run.figures(verdict, calls, injected=len(victims), kills=len(victims))
    record.append(figures)
    assert len(victims) >= 5
    assert_clean(verdict, figures, logs)


def test_postgres_restart_mid_run(scale, private_redis, private_pg, workdir, record) -> None:
    """Restart the private PostgreSQL twice while calls stream in: once cleanly, once as a crash."""
    seed, rate = 202, scale.pick(150, 120)
    calls = _plan(scale.pick(500, 20_000), seed, "pg")
    publish_seconds = len(calls) / rate
    run = ChaosRun("postgres-restart", private_redis, private_pg, workdir)
    with run:
        gateway = run.in_background(
            lambda: play(paced(calls, lambda _t: rate), private_redis.client(), run.keys)
        )
        modes = []
        for mode in ("fast", "immediate"):
            time.sleep(publish_seconds / 3)
            private_pg.restart(mode)
            modes.append(mode)
        gateway.join()
        run.settle(calls, SETTLE_TIMEOUT)
        verdict = run.verdict(calls)
        logs = run.fleet.logs()
    figures = run.figures(verdict, calls, injected=len(modes), restarts="+".join(modes))
    record.append(figures)
    assert_clean(verdict, figures, logs)


def test_redis_restart_mid_run(scale, private_redis, private_pg, workdir, record) -> None:
    """Restart the private Redis (events and Celery broker) with AOF persistence mid-run.

    The gateway waits at a gate while Redis is down (it would buffer or retry); the workers do not.
    A Celery worker may exit when its broker goes away (kombu's Redis transport raises an
    "Unrecoverable error" from its reconnect path): the run is supervised, as production is
    (compose `restart: unless-stopped`), and the exits are counted in the figures.
    """
    seed, rate = 303, scale.pick(150, 120)
    calls = _plan(scale.pick(500, 20_000), seed, "redis")
    publish_seconds = len(calls) / rate
    restarts = scale.pick(1, 3)
    gate = Gate()
    client = private_redis.client()
    gated = GatedClient(client, gate)
    run = ChaosRun("redis-restart", private_redis, private_pg, workdir, supervised=True)
    with run:
        gateway = run.in_background(lambda: play(paced(calls, lambda _t: rate), gated, run.keys))
        for _ in range(restarts):
            time.sleep(publish_seconds / (restarts + 1))
            with gate.closed():
                private_redis.restart(down_seconds=2.0)
                client.connection_pool.disconnect()
            time.sleep(1.0)
            run.fleet.revive()
        gateway.join()
        run.settle(calls, SETTLE_TIMEOUT)
        verdict = run.verdict(calls)
        logs = run.fleet.logs()
    figures = run.figures(
        verdict, calls, injected=restarts, restarts=restarts, worker_exits=run.fleet.revivals
    )
    record.append(figures)
    assert_clean(verdict, figures, logs)


def test_duplicated_and_reordered_notifications(
    scale, private_redis, private_pg, workdir, record
) -> None:
    """Every notification twice, each call's in shuffled order: the same books as a clean run."""
    seed = 404
    calls = _plan(scale.pick(400, 20_000), seed, "dup")
    digests = {}
    for twice in (False, True):
        name = "dup-reorder" if twice else "dup-clean"
        run = ChaosRun(name, private_redis, private_pg, workdir)
        with run:
            counts = play_shuffled(calls, private_redis.client(), run.keys, twice=twice, seed=seed)
            run.settle(calls, SETTLE_TIMEOUT)
            verdict = run.verdict(calls)
            digests[twice] = run.digest()
            logs = run.fleet.logs()
        injected = counts["notifications"] // 2 if twice else 0
        figures = run.figures(
            verdict,
            calls,
            injected=injected,
            close_before_open=counts["close_before_open"],
            digest=digests[twice][:12],
        )
        record.append(figures)
        assert_clean(verdict, figures, logs)
    assert digests[True] == digests[False], "a shuffled, doubled delivery changed the books"


def test_burst_of_ten_times_the_rate(scale, private_redis, private_pg, workdir, record) -> None:
    """Steady rate, then ten times that for a minute (SHORT: 6 s), then steady again: lag grows,
    then drains, and nothing is lost."""
    seed = 505
    steady = scale.pick(12, 30)
    burst_seconds = scale.pick(6, 60)
    calm_seconds = scale.pick(5, 35)
    total = steady * calm_seconds * 2 + 10 * steady * burst_seconds
    calls = _plan(total, seed, "burst")

    def rate(elapsed: float) -> float:
        in_burst = calm_seconds <= elapsed < calm_seconds + burst_seconds
        return steady * 10 if in_burst else steady

    run = ChaosRun("burst-10x", private_redis, private_pg, workdir)
    with run:
        probe = LagProbe(private_redis.client(), run.keys).start()
        gateway = run.in_background(
            lambda: play(paced(calls, rate), private_redis.client(), run.keys)
        )
        gateway.join()
        published = time.monotonic()
        run.settle(calls, SETTLE_TIMEOUT)
        drained = time.monotonic() - published
        probe.stop()
        verdict = run.verdict(calls)
        logs = run.fleet.logs()
    # The steady state before the burst: the second half of the calm phase, after the workers'
    # start (on a busy machine they start seconds late, and the backlog of that start is no
    # measure of the steady rate).
    before = [v for t, v in probe.samples if calm_seconds / 2 <= t < calm_seconds]
    figures = run.figures(
        verdict,
        calls,
        injected=10 * steady * burst_seconds,
        steady_rate=steady,
        burst_rate=10 * steady,
        max_lag=probe.max,
        steady_max_lag=max(before, default=0),
        drain_after_publish=f"{drained:.0f}s",
    )
    record.append(figures)
    assert probe.max > max(before, default=0), "the burst never made the backlog grow"
    assert probe.samples and probe.backlog() == 0
    assert_clean(verdict, figures, logs)
