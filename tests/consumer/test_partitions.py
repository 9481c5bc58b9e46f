"""A change of ``BILLING_PARTITIONS`` strands nothing: retired streams are found, drained, deleted.

Real Redis, both databases, no Celery: what each beat tick's tasks run, in this process: a drain per
configured partition, and a drain of each stream ``backlog.to_drain`` names (what
``billing.drain_retired`` sends a ``billing.drain`` for). ``test_partitions_e2e.py`` runs the same
with real worker and beat processes, so the tasks' wiring is proved there.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
import redis
from partition_ids import ids_on_every_partition
from sqlalchemy.orm import Session, sessionmaker

from models.reservations import Status
from worker.config import MAX_PARTITIONS, Settings
from worker.consumer import backlog, partitions
from worker.consumer.backlog import read_backlog
from worker.consumer.consumer import Consumer
from worker.consumer.sweeper import Sweeper
from worker.contract.keys import Keys
from worker.contract.publisher import Publisher
from worker.ledger.balances import balance

from .test_consumer import KEY as FINGERPRINT_KEY
from .test_consumer import frames, meta, play, status


def publish(client: redis.Redis, prefix: str, partitions_: int, count: int) -> tuple[str, list]:
    """``count`` complete calls (open, frames, close) as a gateway with ``partitions_`` writes them,
    every partition's stream written (``ids_on_every_partition``)."""
    keys = Keys(prefix, partitions_)
    publisher = Publisher(client, keys)
    account = f"acct-{uuid.uuid4().hex[:8]}"
    ids = ids_on_every_partition(keys, count)
    for rid in ids:
        play(publisher, meta(account) | {"request_id": rid}, frames())
    return account, ids


@pytest.fixture
def worker_of(
    redis_client: redis.Redis, sessions: sessionmaker[Session], prefix: str
) -> Callable[[int], Consumer]:
    """A worker's consumer with ``partitions`` configured."""

    def install(count: int) -> Consumer:
        # sweep_idle_ms long: the sweeper must not rescue a held call whose close was stranded.
        settings = Settings(hash_salt=FINGERPRINT_KEY,
            prefix=prefix, partitions=count, batch_size=20, drain_ms=100, block_ms=10,
            sweep_idle_ms=3_600_000, claim_idle_ms=60_000,
        )  # fmt: skip
        return Consumer(redis_client, sessions, settings, name="w1", recheck_seconds=0)

    return install


def run_worker(consumer: Consumer, ticks: int = 3) -> None:
    """What the tasks beat sends each second run (``worker.service.tasks``): ``billing.drain`` of
    each configured partition, then ``billing.drain_retired``'s look and the drain it sends for
    each retired stream with work waiting."""
    settings = consumer.settings
    seconds, block_ms = settings.drain_ms / 1000, settings.block_ms
    for _ in range(ticks):
        for partition in range(settings.partitions):
            consumer.drain(partition, seconds=seconds, block_ms=block_ms)
        for stream in backlog.to_drain(consumer.client, consumer.keys):
            consumer.drain(seconds=seconds, block_ms=block_ms, until_idle=True, stream=stream)


def settled(sessions: sessionmaker[Session], ids: list[str]) -> set:
    return {status(sessions, rid) for rid in ids}


@pytest.mark.parametrize(("published", "configured"), [(4, 2), (1, 4), (4, 1), (2, 4)])
def test_calls_published_under_another_partition_count_all_settle(
    worker_of, redis_client, sessions, prefix, published: int, configured: int
) -> None:
    account, ids = publish(redis_client, prefix, published, 40)
    consumer = worker_of(configured)
    run_worker(consumer)
    assert settled(sessions, ids) == {Status.SETTLED}
    with sessions() as session:
        assert balance(session, account).held == 0
    for item in read_backlog(redis_client, consumer.keys):
        assert (item.lag, item.pending) in ((0, 0), (None, 0)), item
    # Drained and acknowledged: the retired streams go once quiet (here: at once).
    left = partitions.retired(redis_client, consumer.keys)
    assert all(partitions.retire(redis_client, stream, quiet_ms=0) for stream in left)
    assert partitions.retired(redis_client, consumer.keys) == []


def test_retired_streams_are_found_by_name(redis_client, prefix) -> None:
    for p in ("", ":1", ":3", ":255", ":256", "x"):  # 256: past MAX_PARTITIONS; x: no such name
        redis_client.xadd(f"{prefix}:events{p}", {"kind": "open", "request_id": "r", "ts": 1})
    keys = Keys(prefix, 2)
    assert partitions.retired(redis_client, keys) == [
        f"{prefix}:events",
        f"{prefix}:events:3",
        f"{prefix}:events:255",
    ]
    assert partitions.streams(redis_client, keys) == [
        f"{prefix}:events:0",
        f"{prefix}:events:1",
        f"{prefix}:events",
        f"{prefix}:events:3",
        f"{prefix}:events:255",
    ]
    assert [item.stream for item in read_backlog(redis_client, keys)] == partitions.streams(
        redis_client, keys
    )


def test_a_retired_stream_is_deleted_only_when_drained_and_quiet(redis_client, prefix) -> None:
    keys = Keys(prefix, 1)
    stream = f"{prefix}:events:2"
    redis_client.xadd(stream, {"kind": "open", "request_id": "r1", "ts": 1})
    assert not partitions.retire(redis_client, stream, quiet_ms=0)  # nobody read it yet
    partitions.adopt(redis_client, keys, stream)
    partitions.adopt(redis_client, keys, stream)  # a second sighting changes nothing
    assert not partitions.retire(redis_client, stream, quiet_ms=0)  # not delivered yet
    [(_, [(entry_id, _)])] = redis_client.xreadgroup(keys.group, "c", {stream: ">"})
    assert not partitions.retire(redis_client, stream, quiet_ms=0)  # delivered, pending
    redis_client.xack(stream, keys.group, entry_id)
    assert not partitions.retire(redis_client, stream, quiet_ms=60_000)  # just written
    assert partitions.retire(redis_client, stream, quiet_ms=0)
    assert not redis_client.exists(stream)
    assert not partitions.retire(redis_client, stream, quiet_ms=0)  # already gone


def test_a_retired_stream_written_again_after_deletion_is_drained_again(
    worker_of, redis_client, sessions, prefix
) -> None:
    """The process that drained it remembers its group; the group went with the stream."""
    _, first = publish(redis_client, prefix, 4, 10)
    consumer = worker_of(2)
    run_worker(consumer, ticks=1)
    for stream in partitions.retired(redis_client, consumer.keys):
        assert partitions.retire(redis_client, stream, quiet_ms=0)
    _, again = publish(redis_client, prefix, 4, 10)  # a gateway still on the old count
    run_worker(consumer, ticks=2)
    assert settled(sessions, first + again) == {Status.SETTLED}


def test_the_sweeper_trims_retired_streams(
    worker_of, redis_client, sessions, prefix, monkeypatch
) -> None:
    # However slow the machine, the drained streams are not quiet long enough to be deleted here.
    monkeypatch.setattr(partitions, "RETIRE_QUIET_MS", 3_600_000)
    _, ids = publish(redis_client, prefix, 4, 20)
    consumer = worker_of(1)
    run_worker(consumer)
    assert settled(sessions, ids) == {Status.SETTLED}
    retired = partitions.retired(redis_client, consumer.keys)
    assert len(retired) == 4
    assert sum(redis_client.xlen(stream) for stream in retired) == 40
    Sweeper(consumer).run()
    # Like a partition's: up to the last delivered entry, which stays.
    assert [redis_client.xlen(stream) for stream in retired] == [1, 1, 1, 1]


def test_a_partition_count_past_what_is_found_again_is_refused() -> None:
    """Streams left by a count change are found by name up to MAX_PARTITIONS: a larger count could
    strand some, so the settings refuse it."""
    assert Settings.from_env({"BILLING_PARTITIONS": str(MAX_PARTITIONS)}).partitions == 256
    with pytest.raises(ValueError, match="BILLING_PARTITIONS must be at most 256"):
        Settings.from_env({"BILLING_PARTITIONS": "257"})
