"""The gateway side of the contract, for Python gateways, the simulator and the tests.

A gateway calls ``open`` once the request is accepted, ``frames`` as it forwards SSE events, or
``response`` for a non-streamed call, and ``close`` when the call ended. Each method queues commands on
a pipeline; ``flush`` sends them in one round trip, so a gateway loop pays one round trip per iteration.
Use ``with publisher.batch() as batch:`` to group several calls' commands.

The wire writes themselves are built in one place: ``*_commands`` turn a call's events into
``Command`` values (an ``XAdd`` or an ``Expire``) and ``queue_commands`` puts them on a pipeline. The
synchronous ``Publisher`` runs them at once; the gateway's asynchronous tee (``worker.gateway.tee``)
queues the same values, spools them to a file while Redis is away, and runs them later.

A ``frame`` or ``response`` body larger than the worker's entry limit (``MAX_ENTRY_BYTES``) is
written in pieces (``pieces``, docs/events.md §1): the first entry carries ``more=1``, and each
piece after it is a ``part`` entry, with ``more=1`` on all but the last. The worker joins them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import msgspec
import orjson
import redis

from worker.contract.entries import ADMISSION_ENTRY_ID, MAX_ENTRY_BYTES
from worker.contract.keys import Keys

CLOSE_REASONS = ("done", "client_disconnect", "upstream_error", "timeout")
AUTO_ID = "*"
# An entry whose body continues in the next entry of the call's stream, a ``part`` (§1).
MORE = b"1"
PART = b"part"


def now_ms() -> int:
    return int(time.time() * 1000)


class XAdd(msgspec.Struct, tag="x", array_like=True, frozen=True):
    """``XADD key [NOMKSTREAM] entry_id field value …``; ``entry_id`` ``*``: Redis picks it."""

    key: str
    fields: dict[str, bytes]
    entry_id: str = AUTO_ID
    nomkstream: bool = False


class Expire(msgspec.Struct, tag="e", array_like=True, frozen=True):
    """``EXPIRE key seconds``."""

    key: str
    seconds: int


Command = XAdd | Expire
# Entry ids of a call's own stream: None, Redis picks them; else a callable giving the next one.
NextId = Callable[[], str] | None


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def request_body(meta: dict[str, Any] | bytes, request_id: str | None = None) -> tuple[bytes, str]:
    """The ``request`` entry's body and the call's request id (``meta``'s, unless given)."""
    body = meta if isinstance(meta, bytes) else orjson.dumps(meta)
    rid = request_id or (meta["request_id"] if isinstance(meta, dict) else None)
    if not rid:
        raise ValueError("open needs the request_id")
    return body, rid


def open_commands(
    keys: Keys,
    request_id: str,
    body: bytes,
    ttl_seconds: int,
    next_id: NextId = None,
    *,
    admitted: bool = False,
) -> list[Command]:
    """The ``request`` entry, the key's TTL, then the ``open`` notification. For an ``admitted``
    call (its admission record wrote the stream's head and the ``open``, ``admission_commands``)
    the ``request`` entry alone: no TTL, for nothing may expire a call the worker has not
    finalized (it deletes the stream when it has), and no second ``open``."""
    key = keys.request(request_id)
    entry = XAdd(key, {"kind": b"request", "body": body}, next_id() if next_id else AUTO_ID)
    if admitted:
        return [entry]
    return [
        entry,
        Expire(key, ttl_seconds),
        XAdd(
            keys.events_for(request_id),
            {"kind": b"open", "request_id": request_id.encode(), "ts": b"%d" % now_ms()},
        ),
    ]


def admission_fields(body: bytes, at_ms: int) -> dict[str, bytes]:
    """The fields of a call's ``admission`` entry (docs/events.md §1): the money facts (a request
    entry without its prompt) and the admission's time, unix ms."""
    return {"kind": b"admission", "at": b"%d" % at_ms, "body": body}


def admission_commands(keys: Keys, request_id: str, fields: dict[str, bytes]) -> list[Command]:
    """A call's write-ahead record as commands: its ``admission`` entry under
    ``ADMISSION_ENTRY_ID`` (a replay is refused as the duplicate it is), then ``open``. The
    gateway's admission script writes the same two in one step (``worker.contract.admission``);
    these are what it spools when Redis cannot take them."""
    return [
        XAdd(keys.request(request_id), fields, ADMISSION_ENTRY_ID),
        XAdd(
            keys.events_for(request_id),
            {"kind": b"open", "request_id": request_id.encode(), "ts": fields["at"]},
        ),
    ]


def pieces(head: dict[str, bytes], body: bytes) -> list[dict[str, bytes]]:
    """The fields of the entries that hold ``body``: ``head`` with it when it is within
    ``MAX_ENTRY_BYTES``; else ``head`` with its first ``MAX_ENTRY_BYTES`` and ``more=1``, then a
    ``part`` entry per ``MAX_ENTRY_BYTES`` after them, each with ``more=1`` but the last."""
    size = len(body)
    if size <= MAX_ENTRY_BYTES:
        return [{**head, "body": body}]
    entries = [{**head, "body": body[:MAX_ENTRY_BYTES], "more": MORE}]
    for start in range(MAX_ENTRY_BYTES, size, MAX_ENTRY_BYTES):
        end = start + MAX_ENTRY_BYTES
        if end < size:
            entries.append({"kind": PART, "body": body[start:end], "more": MORE})
        else:
            entries.append({"kind": PART, "body": body[start:]})
    return entries


def frame_commands(
    keys: Keys, request_id: str, events: Iterable[bytes | str], next_id: NextId = None
) -> list[Command]:
    """One ``frame`` entry per item of ``events`` (an item may hold several SSE events), or its
    pieces when it is larger than ``MAX_ENTRY_BYTES`` (``pieces``). With ``next_id`` the
    entries carry ids of their own (a piece too) and never create the stream (``NOMKSTREAM``):
    written again after the worker deleted the settled call's stream, they are no-ops."""
    key = keys.request(request_id)
    commands: list[Command] = []
    for event in events:
        for fields in pieces({"kind": b"frame"}, _bytes(event)):
            commands.append(
                XAdd(key, fields) if next_id is None else XAdd(key, fields, next_id(), True)
            )
    return commands


def response_commands(
    keys: Keys, request_id: str, status: int, body: bytes | str, next_id: NextId = None
) -> list[Command]:
    """A non-streamed call's HTTP status and body, in pieces when the body is larger than
    ``MAX_ENTRY_BYTES`` (``pieces``; ``NOMKSTREAM`` with ``next_id``, as frames)."""
    entries = pieces({"kind": b"response", "status": b"%d" % status}, _bytes(body))
    key = keys.request(request_id)
    if next_id is None:
        return [XAdd(key, fields) for fields in entries]
    return [XAdd(key, fields, next_id(), True) for fields in entries]


def close_commands(keys: Keys, request_id: str, reason: str = "done") -> list[Command]:
    """The ``close`` notification; ``reason`` must be one of ``CLOSE_REASONS``."""
    if reason not in CLOSE_REASONS:
        raise ValueError(f"close reason must be one of {CLOSE_REASONS}, got {reason!r}")
    fields = {
        "kind": b"close",
        "request_id": request_id.encode(),
        "ts": b"%d" % now_ms(),
        "reason": reason.encode(),
    }
    return [XAdd(keys.events_for(request_id), fields)]


def unbilled_commands(
    keys: Keys, request_id: str, route: str, account_id: str | None = None
) -> list[Command]:
    """The ``unbilled`` notification (docs/events.md §2): a request the gateway served without
    billing it (``BILLING_UNBILLED_ROUTES=pass``), ``route`` its method and path (or LiteLLM call
    type), ``account_id`` who the gateway's authentication says made it, when it knows."""
    fields = {
        "kind": b"unbilled",
        "request_id": request_id.encode(),
        "ts": b"%d" % now_ms(),
        "route": route.encode(),
    }
    if account_id is not None:
        fields["account_id"] = account_id.encode()
    return [XAdd(keys.events_for(request_id), fields)]


def queue_commands(pipe: Any, commands: Iterable[Command]) -> None:
    """Put ``commands`` on a redis-py pipeline (or client), in order."""
    for command in commands:
        if type(command) is XAdd:
            if command.nomkstream:
                pipe.xadd(command.key, command.fields, id=command.entry_id, nomkstream=True)
            else:
                pipe.xadd(command.key, command.fields, id=command.entry_id)
        else:
            pipe.expire(command.key, command.seconds)


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

    def _run(self, commands: list[Command]) -> None:
        if self._pipe is None:
            pipe = self._client.pipeline(transaction=False)
            queue_commands(pipe, commands)
            pipe.execute()
        else:
            queue_commands(self._pipe, commands)

    def open(
        self,
        meta: dict[str, Any] | bytes,
        request_id: str | None = None,
        *,
        admission: dict[str, bytes] | None = None,
    ) -> None:
        """Write the ``request`` entry, set the key's TTL, then notify ``open``; for a call
        whose ``admission`` record was written (its fields), the ``request`` entry alone."""
        body, rid = request_body(meta, request_id)
        commands = open_commands(
            self.keys, rid, body, self.ttl_seconds, admitted=admission is not None
        )
        self._run(commands)

    @property
    def client(self) -> Any:
        """The Redis client it writes with."""
        return self._client

    def frames(self, request_id: str, events: Iterable[bytes | str]) -> None:
        """Append SSE events as sent to the client, one entry each (an entry may hold several;
        one larger than ``MAX_ENTRY_BYTES`` is written in pieces)."""
        self._run(frame_commands(self.keys, request_id, events))

    def response(self, request_id: str, status: int, body: bytes | str) -> None:
        """Record a non-streamed call's HTTP status and JSON body."""
        self._run(response_commands(self.keys, request_id, status, body))

    def close(self, request_id: str, reason: str = "done") -> None:
        """Notify that the call ended; the worker reconciles it from its stream."""
        self._run(close_commands(self.keys, request_id, reason))

    def unbilled(self, request_id: str, route: str, account_id: str | None = None) -> None:
        """Notify a request served unbilled (``unbilled_commands``)."""
        self._run(unbilled_commands(self.keys, request_id, route, account_id))
