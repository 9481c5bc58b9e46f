"""The consumer: notification batches → reconciled calls → one database commit → acknowledgements.

Contract of ``Consumer.poll`` (may block up to ``block_ms``; safe to call from any number of processes
at once, they share the work through the consumer group). A batch goes through these steps
(``worker.consumer.steps``: each step is given the next; the acknowledgement is last), each in the
module named for it:

1. ``read`` (``intake``): claim entries another consumer left pending longer than ``claim_idle_ms``
   (it died), then read new ones, up to ``batch_size`` in all.
2. ``prepare``, Redis reads and pure work, nothing written anywhere:
   ``gather`` (``gathering``) groups them by call and sizes every call's stream in one pipelined
   round trip: a stream past the size limits is refused unread, and the calls past the batch's
   byte budget (``batch_bytes``) are left pending for the next batch of the same drain;
   ``fetch`` reads the streams, in one round trip; ``reconcile`` (``reconciling``) decodes and
   reconciles every call (unusable input is a dead letter).
3. ``apply``: ``transaction`` (``applying``): every call in ONE database transaction, each inside
   its own savepoint; a transient error reruns the whole transaction. Then ``poison`` caps the
   calls that keep failing, and ``acknowledge``, only after the commit: dead letters,
   acknowledgements, settled streams deleted, rechecks scheduled. A crash anywhere before
   ``acknowledge`` redoes the batch; every ledger effect is idempotent, so redoing changes nothing
   that was already committed.

``consumer.steps`` holds them by name (the ``transaction``'s parts too: ``ledger_batched``,
``ledger_per_call``, ``conserve``, ``routes``); ``wrap_step`` and ``replace_step`` are the way to
time, observe or replace one (benchmarks, tests) without reaching into the modules.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from datetime import timedelta
from typing import Any

import redis
from sqlalchemy.orm import Session

from worker.config import Settings
from worker.consumer.acknowledge import Acknowledger
from worker.consumer.applying import Applier
from worker.consumer.calls import Batch, BatchStats
from worker.consumer.gathering import Fetch, Gather
from worker.consumer.intake import Intake, Reading
from worker.consumer.poison import PoisonPolicy
from worker.consumer.pricing import PriceSource
from worker.consumer.reconciling import Reconcile
from worker.consumer.steps import Around, Call, Chain, Step, Steps
from worker.contract.authorization import AuthorizationStore
from worker.contract.keys import Keys
from worker.core.errors import ConfigError
from worker.core.prices import PriceBook

__all__ = ["BatchStats", "Consumer"]


class Consumer:
    def __init__(
        self,
        client: redis.Redis,
        sessions: Callable[[], Session],
        settings: Settings,
        *,
        name: str,
        prices: PriceSource | None = None,
        recheck_seconds: float = 30.0,
        poison: PoisonPolicy | None = None,
    ) -> None:
        if not settings.hash_salt:
            # Without the fingerprint key the findings cannot be written: refused here, at once,
            # rather than a worker that drops every batch off its fast path (``fingerprint_key``).
            raise ConfigError("the consumer needs the fingerprint key (settings.hash_salt)")
        self.client = client
        self.sessions = sessions
        self.settings = settings
        self.keys = Keys(settings.prefix, settings.partitions)
        self.name = name
        self.prices = prices or PriceSource(sessions, settings.price_book)
        self.recheck_seconds = recheck_seconds
        self.grace = timedelta(seconds=settings.grace_seconds)
        self.poison = poison or PoisonPolicy()
        self.intake = Intake(client, self.keys, name, settings.claim_idle_ms)
        self.applier = Applier(
            sessions,
            hash_salt=settings.hash_salt,
            non_streamable=settings.non_streamable_models,
            grace=self.grace,
        )
        self.acknowledger = Acknowledger(
            client,
            self.keys,
            sessions,
            recheck_seconds=recheck_seconds,
            dead_letter_maxlen=settings.dead_letter_maxlen,
            authorizations=AuthorizationStore(client, settings.prefix)
            if settings.authorize
            else None,
        )
        self.steps = Steps(
            [
                self.intake,
                Chain(
                    "prepare",
                    [
                        Gather(client, self.keys, settings.batch_bytes),
                        Fetch(client, self.keys),
                        Reconcile(),
                    ],
                ),
                Chain(
                    "apply",
                    [
                        self.applier,
                        Call("poison", self._give_up),
                        self.acknowledger,
                    ],
                ),
            ]
        )
        self._prefetch: ThreadPoolExecutor | None = None

    def wrap_step(self, name: str, around: Around[Any]) -> Callable[[], None]:
        """``around(work, batch)`` in place of the step ``name``'s work (``Steps.wrap``); the undo."""
        return self.steps.wrap(name, around)

    def replace_step(self, name: str, step: Step[Any]) -> Step[Any]:
        """``step`` in the place of the step ``name`` (``Steps.replace``); the step it replaced."""
        return self.steps.replace(name, step)

    def _give_up(self, batch: Batch) -> None:
        self.poison.give_up(self.client, self.keys, batch.stream, batch.calls)

    def read(
        self,
        stream: str,
        block_ms: int | None,
        rest: list[tuple[bytes, Any]] | None = None,
        *,
        count: int | None = None,
    ) -> list[tuple[bytes, Any]]:
        """The step ``read``: the entries ``rest`` (a batch's, past its budget) still pending here,
        else up to ``count`` (``batch_size``) entries claimed or read."""
        reading = Reading(stream, count or self.settings.batch_size, block_ms, rest or [])
        self.steps["read"].submit(reading)
        return reading.entries

    def poll(self, partition: int = 0, block_ms: int | None = 200) -> BatchStats:
        stream = self.keys.events(partition)
        entries = self.read(stream, block_ms)
        if not entries:
            return BatchStats()
        return self.process(stream, entries)

    def drain(
        self,
        partition: int = 0,
        seconds: float = 1.0,
        block_ms: int | None = 200,
        *,
        until_idle: bool = False,
        stream: str | None = None,
    ) -> BatchStats:
        """Poll repeatedly for about ``seconds`` (``until_idle``: or until a read finds nothing);
        what a Celery task runs each time it is called. ``stream``: a notification stream by name
        instead of the ``partition``'s (a retired one, ``worker.consumer.partitions``).

        Pipelined: while one batch is applied (the database transaction, mostly a wait for
        PostgreSQL), the next is read and reconciled in a helper thread (Redis round trips and
        pure CPU work), so each stage's waits hide behind the other's work. Batches are still
        applied one at a time, in the order they were read, each acknowledged only after its own
        commit; ``drain`` returns only once every batch it read has been applied. The helper
        thread touches Redis only: prices are read here, between transactions.
        """
        stream = stream or self.keys.events(partition)
        total = BatchStats()
        deadline = time.monotonic() + seconds
        reader = self._reader()
        pending = reader.submit(self._read_batch, stream, block_ms, self.prices.current(), [])
        try:
            while True:
                batch = pending.result()
                rest = [] if batch is None else batch.rest
                more = bool(rest) or (
                    time.monotonic() < deadline and not (until_idle and batch is None)
                )
                if more:
                    pending = reader.submit(
                        self._read_batch, stream, block_ms, self.prices.current(), rest
                    )
                if batch is not None:
                    total.add(self.apply(batch))
                if not more:
                    return total
        finally:
            # On an error, let the read in flight finish: what it read stays pending in the
            # group and is claimed again after claim_idle_ms, like any batch a crash left.
            wait([pending])

    def _reader(self) -> ThreadPoolExecutor:
        if self._prefetch is None:
            self._prefetch = ThreadPoolExecutor(1, thread_name_prefix="billing-read")
        return self._prefetch

    def _read_batch(
        self, stream: str, block_ms: int | None, book: PriceBook, rest: list[tuple[bytes, Any]]
    ) -> Batch | None:
        """The next batch: what the last one left past its byte budget, else new entries."""
        entries = self.read(stream, block_ms, rest)
        return self.prepare(stream, entries, book) if entries else None

    def process(self, stream: str, entries: list[tuple[bytes, Any]]) -> BatchStats:
        """Apply notification entries: ``prepare`` then ``apply``, batch after batch until what
        each left past its byte budget is done too."""
        total = BatchStats()
        while entries:
            # Prices are read before the batch transaction: on SQLite a second connection inside
            # it would wait for the write lock this one holds.
            batch = self.prepare(stream, entries, self.prices.current())
            total.add(self.apply(batch))
            entries = self.read(stream, None, batch.rest) if batch.rest else []
        return total

    def prepare(self, stream: str, entries: list[tuple[bytes, Any]], book: PriceBook) -> Batch:
        """The steps ``prepare``: Redis reads and pure work, nothing written anywhere (safe to run
        while another batch is applied). The entries of the calls past the budget are
        ``batch.rest``."""
        batch = Batch(stream, BatchStats(), book, entries=entries)
        self.steps["prepare"].submit(batch)
        return batch

    def apply(self, batch: Batch) -> BatchStats:
        """The steps ``apply``: the batch's transaction, the poison cap, then (after the commit,
        never before) dead letters and acknowledgements."""
        self.steps["apply"].submit(batch)
        return batch.stats
