"""The sweeper looks at a held call's stream without reading its entries: a stream whose last entry
is huge costs the look nothing (a private Redis, so the bytes it sends are the sweeper's alone)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy.orm import sessionmaker

from devtools.localservers.redis_server import PrivateRedis
from worker.config import Settings
from worker.consumer.consumer import Consumer
from worker.consumer.sweeper import Sweeper
from worker.contract.keys import Keys
from worker.core.request import request_from_dict
from worker.ledger.database import make_engine, upgrade
from worker.ledger.operations import hold

pytestmark = [pytest.mark.chaos]

BIG = 4 << 20  # the last entry: 4 MiB


def _sent(server: PrivateRedis) -> int:
    return int(server.client().info("stats")["total_net_output_bytes"])


def test_the_look_at_a_held_calls_stream_sends_no_entry(
    private_redis: PrivateRedis, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'billing.db'}"
    upgrade(url)
    engine = make_engine(url)
    prefix = f"probe-{uuid.uuid4().hex[:8]}"
    settings = Settings(prefix=prefix, sweep_idle_ms=0, hash_salt="probe-test-key")
    client = private_redis.client()
    consumer = Consumer(client, sessionmaker(engine), settings, name="c1")
    then = datetime.now(UTC) - timedelta(minutes=5)
    request_id = f"req-{uuid.uuid4().hex[:8]}"
    meta = request_from_dict({
        "request_id": request_id, "account_id": "acct", "model": "gpt-4o", "stream": True,
        "reserved_micros": 1000, "created_at": then.isoformat(),
    })  # fmt: skip
    with sessionmaker(engine)() as session, session.begin():
        hold(session, meta, now=then)
    key = Keys(prefix).request(request_id)
    client.xadd(key, {"kind": "frame", "data": b"x" * BIG})
    try:
        before = _sent(private_redis)
        found = Sweeper(consumer).abandoned(datetime.now(UTC))
        sent = _sent(private_redis) - before
    finally:
        client.delete(key)
        engine.dispose()
    assert [row.request_id for row in found] == [request_id]  # it was looked at, and is quiet
    assert sent < 64 << 10, f"the look sent {sent} bytes for a stream of one {BIG}-byte entry"
