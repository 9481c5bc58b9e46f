"""The tee: the gateway's publisher that never makes the user wait and never loses a call.

``Tee`` has the methods of ``worker.contract.publisher.Publisher`` (``open``, ``frames``,
``response``, ``close``, and a ``batch`` that changes nothing), and builds the same commands with the
same functions; a gateway written against ``Publisher`` switches by changing its constructor.
The differences:

* **Nothing blocks the caller.** A method builds the call's commands and appends them to a queue in
  memory (a lock and an append, no IO); a background thread drains the queue into Redis, several
  calls' commands per pipeline. One more method, ``chunk``, takes a streamed body as the raw
  chunks sent to the client: the thread cuts them into their SSE events, so the gateway's event
  loop does no per-event work at all.
* **Bounded memory, never dropped.** The queue holds at most ``max_queue_bytes``. When it is full,
  or when a write fails because Redis is unreachable or refuses writes for a while (below), the
  queue and every batch after it go to the spool file (``worker.gateway.spool``; opened at the
  first such spill, not before) until the thread has replayed the file into Redis, in the order
  it was written. So a call's writes reach Redis in the order the gateway made them.
* **Replay is idempotent by construction.** A write that failed may have reached Redis (the
  connection dropped before the reply), and a batch sent while a full queue was spilled is in the
  file too, so replay must tolerate writing something twice. The entries of a call's own stream
  carry explicit ids (``<ms>-<seq>``, the wall-clock time they were made, increasing per call):
  Redis refuses an id it already holds (counted in ``billing_gateway_duplicate_entries_total``).
  Frames and responses are written with ``NOMKSTREAM``: after the worker settled the call and
  deleted its stream they are no-ops. The ``request`` entry may re-create a deleted stream, under
  its same id: the worker's reservation recorded that entry's digest (its id and fields,
  docs/events.md §5), so the replayed ``open`` and ``close`` are taken as duplicates of the call
  they are (the hold stands, the stream is deleted again) and never as a second call under the same
  request id. Notifications themselves have ids Redis picks; a repeated one is a duplicate delivery,
  which the worker ignores by the same rule.
* **A replay after the grace still bills the call.** A call whose ``open`` was written live and
  whose later writes were spooled has its ``request`` entry and TTL spooled again before the first
  of them (``_opens``, held from ``open`` until the call's ``close`` is written): replayed after
  an outage longer than the worker's grace, when the worker had finalized the call from its
  request entry alone and deleted its stream, it re-creates the stream under the same id, so the
  frames (``NOMKSTREAM``) land and the close settles the call late (``charged_late``) instead of
  finding nothing. Replayed within the grace, it is refused as a duplicate id, harmlessly.

**Fewer entries when the thread is behind.** Frames of one call waiting together in the queue are
one run (``_Queued``): the call's ``frames`` extend it until the thread takes it. A run is written
as entries holding its events in order (docs/events.md allows several events an entry; the
events keep their blank lines, so the entries are the bytes as sent), as few as hold at most
``MAX_MERGED_BYTES`` each, cut at event boundaries, each under the id of its last frame; and
``coalesce`` merges a call's runs sent together the same way. Only live writes are merged, never a
replay: the spool holds each frame under its own id, every one of them at or below the id of the
merged entry holding it (and above the one before), so Redis refuses those already written, and
never appends an event twice. (A run of body chunks, ``chunk``'s, is cut once, when it is sealed,
into the frame entries of the events it finishes, each under its last event's id, by the same
rule; it is written as those entries live and spooled alike: the same entries under the same ids.)

**No entry larger than the worker takes.** The worker refuses an entry over ``MAX_ENTRY_BYTES``
(1 MiB). An event (or a response body) larger than that is written in pieces (docs/events.md §1):
a ``frame`` (``response``) entry with ``more=1``, then its ``part`` entries, each piece under an
id of its own. The pieces are made once, when the event is queued (``frames``, ``response``:
``worker.contract.publisher.pieces``) or its run of chunks is cut, and are the same entries under
the same ids live and in the spool: a replay after a write that stopped between two pieces writes
only the pieces missing. ``coalesce`` never merges a piece.

**What Redis refuses.** Each batch is one ``MULTI``/``EXEC`` on the thread's one connection, so
Redis takes all of it or none of it (the tee writes to one Redis server; it does not speak Redis
Cluster). What a refusal does depends on its error code:

* A state Redis leaves by itself or by an operator's hand (``RETRY_CODES``): out of memory
  (``OOM``: ``maxmemory`` under ``noeviction``), a read-only replica (``READONLY``, after a
  failover), ``LOADING``, ``BUSY``, ``MASTERDOWN``, ``TRYAGAIN``, ``CLUSTERDOWN``,
  ``NOREPLICAS``, ``MISCONF``, and access refused (``NOAUTH``, ``WRONGPASS``, ``NOPERM``).
  Nothing of the batch was written: it is spooled and retried every ``retry_seconds`` until
  Redis takes it, as when Redis is unreachable (``NotWritable``, one of ``UNREACHABLE``),
  counted in ``billing_gateway_refused_total{error}`` and logged when the state changes. A batch
  is all or nothing for this: a call's ``close`` taken while its frames were refused would be
  settled without them.
* An entry id at or below the stream's last one: a duplicate (above), counted, nothing to do.
* Anything else (``WRONGTYPE``, a syntax error): refused for good; retrying cannot help, and must
  not hold back the calls after it. The rest of the batch is written; the refused commands go to
  this tee's quarantine file beside the spool (``tee-<host>-<pid>-<token>.quarantine``, in the
  spool's format, never replayed by itself), counted in ``billing_gateway_quarantined_total``,
  and logged with the key and the error's code, never a body. docs/gateway.md (*Quarantine*) says
  how an operator replays it.

A batch that can be neither queued nor spooled, or a refused command that cannot be quarantined
(the disk refuses it), is counted in ``billing_gateway_lost_total`` and logged: the one loss, never
silent. The spool directory is checked when the tee starts (a file created, written, synced and
deleted): one that cannot be written is logged as an error and makes ``ready`` false and
``billing_gateway_spool_writable`` 0, while calls still go to Redis; it costs batches only once
the tee must spool.

**Orphans.** A spool file whose tee is gone (stopped before Redis took everything, or its process
killed) is adopted by any tee sharing the directory: looked for at start and every
``adopt_seconds`` (30 s), held locked while it is replayed, in slices of at most
``adopt_slice_seconds`` between the live batches (so under load too, without starving the calls
being made), and deleted once replayed. ``flush`` waits for the orphans found too.
``billing_gateway_spool_age_seconds`` is the age of the oldest spooled write not yet replayed: of
the tee's own file exactly, of an adopted file its last write's (the file holds no times).

Threads: one call's methods must be called from one thread at a time (a request's task); different
calls may come from any threads. ``stop`` flushes what it can in ``timeout`` and leaves the rest in
the spool, for any tee sharing the directory to adopt.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from itertools import chain
from pathlib import Path
from typing import Any

import msgspec
import redis
from hiredis import pack_command

from worker.config import TEE_LINGER_MS
from worker.contract.entries import MAX_ENTRY_BYTES
from worker.contract.keys import Keys
from worker.contract.publisher import (
    Command,
    XAdd,
    admission_commands,
    close_commands,
    frame_commands,
    now_ms,
    open_commands,
    pieces,
    request_body,
    response_commands,
    unbilled_commands,
)
from worker.gateway import metrics
from worker.gateway.events import EventSplitter, events_of
from worker.gateway.spool import QUARANTINE_SUFFIX, Spool, orphans, probe

log = logging.getLogger(__name__)

DEFAULT_SPOOL_DIR = "var/spool"
# How long the thread lets calls' events gather before a write (see ``Tee._run``). Every wake-up
# of the thread costs the gateway a fixed amount of CPU, whatever it writes; a longer linger is
# fewer wake-ups, and a call's events reaching Redis, and lost by a process killed outright, up to
# that much later.
DEFAULT_LINGER_SECONDS = TEE_LINGER_MS / 1000
# What Redis answers to an XADD whose explicit id is not above the stream's last one.
_ALREADY_WRITTEN = "equal or smaller than the target stream top item"
# The codes of what Redis answers while it does not take writes, for a state it leaves by itself
# or by an operator's hand: the batch is spooled and retried (see the module's docstring).
RETRY_CODES = frozenset(
    {
        "OOM", "READONLY", "LOADING", "MASTERDOWN", "BUSY", "TRYAGAIN", "CLUSTERDOWN",
        "NOREPLICAS", "MISCONF", "NOAUTH", "WRONGPASS", "NOPERM",
    }
)  # fmt: skip


class NotWritable(redis.RedisError):
    """Redis refused a batch, all of it, for a state it leaves (``RETRY_CODES``)."""


# Errors after which a write may or may not have happened, or was refused for a while: spool it
# and replay it later.
UNREACHABLE = (
    redis.ConnectionError, redis.TimeoutError, ConnectionError, TimeoutError, NotWritable,
)  # fmt: skip
_MULTI = pack_command(("MULTI",))
_EXEC = pack_command(("EXEC",))
# redis-py's classes for the codes it strips from the message (older versions keep no code).
_CLASS_CODES = [
    (getattr(redis.exceptions, name), code)
    for name, code in (
        ("OutOfMemoryError", "OOM"), ("ReadOnlyError", "READONLY"),
        ("BusyLoadingError", "LOADING"), ("MasterDownError", "MASTERDOWN"),
        ("ClusterDownError", "CLUSTERDOWN"), ("TryAgainError", "TRYAGAIN"),
        ("NoPermissionError", "NOPERM"), ("AuthenticationError", "NOAUTH"),
        ("ExecAbortError", "EXECABORT"),
    )
    if hasattr(redis.exceptions, name)
]  # fmt: skip


def _code(error: BaseException) -> str:
    """A Redis error reply's code (its first word: ``OOM``, ``WRONGTYPE``, ``ERR``...)."""
    code = getattr(error, "status_code", None)
    if isinstance(code, str) and code:
        return code
    for kind, name in _CLASS_CODES:
        if isinstance(error, kind):
            return name
    word = str(error).split(" ", 1)[0]
    return word if word.isalpha() and word.isupper() else "ERR"


def _reply(connection: Any) -> Any:
    """The connection's next reply; an error reply is returned as its exception, not raised."""
    try:
        return connection.read_response()
    except redis.ResponseError as exc:
        return exc


_PER_COMMAND_BYTES = 64  # a command's keys, ids and Redis overhead, roughly

_encode = msgspec.msgpack.Encoder().encode
_clock = time.time
_decode = msgspec.msgpack.Decoder(list[Command]).decode


# The most bytes of events the tee joins into one entry (``coalesce``, a run's entries); an event
# larger than that is an entry of its own, in pieces past ``MAX_ENTRY_BYTES`` (the worker's limit).
MAX_MERGED_BYTES = 256 << 10


def coalesce(commands: list[Command]) -> list[Command]:
    """``commands`` with each call's frames that follow one another in its own stream (other
    keys' commands between them do not count) merged into one entry, under the last one's id, up
    to ``MAX_MERGED_BYTES``. Any other write to the call's stream ends the run, and so does a
    frame in pieces (``more``) and its ``part`` entries, never merged. Moving a frame up to its
    predecessor keeps every stream's order: only other keys' writes are passed."""
    merged: list[Command] = []
    last: dict[str, int] = {}  # stream key -> index in ``merged`` of its open run of frames
    for command in commands:
        if (
            type(command) is XAdd
            and command.nomkstream
            and command.fields.get("kind") == b"frame"
            and "more" not in command.fields
        ):
            at = last.get(command.key)
            if at is not None:
                run = merged[at]
                body = run.fields["body"] + command.fields["body"]  # type: ignore[union-attr]
                if len(body) <= MAX_MERGED_BYTES:
                    fields = {"kind": b"frame", "body": body}
                    merged[at] = XAdd(command.key, fields, command.entry_id, True)
                    continue
            last[command.key] = len(merged)
        else:
            last.pop(command.key, None)
        merged.append(command)
    return merged


def _size(commands: list[Command]) -> int:
    total = _PER_COMMAND_BYTES * len(commands)
    for command in commands:
        if type(command) is XAdd:
            for value in command.fields.values():
                total += len(value)
    return total


def _advance(state: list[int]) -> None:
    """A call's next entry id: ``[ms, seq]``, the wall clock, increasing within the call."""
    ms = now_ms()
    if ms > state[0]:
        state[0], state[1] = ms, 0
    else:
        state[1] += 1


def wire(command: Command) -> tuple[str | bytes | int, ...]:
    """The Redis command ``queue_commands`` would put on a pipeline for ``command``."""
    if type(command) is XAdd:
        head: tuple[str, ...] = (
            ("XADD", command.key, "NOMKSTREAM", command.entry_id)
            if command.nomkstream
            else ("XADD", command.key, command.entry_id)
        )
        return (*head, *chain.from_iterable(command.fields.items()))
    return ("EXPIRE", command.key, command.seconds)


def _timeouts_in_kernel(sock: Any) -> None:
    """Moves a socket's timeout into the kernel (``SO_SNDTIMEO``/``SO_RCVTIMEO``) and makes it
    blocking: Python polls a socket with a timeout before every send and receive, one more
    blocking call each (``_execute``). A send or receive that times out then fails with
    ``EAGAIN``, which redis-py raises as a ``ConnectionError``: still ``UNREACHABLE``. A TLS
    socket is left as it is."""
    if type(sock) is not socket.socket:
        return
    seconds = sock.gettimeout()
    whole = int(seconds)
    value = struct.pack("@ll", whole, int((seconds - whole) * 1_000_000))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
    sock.settimeout(None)


class _Body:
    """A call whose response body the tee cuts into its events (``Tee.chunk``): the splitter
    holding an event not finished yet, the call's entry-id state, and its latest run of chunks
    not cut yet (``pending``). Touched only under the tee's lock."""

    __slots__ = ("key", "pending", "splitter", "state")

    def __init__(self, key: str, state: list[int]) -> None:
        self.key = key
        self.state = state
        self.splitter = EventSplitter()
        self.pending: _Queued | None = None

    def last_id(self, count: int) -> str:
        """Takes the call's next ``count`` entry ids (one clock reading: ``_advance``'s rule) and
        returns the last of them, the id of an entry holding those ``count`` events."""
        state = self.state
        ms = int(_clock() * 1000)
        if ms > state[0]:
            state[0], state[1] = ms, -1
        state[1] += count
        return f"{state[0]}-{state[1]}"

    def entries(self, events: bytes, count: int) -> list[Command]:
        """The frame entries of ``events``, ``count`` (at least 1) events joined, each entry
        under the call's next ids (``last_id``: an event takes one, and so does each piece of an
        event in pieces). One entry when they fit in ``MAX_MERGED_BYTES``, as nearly always;
        else cut at event boundaries into entries of at most that many bytes (``_groups``), an
        event larger than that an entry of its own, and one larger than ``MAX_ENTRY_BYTES`` in
        pieces (``pieces``: a ``more=1`` frame and its ``part`` entries)."""
        key = self.key
        if len(events) <= MAX_MERGED_BYTES:
            return [XAdd(key, {"kind": b"frame", "body": events}, self.last_id(count), True)]
        each = events_of(events)
        commands: list[Command] = []
        for start, end in _groups(each):
            if end - start == 1 and len(each[start]) > MAX_ENTRY_BYTES:
                for fields in pieces({"kind": b"frame"}, each[start]):
                    commands.append(XAdd(key, fields, self.last_id(1), True))
            else:
                fields = {"kind": b"frame", "body": b"".join(each[start:end])}
                commands.append(XAdd(key, fields, self.last_id(end - start), True))
        return commands


def _groups(bodies: list[bytes]) -> list[tuple[int, int]]:
    """``bodies`` cut into runs of ones that follow one another, each run holding at most
    ``MAX_MERGED_BYTES`` together (a body larger than that is a run of its own): their
    ``(start, end)`` indexes, in order."""
    groups: list[tuple[int, int]] = []
    start = size = 0
    for index, body in enumerate(bodies):
        if index > start and size + len(body) > MAX_MERGED_BYTES:
            groups.append((start, index))
            start, size = index, 0
        size += len(body)
    if start < len(bodies):
        groups.append((start, len(bodies)))
    return groups


class _Queued:
    """One batch in the queue: a method's commands, or a run of one call's frames.

    A run is the frames of one call queued one after another, each with its own entry id; the
    call's later ``frames`` extend it until the tee's thread takes it or the queue is spilled,
    which seals it (a sealed batch never changes). Sent live, a run is its events in order, in
    as few entries of at most ``MAX_MERGED_BYTES`` as hold them (cut at events), each under the
    id of its last (as ``coalesce`` merges); spooled, it is one entry per frame under its own
    id, so a replay never merges (see the module's docstring). A run never holds an event larger
    than ``MAX_ENTRY_BYTES``: ``Tee.frames`` queues those in pieces, as commands.

    A run of body chunks (``Tee.chunk``; ``body`` is the call's ``_Body``) holds the raw chunks
    until it is sealed and cut (``cut``, under the lock, in queue order: by the thread when it
    takes the run, or by a spill), when its finished events become its frame entries, kept as
    its ``commands``: sent and spooled alike."""

    __slots__ = (
        "bodies", "body", "closing", "commands", "final", "ids", "key", "opening", "request_id",
        "size",
    )  # fmt: skip

    def __init__(
        self, commands: list[Command] | None, size: int, request_id: str = "", key: str = ""
    ) -> None:
        self.commands = commands
        self.size = size
        self.request_id = request_id
        self.key = key
        self.opening = False  # the call's ``open`` commands
        self.closing = False  # the call's ``close`` commands
        self.bodies: list[bytes] = []
        self.ids: list[str] = []
        self.body: _Body | None = None
        self.final = False  # the call's last run: its unfinished event is a frame too

    def cut(self) -> None:
        """A run of body chunks, sealed: its chunks become the frame entries of the events they
        finish (``_Body.entries``: one entry, under the id of the last event, unless they are
        more than ``MAX_MERGED_BYTES``), the run's ``commands`` from now on, live and spooled.
        The caller holds the lock; runs of one call are cut in queue order."""
        body = self.body
        if body is None:
            return
        self.body = None
        events, count = body.splitter.feed_joined(b"".join(self.bodies))
        if self.final:
            rest = body.splitter.rest()
            if rest:
                events += rest
                count += 1
        if body.pending is self:
            body.pending = None
        self.bodies = []
        self.commands = body.entries(events, count) if count else []

    def live(self) -> list[Command]:
        """The commands to send now (a run of chunks is cut already, into its ``commands``)."""
        if self.commands is not None:
            return self.commands
        bodies = self.bodies
        if not bodies:
            return []
        key, ids = self.key, self.ids
        if sum(map(len, bodies)) <= MAX_MERGED_BYTES:
            return [XAdd(key, {"kind": b"frame", "body": b"".join(bodies)}, ids[-1], True)]
        return [
            XAdd(key, {"kind": b"frame", "body": b"".join(bodies[start:end])}, ids[end - 1], True)
            for start, end in _groups(bodies)
        ]

    def spooled(self) -> list[Command]:
        """The commands to spool (the caller holds the lock)."""
        self.cut()
        if self.commands is not None:
            return self.commands
        return _frames(self.key, self.bodies, self.ids)


def _frames(key: str, bodies: list[bytes], ids: list[str]) -> list[Command]:
    """A frame entry per body, under its id (as ``frame_commands`` writes them)."""
    return [
        XAdd(key, {"kind": b"frame", "body": body}, entry_id, True)
        for body, entry_id in zip(bodies, ids, strict=True)
    ]


class Tee:
    """Asynchronous, spooling ``Publisher``. See the module's docstring for the guarantees."""

    def __init__(
        self,
        client: redis.Redis | Any,
        keys: Keys | None = None,
        *,
        ttl_seconds: int = 86_400,
        spool_dir: str | Path = DEFAULT_SPOOL_DIR,
        max_queue_bytes: int = 16 << 20,
        batch_bytes: int = 64 << 10,
        linger_seconds: float = DEFAULT_LINGER_SECONDS,
        sync_seconds: float = 1.0,
        retry_seconds: float = 0.5,
        adopt_seconds: float = 30.0,
        adopt_slice_seconds: float = 0.05,
    ) -> None:
        self._client = client
        self.keys = keys or Keys()
        self.ttl_seconds = ttl_seconds
        self.max_queue_bytes = max_queue_bytes
        self.batch_bytes = batch_bytes
        self.linger_seconds = linger_seconds
        self.sync_seconds = sync_seconds
        self.retry_seconds = retry_seconds
        self.adopt_seconds = adopt_seconds
        self.adopt_slice_seconds = adopt_slice_seconds
        self.spool_dir = Path(spool_dir)
        # The spool file is made at the first spill (``_spill_locked``) and the quarantine file at
        # the first refusal for good (``_quarantine``): a tee whose Redis takes every write never
        # writes to the disk. The directory is checked now (``ready``).
        self._spool: Spool | None = None
        self._quarantined: Spool | None = None
        self._spool_ok = True
        self._probe_spool()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._idle = threading.Condition(self._lock)
        self._queue: deque[_Queued] = deque()
        self._queued_bytes = 0
        self._runs: dict[str, _Queued] = {}  # request id -> its run of frames still open
        self._submitted = 0  # call events queued or spooled; reported to ``metrics.QUEUED``
        self._reported = 0
        self._generation = 0  # bumped when the queue is spilled into the spool
        # Spooling: every batch goes to the spool until it is replayed (then the queue is empty).
        self._spooling = False
        self._replay_offset = 0
        self._spool_gauge = 0
        self._spooled_at: deque[tuple[int, float]] = deque()  # (end offset, time) of appends
        # Orphaned spool files being replayed, held locked: [file, offset replayed to, its mtime].
        self._adopted: list[list[Any]] = []
        self._adopting = True  # a look for orphans is due, or one is held: ``flush`` waits
        self._aged = False  # an age was reported to ``metrics.SPOOL_OLDEST``
        self._refusing = ""  # the code of the refusal last logged; "" while Redis takes writes
        self._ids: dict[str, list[int]] = {}
        self._bodies: dict[str, _Body] = {}  # request id -> its body being cut (``chunk``)
        # request id -> its ``request`` entry and TTL, sent live, until its ``close`` is written:
        # spooled before any later write of the call (``_spill_locked``), so a replay after the
        # worker deleted the stream (the grace ended during a long outage) writes the call again
        # from its request entry instead of frames that NOMKSTREAM drops. Holds the metadata of
        # the calls in flight (bounded by ``request_budget``'s size each).
        self._opens: dict[str, list[Command]] = {}
        self._stopping = False
        self._flushing = 0  # callers waiting in ``flush``: no lingering then
        self._asleep = False  # the thread waits for an enqueue to wake it (else it polls)
        self._stopped = threading.Event()
        self._connection: Any = None  # the thread's own, from the client's pool
        self._thread = threading.Thread(target=self._run, name="billing-tee", daemon=True)
        self._thread.start()

    @classmethod
    def from_url(cls, url: str, keys: Keys | None = None, **options: Any) -> Tee:
        """A tee with its own client, whose short timeouts find an unreachable Redis quickly."""
        client = redis.Redis.from_url(url, socket_timeout=2.0, socket_connect_timeout=1.0)
        return cls(client, keys, **options)

    # ------------------------------------------------------------------ the Publisher's methods

    @contextmanager
    def batch(self) -> Iterator[Tee]:
        """For ``Publisher``'s callers: the tee batches by itself, so this changes nothing."""
        yield self

    def _id_state(self, request_id: str) -> list[int]:
        state = self._ids.get(request_id)
        if state is None:
            state = self._ids[request_id] = [0, 0]
        return state

    def _next_id(self, request_id: str) -> Callable[[], str]:
        state = self._id_state(request_id)

        def next_id() -> str:
            _advance(state)
            return f"{state[0]}-{state[1]}"

        return next_id

    def open(
        self,
        meta: dict[str, Any] | bytes,
        request_id: str | None = None,
        *,
        admission: dict[str, bytes] | None = None,
    ) -> None:
        """Queue the ``request`` entry, the key's TTL and the ``open`` notification; for a call
        whose ``admission`` record was written before it was served (its entry's fields,
        ``worker.gateway.authorize``), the ``request`` entry alone (``open_commands``). Should
        the call's later writes be spooled, the admission entry goes before them again, so a
        replay after the worker deleted the finalized stream re-creates it under the same head."""
        body, rid = request_body(meta, request_id)
        commands = open_commands(
            self.keys,
            rid,
            body,
            self.ttl_seconds,
            self._next_id(rid),
            admitted=admission is not None,
        )
        if admission is None:
            self._submit(rid, commands, opening=True)
            return
        whole = [*admission_commands(self.keys, rid, admission)[:1], *commands]
        with self._lock:
            live = (
                not self._spooling and self._queued_bytes + _size(commands) <= self.max_queue_bytes
            )
            taken = commands if live else whole
            self._submit_locked(rid, taken, _size(taken), opening=True)
            if live:
                self._opens[rid] = whole

    def spool_now(self, commands: list[Command]) -> bool:
        """Write ``commands`` to the spool before returning (a call's admission when Redis
        cannot take it): True once the file holds them, False when the disk refuses them. Every
        later write goes to the spool too until it is replayed, so the call's writes stay in order."""
        with self._lock:
            try:
                if self._spool is None:
                    self._spool = Spool.own(self.spool_dir)
            except OSError as exc:
                self._spool_failed(exc, "an admission refused")
                return False
            size = self._spool.size
            self._spill_locked(commands, resend=False)
            return self._spooling and self._spool is not None and self._spool.size > size

    def frames(self, request_id: str, events: Iterable[bytes | str]) -> None:
        """Queue SSE events as sent to the client: they extend the call's run of frames waiting in
        the queue, or start one (see ``_Queued``); events of which one is larger than
        ``MAX_ENTRY_BYTES`` are queued as ``frame_commands`` writes them, that one in pieces."""
        # The hot path (once per SSE event, on the gateway's event loop): plain operations only.
        bodies = [event if isinstance(event, bytes) else event.encode() for event in events]
        if not bodies:
            return
        size = 0
        state = self._ids.get(request_id) or self._id_state(request_id)
        ids = []
        for body in bodies:
            size += len(body)
            ms = int(_clock() * 1000)  # now_ms, inlined
            if ms > state[0]:
                state[0] = ms
                state[1] = 0
            else:
                state[1] += 1
            ids.append(f"{state[0]}-{state[1]}")
        if size > MAX_ENTRY_BYTES and max(map(len, bodies)) > MAX_ENTRY_BYTES:
            # An event larger than the worker takes in one entry: in pieces, each under an id of
            # its own (taken after the ones above, left unused), queued as commands: the same
            # entries live and spooled, never merged.
            next_id = self._next_id(request_id)
            self._submit(request_id, frame_commands(self.keys, request_id, bodies, next_id))
            return
        with self._lock:
            self._submitted += 1
            run = self._runs.get(request_id)
            if (
                run is not None
                and self._queued_bytes + size <= self.max_queue_bytes
                and run.size + size <= MAX_MERGED_BYTES
            ):
                run.bodies += bodies
                run.ids += ids
                run.size += size
                self._queued_bytes += size
                return
            key = self.keys.request(request_id)
            size += _PER_COMMAND_BYTES
            if self._spooling or self._queued_bytes + size > self.max_queue_bytes:
                self._spill_locked(_frames(key, bodies, ids), request_id)
                return
            run = self._runs[request_id] = _Queued(None, size, request_id, key)
            run.bodies, run.ids = bodies, ids
            self._enqueue_locked(run)

    def chunk(self, request_id: str, data: bytes) -> None:
        """Queue a chunk of a streamed response body as sent to the client, whatever its cut:
        the tee's thread cuts the call's chunks into their SSE events (``events``) and publishes
        them in frame entries, byte for byte (``_Body.entries``); ``close`` publishes an event
        left unfinished at the end. For one call use either this or ``frames``, not both. The hot
        path (once per body chunk, on the gateway's event loop): a lock and an append."""
        size = len(data)
        with self._lock:
            self._submitted += 1
            run = self._runs.get(request_id)
            if (
                run is not None
                and run.body is not None
                and self._queued_bytes + size <= self.max_queue_bytes
                and run.size + size <= MAX_MERGED_BYTES
            ):
                run.bodies.append(data)
                run.size += size
                self._queued_bytes += size
                return
            body = self._bodies.get(request_id)
            if body is None:
                key = self.keys.request(request_id)
                body = self._bodies[request_id] = _Body(key, self._id_state(request_id))
            size += _PER_COMMAND_BYTES
            run = body.pending = _Queued(None, size, request_id, body.key)
            run.body, run.bodies = body, [data]
            if self._spooling or self._queued_bytes + size > self.max_queue_bytes:
                self._spill_locked(run)
                return
            self._runs[request_id] = run
            self._enqueue_locked(run)

    def response(self, request_id: str, status: int, body: bytes | str) -> None:
        """Queue a non-streamed call's HTTP status and body."""
        commands = response_commands(self.keys, request_id, status, body, self._next_id(request_id))
        self._submit(request_id, commands)

    def close(self, request_id: str, reason: str = "done") -> None:
        """Queue the ``close`` notification; the call's id state is forgotten."""
        commands = close_commands(self.keys, request_id, reason)
        self._ids.pop(request_id, None)
        body = self._bodies.pop(request_id, None)
        if body is not None:
            with self._lock:
                if body.pending is not None:  # not cut yet: its cut ends with the rest
                    body.pending.final = True
                else:
                    rest = body.splitter.rest()
                    if rest:
                        frame = body.entries(rest, 1)
                        self._submit_locked(request_id, frame, _size(frame))
                self._submit_locked(request_id, commands, _size(commands), closing=True)
            return
        self._submit(request_id, commands, closing=True)

    # ------------------------------------------------------------------ queue and spool

    def unbilled(self, request_id: str, route: str, account_id: str | None = None) -> None:
        """Queue the ``unbilled`` notification of a request served unbilled."""
        self._submit(request_id, unbilled_commands(self.keys, request_id, route, account_id))

    def _submit(
        self,
        request_id: str,
        commands: list[Command],
        *,
        opening: bool = False,
        closing: bool = False,
    ) -> None:
        """Queue ``commands`` after the call's run of frames, which no later frame may join."""
        size = _size(commands)
        with self._lock:
            self._submit_locked(request_id, commands, size, opening=opening, closing=closing)

    def _submit_locked(
        self,
        request_id: str,
        commands: list[Command],
        size: int,
        *,
        opening: bool = False,
        closing: bool = False,
    ) -> None:
        self._submitted += 1
        self._runs.pop(request_id, None)
        if not self._spooling and self._queued_bytes + size <= self.max_queue_bytes:
            batch = _Queued(commands, size, request_id)
            batch.opening, batch.closing = opening, closing
            if opening:
                self._opens[request_id] = commands[:2]  # the request entry and its TTL
            self._enqueue_locked(batch)
            return
        # An ``open`` spooled is in the spool itself: nothing to write again for it.
        self._spill_locked(commands, request_id, resend=not opening)

    def _enqueue_locked(self, batch: _Queued) -> None:
        self._queue.append(batch)
        self._queued_bytes += batch.size
        if self._asleep and len(self._queue) == 1:  # else the thread looks within a linger
            self._wake.notify()

    def _resent_locked(self, request_id: str, opening: bool) -> list[list[Command]]:
        """What to spool before a call's batch: its ``request`` entry and TTL, once, when its
        ``open`` went to Redis live (``_opens``) and this batch is not that ``open`` itself."""
        opens = self._opens.pop(request_id, None) if request_id else None
        return [opens] if opens is not None and not opening else []

    def _spill_locked(
        self,
        extra: list[Command] | _Queued | None = None,
        request_id: str = "",
        *,
        resend: bool = True,
    ) -> None:
        """Move the queue (and ``extra``, of call ``request_id``, after it) into the spool; from
        now on everything is spooled until the spool is replayed. Each call's first spooled
        batch is preceded by its ``request`` entry when its ``open`` was written live
        (``_resent_locked``). The caller holds the lock."""
        batches: list[list[Command]] = []
        for batch in self._queue:
            batches += self._resent_locked(batch.request_id, batch.opening)
            batches.append(batch.spooled())
        self._runs.clear()
        if extra is not None:
            if isinstance(extra, _Queued):
                request_id = extra.request_id
            if resend:
                batches += self._resent_locked(request_id, False)
            batches.append(extra.spooled() if isinstance(extra, _Queued) else extra)
        if not batches:
            return
        try:
            if self._spool is None:
                self._spool = Spool.own(self.spool_dir)
            self._spool.append([_encode(commands) for commands in batches])
        except OSError as exc:
            # The queue stays in memory (it is bounded) while the tee runs: only the batch that
            # found it full is lost; at the stop, all of it.
            lost = len(batches) if self._stopping else int(extra is not None)
            self._spool_failed(exc, f"{lost} batch(es) lost" if lost else "kept in memory")
            metrics.LOST.inc(lost)
            return
        if not self._spool_ok:
            self._spool_ok = True
            metrics.SPOOL_WRITABLE.set(1)
        # When the oldest write not yet replayed was spooled (``_report_age``): one entry a
        # second, (its last append's end, its first append's time), not one an append.
        now, spooled_at = time.time(), self._spooled_at
        if spooled_at and now - spooled_at[-1][1] < 1.0:
            spooled_at[-1] = (self._spool.size, spooled_at[-1][1])
        else:
            spooled_at.append((self._spool.size, now))
        metrics.SPOOLED.inc(len(batches))
        self._queue.clear()
        self._queued_bytes = 0
        self._report_locked()
        self._generation += 1
        self._spooling = True
        self._account_spool_locked()
        self._wake.notify()

    def _report_locked(self) -> None:
        """The queue's metrics, brought up to date by the thread (not per call event: a metric's
        lock and arithmetic per event cost the event loop more than the queueing itself)."""
        metrics.QUEUED.inc(self._submitted - self._reported)
        self._reported = self._submitted
        metrics.QUEUE_BYTES.set(self._queued_bytes)

    def _account_spool_locked(self) -> None:
        pending = self._spool.size - self._replay_offset if self._spool is not None else 0
        metrics.SPOOL_BYTES.inc(pending - self._spool_gauge)
        self._spool_gauge = pending

    # ------------------------------------------------------------------ the background thread

    def _run(self) -> None:
        next_adopt = time.monotonic()
        next_sync = time.monotonic() + self.sync_seconds
        busy = False  # the last pass sent something
        while True:
            with self._lock:
                if self._stopping:
                    self._spill_locked()
                    self._idle.notify_all()
                    return
                polled = False
                if not self._queue and not self._spooling and not self._adopting:
                    self._report_locked()
                    self._idle.notify_all()
                    if busy:
                        # Traffic: look again after a linger, not woken per call (a wake-up is
                        # a context switch for this thread and a system call for the caller).
                        self._wake.wait(self.linger_seconds)
                        polled = True
                    else:
                        # Quiet: sleep until a call's first event (``_enqueue_locked``) wakes it.
                        self._asleep = True
                        self._wake.wait(self.sync_seconds)
                        self._asleep = False
                linger = (
                    not polled and 0 < self._queued_bytes < self.batch_bytes and not self._flushing
                )
            if linger:
                # Let a call's next events join this batch: a round trip per event cost more
                # CPU than the rest of the tee together.
                self._stopped.wait(self.linger_seconds)
            with self._lock:
                taken: list[_Queued] = []
                budget = self.batch_bytes
                for batch in self._queue:
                    if taken and batch.size > budget:
                        break
                    if self._runs.get(batch.request_id) is batch:
                        del self._runs[batch.request_id]  # sealed: later frames start a run
                    batch.cut()
                    taken.append(batch)
                    budget -= batch.size
                generation, spooling = self._generation, self._spooling
                self._report_locked()
            busy = bool(taken)
            if taken:
                ok = self._send_queued(taken, generation)
            elif spooling:
                ok = self._replay_own()
            else:
                ok = True
            now = time.monotonic()
            if now >= next_sync:
                self._sync()
                next_sync = now + self.sync_seconds
            if now >= next_adopt:  # also while Redis is away: their age is reported
                self._take_orphans()
                next_adopt = now + self.adopt_seconds
            if ok and self._adopted:
                # Under load too: a slice between live batches, bounded so calls are not starved.
                ok = self._adopt(time.monotonic() + self.adopt_slice_seconds)
            self._report_age()
            if not ok:
                self._stopped.wait(self.retry_seconds)

    def _sync(self) -> None:
        for spool in (self._spool, self._quarantined):
            if spool is None:
                continue
            try:
                spool.sync()
            except OSError as exc:
                log.error("tee: fsync of %s failed: %s", spool.path, exc)

    def _execute(self, commands: list[Command]) -> None:
        """Write ``commands`` in one round trip, as one ``MULTI``/``EXEC``: Redis takes them all
        or none. Raises one of ``UNREACHABLE`` if Redis may not have had them all, or refused
        them all for a while (``NotWritable``); commands refused for good are quarantined and
        the rest written (the module's docstring, *What Redis refuses*).

        The thread keeps one connection of the client's pool and writes the commands' wire form
        on it directly: redis-py's pipeline object, its per-command bookkeeping and the pool's
        health check per checkout cost more than the writes. After an error the connection is
        dropped (the next batch reconnects), never reused half read."""
        if not commands:
            return
        if self._connection is None:
            self._connection = self._client.connection_pool.get_connection()
        connection = self._connection
        try:
            if connection._sock is None:  # dropped after an error: reconnect
                connection.connect()
            if connection._sock.gettimeout() is not None:  # a new socket
                _timeouts_in_kernel(connection._sock)
            # Packed by hiredis directly (redis-py's packer walks every argument in Python), and
            # one send: each blocking call lets the event loop's thread take the GIL, and this
            # thread then waits to get it back (a context switch each way).
            packed = b"".join(
                [_MULTI, *[pack_command(args) for args in map(wire, commands)], _EXEC]
            )
            connection.send_packed_command([packed])
            began = _reply(connection)
            queued = [_reply(connection) for _ in commands]  # QUEUED, or refused at once
            done = _reply(connection)  # the commands' replies, or why nothing was done
        except BaseException:
            connection.disconnect()
            raise
        if isinstance(began, Exception):
            # No transaction (MULTI itself refused): the commands ran one by one, and ``queued``
            # holds their replies.
            connection.disconnect()
            self._written(commands, queued)
        elif isinstance(done, list) and len(done) == len(commands):
            self._written(commands, done)
        else:
            # EXEC refused (EXECABORT after a refusal at queueing, OOM, READONLY...): nothing of
            # the batch was written. A new connection for the next, in no transaction for sure.
            connection.disconnect()
            self._aborted(commands, queued, done)

    def _written(self, commands: list[Command], results: list[Any]) -> None:
        """Sort the replies of commands that ran: see the module's docstring."""
        written = 0
        retry: BaseException | None = None
        refused: list[tuple[Command, BaseException]] = []
        for command, result in zip(commands, results, strict=True):
            if not isinstance(result, Exception):
                written += 1
            elif isinstance(result, UNREACHABLE) or _code(result) in RETRY_CODES:
                retry = retry or result
            elif _ALREADY_WRITTEN in str(result):
                metrics.DUPLICATES.inc()
            else:
                refused.append((command, result))
        metrics.PUBLISHED.inc(written)
        if retry is not None:  # all of it again later: what is quarantined then, is then
            raise self._not_writable(retry)
        if refused:
            self._quarantine(refused)
        if self._refusing:
            log.warning("tee: Redis takes writes again (after %s)", self._refusing)
            self._refusing = ""

    def _aborted(self, commands: list[Command], queued: list[Any], done: Any) -> None:
        """A transaction Redis refused: raise ``NotWritable`` for a state it leaves; else some
        commands were refused for good as they were queued: quarantine them, write the rest."""
        at_once = [(i, reply) for i, reply in enumerate(queued) if isinstance(reply, Exception)]
        retry = [
            error
            for error in [reply for _i, reply in at_once] + [done]
            if isinstance(error, UNREACHABLE) or _code(error) in RETRY_CODES
        ]
        if retry or not at_once:
            raise self._not_writable(retry[0] if retry else done)
        self._quarantine([(commands[i], reply) for i, reply in at_once])
        refused = {i for i, _reply in at_once}
        self._execute([command for i, command in enumerate(commands) if i not in refused])

    def _not_writable(self, error: Any) -> NotWritable:
        code = _code(error) if isinstance(error, BaseException) else "EXEC"
        metrics.REFUSED.labels(code).inc()
        if code != self._refusing:
            log.warning(
                "tee: Redis refuses writes (%s); spooling, retried every %g s",
                code,
                self.retry_seconds,
            )
            self._refusing = code
        return NotWritable(code)

    def _quarantine(self, refused: list[tuple[Command, BaseException]]) -> None:
        """Keep commands Redis refused for good in the quarantine file, as one record (in
        order). Logged with the key and the error's code only: the message of some errors
        might quote an argument."""
        commands = [command for command, _error in refused]
        try:
            if self._quarantined is None:
                self._quarantined = Spool.own(self.spool_dir, QUARANTINE_SUFFIX)
            self._quarantined.append([_encode(commands)])
        except OSError as exc:
            metrics.LOST.inc()
            log.error("tee: a refused write cannot be quarantined in %s: %s", self.spool_dir, exc)
            for command, error in refused:
                log.error("tee: lost a write to %s, refused (%s)", command.key, _code(error))
            return
        metrics.QUARANTINED.inc(len(commands))
        for command, error in refused:
            log.error(
                "tee: Redis refused a write to %s (%s); quarantined in %s",
                command.key,
                _code(error),
                self._quarantined.path,
            )

    def _send_queued(self, taken: list[_Queued], generation: int) -> bool:
        try:
            self._execute(coalesce([command for batch in taken for command in batch.live()]))
        except UNREACHABLE as exc:
            log.warning("tee: Redis unreachable (%s); spooling", type(exc).__name__)
            with self._lock:
                if self._generation == generation:
                    self._spill_locked()
            return False
        with self._lock:
            if self._generation == generation:  # else a full queue was spilled meanwhile
                for _ in taken:
                    self._queued_bytes -= self._queue.popleft().size
            for batch in taken:
                if batch.closing:  # the call is written whole: nothing to write again
                    self._opens.pop(batch.request_id, None)
        return True

    def _replay(self, spool: Spool, offset: int) -> tuple[int, bool]:
        """Replay one budget of ``spool`` from ``offset``; (new offset, whether Redis took it)."""
        payloads, after, torn = spool.read(offset, self.batch_bytes)
        if torn:
            log.warning("tee: %d torn record(s) skipped in %s", torn, spool.path)
            metrics.TORN.inc(torn)
        batches: list[list[Command]] = []
        for payload in payloads:
            try:
                batches.append(_decode(payload))
            except msgspec.DecodeError:  # intact framing around a payload of another version
                metrics.TORN.inc()
                log.error("tee: an undecodable record skipped in %s", spool.path)
        try:
            self._execute([command for commands in batches for command in commands])
        except UNREACHABLE:
            return offset, False
        metrics.REPLAYED.inc(len(batches))
        return after, True

    def _replay_own(self) -> bool:
        spool = self._spool
        if spool is None:  # spooling always has a file; never here
            return True
        after, ok = self._replay(spool, self._replay_offset)
        with self._lock:
            self._replay_offset = after
            while self._spooled_at and self._spooled_at[0][0] <= after:
                self._spooled_at.popleft()
            if self._replay_offset >= spool.size:
                spool.reset()
                self._replay_offset = 0
                self._spooled_at.clear()
                self._spooling = False
            self._account_spool_locked()
        return ok

    def _take_orphans(self) -> None:
        """Lock the spool files of tees that are gone, to replay them (``_adopt``)."""
        own = self._spool.path if self._spool is not None else None
        try:
            for spool in orphans(self.spool_dir, own):
                metrics.SPOOL_BYTES.inc(spool.size)
                self._adopted.append([spool, 0, spool.modified])
        except OSError as exc:
            log.error("tee: cannot look for orphaned spool files in %s: %s", self.spool_dir, exc)
        self._adopted_now()

    def _adopt(self, deadline: float) -> bool:
        """Replay the orphans held, in turn, until ``deadline`` (at least one budget); each
        replayed to its end is deleted. False when Redis did not take a budget."""
        ok = True
        while self._adopted:
            held = self._adopted[0]
            spool, offset = held[0], held[1]
            try:
                if offset < spool.size:
                    if time.monotonic() >= deadline:
                        break
                    after, ok = self._replay(spool, offset)
                    metrics.SPOOL_BYTES.dec(after - offset)
                    held[1] = after
                    if not ok:
                        break
                    continue
                spool.close(delete=True)
                log.info("tee: replayed the spool %s of a tee that is gone", spool.path)
            except OSError as exc:  # let go, looked at again at the next look for orphans
                log.error("tee: the orphaned spool %s: %s; let go for now", spool.path, exc)
                metrics.SPOOL_BYTES.dec(spool.size - held[1])
                with suppress(OSError):
                    spool.close()
            self._adopted.pop(0)
        self._adopted_now()
        return ok

    def _adopted_now(self) -> None:
        with self._lock:
            adopting = bool(self._adopted)
            if self._adopting and not adopting:
                self._idle.notify_all()
            self._adopting = adopting

    def _report_age(self) -> None:
        """``billing_gateway_spool_age_seconds``: when the oldest write not yet replayed was
        spooled, of the own file (exactly) and of the orphans held (their last write)."""
        spooled_at = self._spooled_at
        if not spooled_at and not self._adopted and not self._aged:
            return  # nothing waits, and the gauge says so (the common case: no lock)
        with self._lock:
            since = spooled_at[0][1] if spooled_at else None
        for held in self._adopted:
            if held[1] < held[0].size and (since is None or held[2] < since):
                since = held[2]
        if since is None and not self._aged:
            return
        self._aged = since is not None
        metrics.SPOOL_OLDEST.report(id(self), since)

    def _probe_spool(self) -> None:
        try:
            probe(self.spool_dir)
        except OSError as exc:
            self._spool_failed(exc, "calls go to Redis, and are lost if it must spool")
            return
        metrics.SPOOL_WRITABLE.set(1)

    def _spool_failed(self, exc: OSError, consequence: str) -> None:
        self._spool_ok = False
        metrics.SPOOL_WRITABLE.set(0)
        log.error(
            "tee: the spool in %s cannot be written (%s): %s", self.spool_dir, exc, consequence
        )

    # ------------------------------------------------------------------ lifecycle

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything queued or spooled is in Redis; False if ``timeout`` passed first."""
        with self._lock:
            self._flushing += 1
            self._wake.notify()
            try:
                return self._idle.wait_for(
                    lambda: not self._queue and not self._spooling and not self._adopting, timeout
                )
            finally:
                self._flushing -= 1

    def stop(self, timeout: float = 5.0) -> bool:
        """Flush for up to ``timeout`` seconds, then stop the thread; what is left stays in the
        spool file, and an orphan not replayed to its end is let go (the next tee to adopt it
        replays it from its start). Returns whether everything reached Redis. Stopping a stopped
        tee does nothing and returns what the first stop returned."""
        if self._stopped.is_set():
            return self._flushed_at_stop
        flushed = self.flush(timeout)
        with self._lock:
            self._stopping = True
            self._wake.notify()
        self._flushed_at_stop = flushed
        self._stopped.set()
        self._thread.join()
        if self._connection is not None:
            self._client.connection_pool.release(self._connection)
            self._connection = None
        self._sync()
        for held in self._adopted:
            metrics.SPOOL_BYTES.dec(held[0].size - held[1])
            held[0].close()
        self._adopted.clear()
        with self._lock:
            metrics.SPOOL_BYTES.dec(self._spool_gauge)  # left for the tee that adopts it
            self._spool_gauge = 0
        for spool in (self._spool, self._quarantined):
            if spool is not None:
                spool.close(delete=spool.size == 0)
        metrics.SPOOL_OLDEST.report(id(self), None)
        return flushed

    @property
    def spooling(self) -> bool:
        """Whether every batch goes to the spool file now (until it is replayed)."""
        return self._spooling

    @property
    def ready(self) -> bool:
        """Whether the spool directory could be written at the last try (at start, then at each
        spill): for a gateway's readiness check. A tee that is not ready still writes to Redis;
        it loses batches only if it must spool."""
        return self._spool_ok

    @property
    def client(self) -> redis.Redis:
        """The Redis client it writes with (the gateway's admission runs on its settings)."""
        return self._client
