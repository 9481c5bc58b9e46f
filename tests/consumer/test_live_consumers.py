"""``billing doctor`` counts the consumers that still read (``backlog.live_consumers``), on the real
Redis: a consumer left behind by a killed worker stays in its group until deleted, and is told
apart by how long it has not read."""

from __future__ import annotations

import time
import uuid

import pytest
import redis

from worker.consumer.backlog import live_consumers

pytestmark = pytest.mark.redis


def test_a_consumer_that_stopped_reading_is_not_counted_live(redis_client: redis.Redis) -> None:
    stream, group = f"test-live-{uuid.uuid4().hex[:8]}", "billing"
    redis_client.xgroup_create(stream, group, id="0", mkstream=True)
    try:
        redis_client.xgroup_createconsumer(stream, group, "killed-long-ago")
        time.sleep(0.5)  # it never reads again
        redis_client.xadd(stream, {"kind": "open"})
        redis_client.xreadgroup(group, "alive", {stream: ">"}, count=1)
        assert live_consumers(redis_client, stream, group, within_ms=300) == (1, 1)
        assert live_consumers(redis_client, stream, group, within_ms=60_000) == (2, 0)
        assert live_consumers(redis_client, stream, "no-such-group", within_ms=300) == (0, 0)
    finally:
        redis_client.delete(stream)
