"""Simulated runs through the real consumer (real Redis; SQLite and PostgreSQL), their simulated
provider export with injected leakage imported, and the reconciliation: it finds exactly the
leakage injected, per day, model and key, and nothing else (oracle: ``simulated.injected``, the
injection list in the simulation's own names)."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta

import orjson
import redis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from sqlalchemy.orm import Session, sessionmaker

from worker.config import Settings
from worker.consumer.consumer import Consumer
from worker.consumer.pricing import effective_book
from worker.contract.keys import Keys
from worker.simulation import parse_faults, plan, play
from worker.upstream import simulated
from worker.upstream.exports import read_export
from worker.upstream.query import reconciliation
from worker.upstream.store import import_export

# Faults the consumer settles alone (no sweeper, no recheck): unsettled, void and dead letters.
FAULTS = parse_faults(
    "http_error=0.1,missing_usage=0.1,error_finish=0.05,dropped_connection=0.05,malformed=0.08,"
    "duplicate_entries=0.05"
)
# Every example on a day of its own: the database is shared by the examples of a session.
_DAYS = itertools.count(int(uuid.uuid4().int % 20_000))


def run_and_reconcile(
    redis_client: redis.Redis, sessions: sessionmaker[Session], prefix: str, *, n: int, seed: int,
    lost: int,
) -> tuple[dict, dict, list]:  # fmt: skip
    start = datetime(2040, 1, 1, 6, tzinfo=UTC) + timedelta(days=next(_DAYS))
    run = f"u{uuid.uuid4().hex[:8]}"
    calls = plan(n, seed, FAULTS, start=start, run_id=run)
    play(calls, redis_client, Keys(prefix), concurrency=1, progress=False)
    consumer = Consumer(
        redis_client, sessions, Settings(prefix=prefix, sweep_idle_ms=0, hash_salt="k"),
        name="c1", recheck_seconds=3600,
    )  # fmt: skip
    for _ in range(20):
        if not consumer.poll(block_ms=None).read:
            break
    forgotten = simulated.forgotten_calls(lost, seed, start, f"{run}f")
    with sessions() as session:
        counts = simulated.ledger_counts(session, simulated.needs_ledger(calls))
    page = simulated.usage_page(simulated.provider_counts(calls, forgotten, counts))
    export = read_export("openai", orjson.dumps(page), "sim.json")
    with sessions() as session, session.begin():
        import_export(session, export, "sim.json", start)
    day = start.replace(hour=0)
    with sessions() as session, session.begin():
        found = reconciliation(
            session.connection(), day, day + timedelta(days=1), effective_book(session)
        )
    want = simulated.without_cached(simulated.injected(calls, forgotten))
    over = [r for r in found.rows if r.over_requests or r.over_input or r.over_output]
    return simulated.found_leaks(found.rows), want, over


@settings(
    max_examples=6, deadline=None,
    # Each example is a whole run: no shrinking (the failing example is printed as drawn).
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)  # fmt: skip
@given(
    n=st.integers(min_value=5, max_value=40),
    seed=st.integers(min_value=0, max_value=10_000),
    lost=st.integers(min_value=0, max_value=4),
)
def test_the_report_finds_exactly_the_injected_leakage(
    redis_client: redis.Redis, sessions: sessionmaker[Session], prefix: str, n: int, seed: int,
    lost: int,
) -> None:  # fmt: skip
    found, want, over = run_and_reconcile(redis_client, sessions, prefix, n=n, seed=seed, lost=lost)
    assert found == want
    assert over == []


def test_a_run_with_injected_leakage_finds_some(
    redis_client: redis.Redis, sessions: sessionmaker[Session], prefix: str
) -> None:
    """The property above must not pass by finding nothing: here the injection is not empty."""
    found, want, over = run_and_reconcile(redis_client, sessions, prefix, n=30, seed=5, lost=3)
    assert sum(c.requests for c in want.values()) >= 3
    assert sum(c.output_tokens for c in want.values()) > 0
    assert found == want and over == []
