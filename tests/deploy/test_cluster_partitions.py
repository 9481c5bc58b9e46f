"""Retired partition streams on a real 3-master Redis Cluster: found, drained, trimmed, deleted.

Every command of ``worker.consumer.partitions`` touches one key (the ``EXISTS`` probes are split per
node by the cluster pipeline, the delete script runs on the stream's own node), so the streams of a
changed partition count are found and drained wherever their slots live.
"""

from __future__ import annotations

import uuid

import pytest
from partition_ids import ids_on_every_partition
from sqlalchemy import select

from models.reservations import Reservation
from worker.config import Settings
from worker.consumer import partitions
from worker.consumer.backlog import read_backlog
from worker.consumer.consumer import Consumer
from worker.consumer.sweeper import Sweeper, SweepStats
from worker.contract.keys import Keys
from worker.contract.publisher import Publisher
from worker.ledger.database import make_engine, session_factory, upgrade
from worker.service.runtime import redis_client

from .test_cluster import FRAMES, meta

pytestmark = pytest.mark.redis
FINGERPRINT_KEY = "test-fingerprint-key"


def test_streams_of_another_partition_count_are_drained_on_a_cluster(
    redis_cluster: str, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REDIS_CLUSTER", "1")
    client = redis_client(redis_cluster)
    url = f"sqlite:///{tmp_path / 'billing.db'}"
    upgrade(url)
    engine = make_engine(url)
    sessions = session_factory(engine)
    while True:  # a prefix whose six streams are not all on one master (1 in 243 with three)
        prefix = f"t-{uuid.uuid4().hex[:10]}"
        old = Keys(prefix, 6)  # what the gateway used
        if len({client.get_node_from_key(stream).name for stream in old.all_events()}) > 1:
            break
    publisher = Publisher(client, old)
    ids = ids_on_every_partition(old, 40)
    try:
        with publisher.batch():
            for rid in ids:
                publisher.open(meta(rid, "acct-cluster"))
                publisher.frames(rid, FRAMES)
                publisher.close(rid)
        nodes = {client.get_node_from_key(stream).name for stream in old.all_events()}
        assert len(nodes) > 1, "the old partitions' streams should live on several masters"

        settings = Settings(
            hash_salt=FINGERPRINT_KEY,
            prefix=prefix,
            partitions=1,
            batch_size=50,
            sweep_idle_ms=3_600_000,
        )
        consumer = Consumer(client, sessions, settings, name="c1", recheck_seconds=0)
        keys = consumer.keys
        retired = partitions.retired(client, keys)
        assert retired == old.all_events()
        for stream in retired:
            partitions.adopt(client, keys, stream)
            consumer.drain(stream=stream, seconds=30, block_ms=None, until_idle=True)
        with sessions() as session:
            statuses = session.scalars(
                select(Reservation.status).where(Reservation.request_id.in_(ids))
            ).all()
        assert sorted(statuses) == ["settled"] * len(ids)
        backlog = read_backlog(client, keys)
        assert [item.stream for item in backlog] == [keys.events(), *retired]
        assert all(item.pending == 0 and item.lag in (0, None) for item in backlog[1:])

        stats = SweepStats()
        Sweeper(consumer).trim_notifications(stats)
        assert stats.trimmed > 0
        assert all(partitions.retire(client, stream, quiet_ms=0) for stream in retired)
        assert partitions.retired(client, keys) == []
    finally:
        for stream in old.possible_events()[:8]:
            client.delete(stream)
        engine.dispose()
        client.close()
