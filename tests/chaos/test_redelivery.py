"""The after-commit step of a batch (recheck schedule, stream delete) shares a pipeline with its
XACK. When that pipeline is lost (Redis restarts, the worker dies) the batch is redelivered and the
ledger calls it a duplicate; the consumer must still redo the step. Found by the Redis restart fault:
a late usage frame never settled its call because its recheck was never scheduled.
"""

from __future__ import annotations

import uuid

import pytest
import redis
from sqlalchemy.orm import sessionmaker

from worker.config import Settings
from worker.consumer.consumer import Consumer
from worker.contract.keys import Keys
from worker.contract.publisher import Publisher
from worker.ledger.database import make_engine

from .fuzzing import meta

pytestmark = [pytest.mark.chaos, pytest.mark.postgres]

CHUNK = '{"id":"c","object":"chat.completion.chunk","choices":[%s]}'
STOP = CHUNK % '{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}'
USAGE = '{"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}'


class LosePipelineOnce:
    """A client whose next pipeline with an XACK fails as if Redis went away."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.armed = True

    def __getattr__(self, name: str):
        return getattr(self.client, name)

    def pipeline(self, transaction: bool = False):
        pipe = self.client.pipeline(transaction=transaction)
        outer = self

        class Pipe:
            def __getattr__(self, name: str):
                return getattr(pipe, name)

            def execute(self):
                if outer.armed and any(c[0][0] == "XACK" for c in pipe.command_stack):
                    outer.armed = False
                    pipe.reset()
                    raise redis.ConnectionError("Redis went away (simulated)")
                return pipe.execute()

        return Pipe()


@pytest.mark.parametrize("shape", ["unsettled", "settled"])
def test_redelivered_close_redoes_the_after_commit_step(shape, private_redis, private_pg) -> None:
    prefix = f"chaos-redo-{uuid.uuid4().hex[:6]}"
    keys = Keys(prefix)
    client = private_redis.client()
    url = private_pg.create_database(f"chaos_redo_{uuid.uuid4().hex[:6]}")
    engine = make_engine(url)
    settings = Settings(
        prefix=prefix, claim_idle_ms=0, database_url=url, hash_salt="test-fingerprint-key"
    )
    flaky = LosePipelineOnce(client)
    consumer = Consumer(flaky, sessionmaker(engine), settings, name="c1", recheck_seconds=60)
    rid = f"req_{shape}"
    publisher = Publisher(client, keys)
    publisher.open(meta(rid), rid)
    body = [f"data: {STOP}\n\n"] + ([f"data: {USAGE}\n\n"] if shape == "settled" else [])
    publisher.frames(rid, body)
    publisher.close(rid)
    with pytest.raises(redis.ConnectionError):
        consumer.poll(block_ms=10)  # committed, then the ack pipeline is lost
    stats = consumer.poll(block_ms=10)  # redelivered (claimed at once): a duplicate
    engine.dispose()
    assert stats.duplicates == 1
    if shape == "unsettled":
        assert client.zscore(keys.recheck, rid) is not None, "recheck never scheduled"
    else:
        assert not client.exists(keys.request(rid)), "settled stream (with its prompt) kept"
