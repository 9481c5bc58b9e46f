"""End to end: a gateway and the workers disagree on ``BILLING_PARTITIONS``; every call still settles.

Real Celery worker and beat processes, real Redis, real PostgreSQL. Half the calls are written before
the workers start (left behind by a count that changed), half while they run (a gateway still on the
old count, or already on the new one). The sweeper is held off (``BILLING_SWEEP_IDLE_MS`` of an
hour), so a call settles only if its notifications are read: a stream nothing reads would leave its
calls without even a hold.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from chaos.fleet import Worker
from sqlalchemy.orm import sessionmaker

from worker.consumer.backlog import read_backlog
from worker.contract.keys import Keys
from worker.ledger.balances import ledger_is_balanced
from worker.ledger.database import make_engine

from .test_e2e import decided, env  # noqa: F401  (the env fixture)
from .test_partitions import publish
from .waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]


@pytest.mark.parametrize(("published", "configured"), [(4, 2), (2, 4), (1, 4)])
def test_every_call_settles_whatever_count_the_gateway_used(
    env: dict[str, str],  # noqa: F811
    pg_url: str,
    redis_client: redis.Redis,
    prefix: str,
    tmp_path: Path,
    published: int,
    configured: int,
) -> None:
    # Drains of 0.3 s: four partitions' drains each second leave the two pool processes time for
    # the retired streams' (a saturated pool starves every task alike, partitions' included).
    env = {
        **env,
        "BILLING_PARTITIONS": str(configured),
        "BILLING_SWEEP_IDLE_MS": "3600000",
        "BILLING_DRAIN_MS": "300",
    }
    worker = Worker(env, tmp_path, "partitions")
    engine = make_engine(pg_url)
    sessions = sessionmaker(engine)
    try:
        _, before = publish(redis_client, prefix, published, 40)
        worker.start()
        _, during = publish(redis_client, prefix, published, 40)
        ids = before + during
        wait_for(
            lambda: len(decided(sessions, ids)) == len(ids),
            90, "every call decided", lambda: worker.log_text()[-4000:],
        )  # fmt: skip
        assert set(decided(sessions, ids).values()) == {"settled"}
        with sessions() as session:
            assert ledger_is_balanced(session)
        keys = Keys(prefix, configured)
        wait_for(
            lambda: all(item.pending == 0 for item in read_backlog(redis_client, keys)),
            30, "every notification acknowledged", lambda: worker.log_text()[-4000:],
        )  # fmt: skip
        assert all(item.lag in (0, None) for item in read_backlog(redis_client, keys))
    finally:
        worker.stop()
        engine.dispose()
