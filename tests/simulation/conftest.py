"""Real Redis for the simulator tests: a unique key prefix per test, and every key removed after."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
import redis

REDIS_URL = os.environ.get("BILLING_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError:
        pytest.fail(f"Redis not reachable at {REDIS_URL}")
    yield client
    client.close()


@pytest.fixture
def prefix(redis_client: redis.Redis) -> Iterator[str]:
    name = f"simtest-{uuid.uuid4().hex[:10]}"
    yield name
    keys = list(redis_client.scan_iter(match=f"{name}:*", count=1000))
    if keys:
        redis_client.delete(*keys)
