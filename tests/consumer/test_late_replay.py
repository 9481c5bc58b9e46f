"""A gateway's spool replayed after the grace (issue 35, leak 8), end to end: the real tee, a
private ``redis-server`` refusing the gateway's writes (its user's write permission taken away:
NOPERM) for longer than the grace, the real
consumer and sweeper on both engines.

The call's ``open`` reaches Redis; its frames, usage and ``close`` go to the tee's spool. The
sweeper finalizes the call from its request entry alone (``incomplete``), the grace ends, its
stream is deleted and the default policy charges the estimate of what it saw. Then Redis takes
writes again and the spool is replayed: the tee writes the call's request entry again before the
rest (its frames alone would be dropped: ``NOMKSTREAM`` on a deleted stream), and the worker
charges it late at its reported usage, less what the resolution charged. Before this change the
replayed frames were dropped and the close found nothing: the call stayed charged at the
estimate of nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from devtools.localservers.redis_server import PrivateRedis
from models import Anomaly, Failure, Reservation, UsageRecord
from worker.config import Settings
from worker.consumer.consumer import Consumer
from worker.consumer.sweeper import Sweeper
from worker.contract.keys import Keys
from worker.core.prices import load_price_book
from worker.gateway.tee import Tee
from worker.ledger.balances import balance, ledger_is_balanced

from .test_consumer import KEY, drain, frames, meta

pytestmark = pytest.mark.redis

PROMPT, COMPLETION = 11, 3  # test_consumer's usage block


@pytest.fixture
def server(tmp_path: Path) -> Iterator[PrivateRedis]:
    private = PrivateRedis(tmp_path / "redis", appendonly=False)
    private.start()
    yield private
    private.stop()


def _oracle(model: str, created_at: str) -> int:
    """gpt-4o's list price of the usage block, from the bundled row's decimal prices (micro-USD
    per token), rounded half up once: computed apart from the worker's charge function."""
    from datetime import datetime

    at = datetime.fromisoformat(created_at.replace("Z", "+00:00"))
    price = load_price_book().resolve(model, at).price
    assert price is not None
    total = Decimal(price.input) * PROMPT + Decimal(price.output) * COMPLETION
    return int(total.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def test_a_call_spooled_past_its_grace_is_charged_late(
    server: PrivateRedis, sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    prefix = f"late-{uuid.uuid4().hex[:8]}"
    account = f"acct-{uuid.uuid4().hex[:8]}"
    client = server.client()
    settings = Settings(
        prefix=prefix, batch_size=50, claim_idle_ms=60_000, sweep_idle_ms=0, grace_seconds=0,
        hash_salt=KEY,
    )  # fmt: skip
    consumer = Consumer(client, sessions, settings, name="c1", recheck_seconds=0)
    # The gateway's own Redis user: the fault takes its write permission away (NOPERM, which the
    # tee spools and retries), while the worker, as the default user, works on.
    client.acl_setuser("gateway", enabled=True, passwords=["+gw-pass"], keys=["*"],
                       channels=["*"], commands=["+@all"])  # fmt: skip
    quick = redis.Redis(
        port=server.port, username="gateway", password="gw-pass", socket_timeout=1,
        socket_connect_timeout=1, retry=Retry(NoBackoff(), 0),
    )  # fmt: skip
    tee = Tee(quick, Keys(prefix), spool_dir=tmp_path / "spool", retry_seconds=0.05)
    m = meta(account, reserved=50_000)
    rid = m["request_id"]
    try:
        tee.open(m)
        assert tee.flush(timeout=10)
        drain(consumer)  # held
        client.acl_setuser("gateway", enabled=True, commands=["-@write"])
        tee.frames(rid, frames())
        tee.close(rid, "done")
        assert not tee.flush(timeout=1)
        assert tee.spooling

        # The outage outlasts the grace: finalized from the request entry alone, the stream
        # deleted at the grace's end, the hold resolved by the default policy.
        Sweeper(consumer).run()
        Sweeper(consumer).run()
        assert not client.exists(consumer.keys.request(rid))
        with sessions() as s:
            status, action, exposure = s.execute(
                select(Reservation.status, Failure.action, Failure.exposure_micros)
                .join(Failure, Failure.reservation_id == Reservation.id)
                .where(Reservation.request_id == rid)
            ).one()
        assert (status, action) == ("settled_from_estimate", "charge_estimate")

        # The gateway may write again: its spool is replayed.
        client.acl_setuser("gateway", enabled=True, commands=["+@all"])
        assert tee.flush(timeout=20)
    finally:
        tee.stop(timeout=5)
    drain(consumer)

    charge = _oracle(m["model"], m["created_at"])
    with sessions() as s:
        row = s.execute(
            select(Reservation.status, Reservation.id).where(Reservation.request_id == rid)
        ).one()
        assert row.status == "settled"
        usage = s.execute(
            select(UsageRecord.prompt_tokens, UsageRecord.completion_tokens,
                   UsageRecord.charge_micros).where(UsageRecord.reservation_id == row.id)
        ).one()  # fmt: skip
        assert tuple(usage) == (PROMPT, COMPLETION, charge)
        assert balance(s, account).charged == charge  # the estimate's charge, trued up
        assert balance(s, account).held == 0
        assert ledger_is_balanced(s)
        kinds = s.scalars(select(Anomaly.kind).where(Anomaly.reservation_id == row.id)).all()
        assert "charged_late" in kinds
    assert exposure is not None and exposure != charge  # the late charge moved money
    assert not client.exists(consumer.keys.request(rid))  # the prompt left Redis again
