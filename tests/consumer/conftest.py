"""The consumer tests' consumer, publisher and account, against real Redis and the ``sessions``
of both databases; each module gives its own ``settings``."""

from __future__ import annotations

import uuid

import pytest
import redis
from sqlalchemy.orm import Session, sessionmaker

from worker.config import Settings
from worker.consumer.consumer import Consumer
from worker.contract.keys import Keys
from worker.contract.publisher import Publisher


@pytest.fixture
def consumer(
    redis_client: redis.Redis, sessions: sessionmaker[Session], settings: Settings
) -> Consumer:
    return Consumer(redis_client, sessions, settings, name="c1", recheck_seconds=0)


@pytest.fixture
def publisher(redis_client: redis.Redis, settings: Settings) -> Publisher:
    return Publisher(redis_client, Keys(settings.prefix))


@pytest.fixture
def account() -> str:
    return f"acct-{uuid.uuid4().hex[:8]}"
