"""The poison cap: a call whose processing keeps failing (not bad input: a bug or a persistent
database error) is dead-lettered after ``max_deliveries`` deliveries, so it cannot keep its
notifications pending for ever."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from worker.consumer.calls import CallState
from worker.contract.keys import Keys
from worker.ledger.effects import Effect

MAX_DELIVERIES = 5


@dataclass(frozen=True)
class PoisonPolicy:
    max_deliveries: int = MAX_DELIVERIES

    def give_up(self, client: redis.Redis, keys: Keys, stream: str, calls: list[CallState]) -> None:
        """Turn each deferred call on its ``max_deliveries``-th delivery into a dead letter."""
        deferred = [call for call in calls if call.effect is Effect.DEFERRED]
        if not deferred:
            return
        pipe = client.pipeline(transaction=False)
        for call in deferred:
            first = call.notes[0].entry_id
            pipe.xpending_range(stream, keys.group, min=first, max=first, count=1)
        for call, pending in zip(deferred, pipe.execute(), strict=True):
            delivered = pending[0]["times_delivered"] if pending else 0
            if delivered >= self.max_deliveries:
                call.effect = None
                call.dead_reason = f"gave up after {delivered} deliveries: {call.error}"
                call.gave_up = True
