"""The publisher, the consumer and the sweeper, unchanged, against a real 3-master Redis Cluster."""

from __future__ import annotations

import uuid

import orjson
import pytest
from redis.cluster import RedisCluster
from sqlalchemy import select

from models.reservations import Reservation
from worker.config import Settings
from worker.consumer.backlog import read_backlog
from worker.consumer.consumer import Consumer
from worker.consumer.sweeper import Sweeper
from worker.contract.keys import Keys
from worker.contract.publisher import Publisher
from worker.ledger.balances import balance
from worker.ledger.database import make_engine, session_factory, upgrade
from worker.service.runtime import redis_client

pytestmark = pytest.mark.redis

CHUNK = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-4o"}


def sse(obj: dict) -> str:
    return "data: " + orjson.dumps({**CHUNK, **obj}).decode() + "\n\n"


FRAMES = [
    sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
    sse({"choices": [{"index": 0, "delta": {"content": "Hello there."}}]}),
    sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
    sse({"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 3}}),
    "data: [DONE]\n\n",
]


def meta(request_id: str, account: str) -> dict:
    return {
        "request_id": request_id,
        "account_id": account,
        "model": "gpt-4o",
        "stream": True,
        "reserved_micros": 1000,
        "created_at": "2026-11-30T00:00:00Z",
        "messages": [{"role": "user", "content": "Say hello."}],
    }


@pytest.fixture
def cluster_client(redis_cluster: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("REDIS_CLUSTER", "1")
    client = redis_client(redis_cluster)
    yield client
    client.close()


@pytest.mark.parametrize("partitions", [1, 3])
def test_publisher_and_consumer_settle_every_call_on_a_cluster(
    cluster_client, tmp_path, partitions: int
) -> None:
    assert isinstance(cluster_client, RedisCluster)
    assert len(cluster_client.get_primaries()) == 3
    url = f"sqlite:///{tmp_path / 'billing.db'}"
    upgrade(url)
    engine = make_engine(url)
    sessions = session_factory(engine)
    prefix = f"t-{uuid.uuid4().hex[:10]}"
    settings = Settings(
        prefix=prefix,
        partitions=partitions,
        batch_size=50,
        sweep_idle_ms=0,
        hash_salt="test-fingerprint-key",
    )
    keys = Keys(prefix, partitions)
    publisher = Publisher(cluster_client, keys)
    account = f"acct-{uuid.uuid4().hex[:8]}"
    ids = [f"req-{uuid.uuid4().hex[:12]}" for _ in range(30)]
    with publisher.batch():  # one pipeline spanning keys on every master
        for rid in ids:
            publisher.open(meta(rid, account))
            publisher.frames(rid, FRAMES)
            publisher.close(rid)
    slots = {cluster_client.keyslot(keys.request(rid)) for rid in ids}
    nodes = {cluster_client.get_node_from_key(keys.request(rid)).name for rid in ids}
    assert len(slots) > 1 and len(nodes) == 3, "the calls should spread over every master"

    consumer = Consumer(cluster_client, sessions, settings, name="c1", recheck_seconds=0)
    for partition in range(partitions):
        for _ in range(5):
            if not consumer.poll(partition, block_ms=None).read:
                break
    Sweeper(consumer).run()

    with sessions() as session:
        statuses = session.scalars(
            select(Reservation.status).where(Reservation.request_id.in_(ids))
        ).all()
        charged = balance(session, account).charged
    assert sorted(statuses) == ["settled"] * len(ids)
    assert charged > 0
    for stream in keys.all_events():
        assert cluster_client.xpending(stream, keys.group)["pending"] == 0
    assert not any(cluster_client.exists(keys.request(rid)) for rid in ids)
    backlog = read_backlog(cluster_client, keys)
    assert [(b.lag, b.pending) for b in backlog] == [(0, 0)] * partitions
    engine.dispose()
    for stream in keys.all_events():
        cluster_client.delete(stream)


def test_doctor_on_a_cluster(redis_cluster: str, tmp_path) -> None:
    from worker.service import doctor

    url = f"sqlite:///{tmp_path / 'billing.db'}"
    upgrade(url)
    prefix = f"t-{uuid.uuid4().hex[:10]}"
    env = {"REDIS_URL": redis_cluster, "DATABASE_URL": url, "BILLING_PREFIX": prefix}

    def statuses(extra: dict[str, str]) -> dict[str, tuple[str, str]]:
        return {c.name: (c.status, c.detail) for c in doctor.run(env | extra)}

    found = statuses({"REDIS_CLUSTER": "1", "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0"})
    assert {status for status, _ in found.values()} == {"ok"}, found
    assert "cluster of 3 masters" in found["redis"][1]

    found = statuses({})  # a cluster node, but the workers would use a plain client
    assert found["redis"][0] == "problem" and "Redis Cluster node" in found["redis"][1]

    found = statuses({"REDIS_CLUSTER": "1"})  # Celery's broker would default to the cluster
    assert found["broker"][0] == "problem"
    found = statuses({"REDIS_CLUSTER": "1", "CELERY_BROKER_URL": redis_cluster})
    assert found["broker"][0] == "problem" and "Redis Cluster" in found["broker"][1]
