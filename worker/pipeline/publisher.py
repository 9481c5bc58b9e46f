"""The gateway side of the contract, for Python gateways, the simulator and the tests.

A gateway calls ``open`` once the request is accepted, ``frames`` as it forwards SSE events, or
``response`` for a non-streamed call, and ``close`` when the call ended. Each method queues commands on
a pipeline; ``flush`` sends them in one round trip, so a gateway loop pays one round trip per iteration.
Use ``with publisher.batch() as batch:`` to group several calls' commands.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import orjson
import redis

from worker.pipeline.keys import Keys

CLOSE_REASONS = ("done", "client_disconnect", "upstream_error", "timeout")


def now_ms() -> int:
    return int(time.time() * 1000)


class Publisher:
    """Writes a call's entries and notifications; never reads. Not thread-safe (one per thread)."""

    def __init__(
        self, client: redis.Redis | Any, keys: Keys | None = None, *, ttl_seconds: int = 86_400
    ) -> None:
        self._client = client
        self.keys = keys or Keys()
        self.ttl_seconds = ttl_seconds
        self._pipe: Any = None

    @contextmanager
    def batch(self) -> Iterator[Publisher]:
        """Queue every command issued inside the block and send them together at its end."""
        self._pipe = self._client.pipeline(transaction=False)
        try:
            yield self
            self._pipe.execute()
        finally:
            self._pipe = None

    def _run(self, queue: Any) -> None:
        if self._pipe is None:
            pipe = self._client.pipeline(transaction=False)
            queue(pipe)
            pipe.execute()
        else:
            queue(self._pipe)

    def open(self, meta: dict[str, Any] | bytes, request_id: str | None = None) -> None:
        """Write the ``request`` entry, set the key's TTL, then notify ``open``."""
        body = meta if isinstance(meta, bytes) else orjson.dumps(meta)
        rid = request_id or (meta["request_id"] if isinstance(meta, dict) else None)
        if not rid:
            raise ValueError("open needs the request_id")
        key = self.keys.request(rid)

        def queue(pipe: Any) -> None:
            pipe.xadd(key, {"kind": "request", "body": body})
            pipe.expire(key, self.ttl_seconds)
            pipe.xadd(
                self.keys.events_for(rid), {"kind": "open", "request_id": rid, "ts": now_ms()}
            )

        self._run(queue)

    def frames(self, request_id: str, events: Iterable[bytes | str]) -> None:
        """Append SSE events as sent to the client, one entry each (an entry may hold several)."""
        key = self.keys.request(request_id)

        def queue(pipe: Any) -> None:
            for event in events:
                pipe.xadd(key, {"kind": "frame", "body": event})

        self._run(queue)

    def response(self, request_id: str, status: int, body: bytes | str) -> None:
        """Record a non-streamed call's HTTP status and JSON body."""

        def queue(pipe: Any) -> None:
            pipe.xadd(
                self.keys.request(request_id), {"kind": "response", "status": status, "body": body}
            )

        self._run(queue)

    def close(self, request_id: str, reason: str = "done") -> None:
        """Notify that the call ended; the worker reconciles it from its stream."""
        if reason not in CLOSE_REASONS:
            raise ValueError(f"close reason must be one of {CLOSE_REASONS}, got {reason!r}")

        def queue(pipe: Any) -> None:
            pipe.xadd(
                self.keys.events_for(request_id),
                {"kind": "close", "request_id": request_id, "ts": now_ms(), "reason": reason},
            )

        self._run(queue)
