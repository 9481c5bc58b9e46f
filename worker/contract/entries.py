"""Decode the gateway's Redis entries into notifications and call records. Pure; no IO.

Everything here raises ``InputError`` with a short reason for input that cannot be used; the consumer
turns that into a dead letter. Size limits bound what one call may hold, so a hostile or broken gateway
cannot make a worker hold unbounded memory.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any

from worker.core.errors import InputError
from worker.core.request import RequestMeta, check_identifier, parse_request, request_digest

NOTIFICATION_KINDS = ("open", "close")

# Limits on one call's stream; beyond them the call is refused into the dead-letter stream.
MAX_ENTRIES = 50_000
MAX_ENTRY_BYTES = 1 << 20
MAX_CALL_BYTES = 32 << 20
# A notification's ts: unix milliseconds take 13 digits until the year 2286.
MAX_TS_DIGITS = 15
# What a stream within the limits above may take in Redis (``MEMORY USAGE``), checked with
# ``MAX_ENTRIES`` before anything is read (``size_refusal``). Redis stores a body in listpack nodes
# rounded up to the allocator's size classes, so a stream takes more than its bodies: the bound
# allows 1.5 times the bodies and 64 bytes an entry (above what was measured: see git log -S here),
# so no stream within the limits is refused here, and bounds what reading any stream costs.
MAX_STREAM_BYTES = (MAX_CALL_BYTES + MAX_ENTRY_BYTES) * 3 // 2 + MAX_ENTRIES * 64
# Each original field a dead letter copies: at most this many fields, names and values cut to
# these lengths with a marker saying how much was left out.
DEAD_LETTER_FIELDS = 32
DEAD_LETTER_NAME_CHARS = 64
DEAD_LETTER_VALUE_BYTES = 256

Fields = dict[bytes, bytes]
# An entry as redis-py parses it, (id, {name: value}), or as Redis sends it, [id, [name, value, …]]
# (the consumer reads call streams raw: redis-py's conversion of every entry into a dict was a
# quarter of its read time). Everything here takes both.
Entry = tuple[bytes, Fields] | list[Any]


def _pairs(fields: Fields | list[bytes]) -> Fields:
    if type(fields) is list:
        return dict(zip(fields[::2], fields[1::2], strict=False))
    return fields  # type: ignore[return-value]


def text(value: bytes | str | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    try:
        return value.decode()
    except UnicodeDecodeError:
        return None


@dataclass(frozen=True, slots=True)
class Notification:
    entry_id: bytes
    kind: str
    request_id: str
    ts: int | None
    reason: str | None


def _decimal(value: str | None, max_digits: int) -> int | None:
    """A plain ASCII decimal of at most ``max_digits`` digits, else None (``str.isdigit`` also
    accepts "²" and other characters ``int`` refuses)."""
    if value and len(value) <= max_digits and value.isascii() and value.isdigit():
        return int(value)
    return None


def parse_notification(entry_id: bytes, fields: Fields) -> Notification:
    """A notification's fields; its ``request_id`` follows the metadata's rule
    (``check_identifier``). ``ts`` is informational: one that is not a plain decimal of unix
    milliseconds is dropped, not refused."""
    kind = text(fields.get(b"kind"))
    if kind not in NOTIFICATION_KINDS:
        raise InputError(f"unknown notification kind {kind!r:.40}")
    request_id = text(fields.get(b"request_id"))
    if not request_id:
        raise InputError("notification without request_id")
    check_identifier(request_id, "request_id")
    ts = _decimal(text(fields.get(b"ts")), MAX_TS_DIGITS)
    return Notification(entry_id, kind, request_id, ts, text(fields.get(b"reason")))


UNBILLED_KIND = b"unbilled"
MAX_ROUTE_CHARS = 300


@dataclass(frozen=True, slots=True)
class Unbilled:
    """A request the gateway served without billing it (``BILLING_UNBILLED_ROUTES=pass``):
    docs/events.md §2, ``unbilled``."""

    entry_id: bytes
    request_id: str
    ts: int | None
    route: str
    account_id: str | None


def is_unbilled(fields: Fields) -> bool:
    return fields.get(b"kind") == UNBILLED_KIND


def parse_unbilled(entry_id: bytes, fields: Fields) -> Unbilled:
    """An ``unbilled`` notification: ``request_id`` and ``account_id`` (optional) follow the
    identifier rule, ``route`` is a string of at most ``MAX_ROUTE_CHARS`` characters."""
    request_id = text(fields.get(b"request_id"))
    if not request_id:
        raise InputError("notification without request_id")
    check_identifier(request_id, "request_id")
    route = text(fields.get(b"route"))
    if not route or len(route) > MAX_ROUTE_CHARS:
        raise InputError(f"unbilled notification without a route of 1 to {MAX_ROUTE_CHARS} chars")
    account_id = text(fields.get(b"account_id"))
    if account_id is not None:
        check_identifier(account_id, "account_id")
    ts = _decimal(text(fields.get(b"ts")), MAX_TS_DIGITS)
    return Unbilled(entry_id, request_id, ts, route, account_id)


@dataclass(frozen=True, slots=True)
class CallRecord:
    """A call's stream decoded: its metadata and either its frames or its response."""

    meta: RequestMeta
    frames: list[bytes]
    response_status: int | None
    response_body: bytes | None
    last_entry_id: bytes

    @property
    def streamed(self) -> bool:
        return self.response_status is None


# The entry id of a call's admission record: the smallest id a stream takes, so every entry the
# gateway writes after it (ids from its clock) comes later, and a replayed admission is refused as
# the duplicate it is.
ADMISSION_ENTRY_ID = "0-1"


def _admission_meta(entry_id: bytes, fields: Fields) -> RequestMeta:
    """The metadata of an ``admission`` entry: its body is a request entry of the money facts
    alone (docs/events.md §1), its ``at`` the admission's time (Redis ``TIME``, unix ms), which is
    the call's ``created_at``."""
    body = fields.get(b"body")
    if not body:
        raise InputError("admission entry without body")
    if len(body) > MAX_ENTRY_BYTES:
        raise InputError(f"admission entry larger than {MAX_ENTRY_BYTES} bytes")
    at = _decimal(text(fields.get(b"at")), MAX_TS_DIGITS)
    try:
        meta = parse_request(body, None)
    except InputError as exc:
        raise InputError(f"unparsable admission: {exc}") from None
    if at is not None:
        meta = replace(meta, created_at=datetime.fromtimestamp(at / 1000, UTC))
    return replace(meta, digest=request_digest(entry_id, meta))


def _request_meta(entry_id: bytes, fields: Fields) -> RequestMeta:
    body = fields.get(b"body")
    if not body:
        raise InputError("request entry without body")
    if len(body) > MAX_ENTRY_BYTES:
        raise InputError(f"request entry larger than {MAX_ENTRY_BYTES} bytes")
    try:
        return parse_request(body, entry_id)
    except InputError as exc:
        raise InputError(f"unparsable metadata: {exc}") from None


def admitted(admission: RequestMeta, request: RequestMeta) -> RequestMeta:
    """A call's metadata when its stream holds both records: the ``request`` entry (the prompt,
    the model that served it, how the response came) under the admission's money facts (who
    pays, the hold, when, whether it was checked) and identity (its digest). The admission is
    what the gateway wrote before serving: a later entry cannot move the call to another account
    or change what was held."""
    if request.request_id != admission.request_id:
        raise InputError(
            f"request entry names {request.request_id!r}, not the admission's "
            f"{admission.request_id!r}"
        )
    return replace(
        request,
        account_id=admission.account_id,
        # The hold admitted: the one the ledger holds from the call's ``open`` and the store took.
        reserved_micros=admission.reserved_micros,
        created_at=admission.created_at,
        account_fallback=admission.account_fallback,
        admitted_unchecked=admission.admitted_unchecked,
        client_request_id=admission.client_request_id or request.client_request_id,
        digest=admission.digest,
    )


def read_head(
    entries: list[Entry], expected_request_id: str | None = None
) -> tuple[RequestMeta, int]:
    """The metadata from a stream's head, and how many entries the head takes: a ``request``
    entry (1), or an ``admission`` entry (the gateway's write-ahead record, docs/events.md §1)
    followed by the ``request`` entry when it came (2: ``admitted``), or alone (1: the money facts
    only, ``omitted_messages``). The digest is the head's first entry's (``request_digest``).
    ``expected_request_id``: the id of the notification that led here; metadata naming another id
    is refused (an ``open`` for stream A whose metadata says B must not hold B)."""
    if not entries:
        raise InputError("no request entry: the call's stream is empty or gone")
    first = _pairs(entries[0][1])
    kind = first.get(b"kind")
    if kind == b"admission":
        meta = _admission_meta(entries[0][0], first)
        taken = 1
        if len(entries) > 1:
            second = _pairs(entries[1][1])
            if second.get(b"kind") == b"request":
                meta = admitted(meta, _request_meta(entries[1][0], second))
                taken = 2
    elif kind == b"request":
        meta, taken = _request_meta(entries[0][0], first), 1
    else:
        raise InputError("no request entry: the stream does not start with kind=request")
    if expected_request_id is not None and meta.request_id != expected_request_id:
        raise InputError(
            f"request entry names {meta.request_id!r}, not the stream's {expected_request_id!r}"
        )
    return meta, taken


def read_meta(entries: list[Entry], expected_request_id: str | None = None) -> RequestMeta:
    """The metadata from a stream's head (``read_head``)."""
    return read_head(entries, expected_request_id)[0]


_FIELDS = itemgetter(1)
_NAMES = itemgetter(0, 1, 2)
_BODY = itemgetter(3)
_FRAME_NAMES = (b"kind", b"frame", b"body")


def _raw_frames(entries: list[Entry]) -> list[bytes] | None:
    """The bodies of ``entries`` when every one is a frame as Redis sends it, ``[b"kind",
    b"frame", b"body", body]``, within the size limits; None for anything else (``decode_call``'s
    loop then decides each entry and names the first it refuses). Nearly every entry of every
    call: checked by C loops (``map``, ``count``), not one Python step an entry."""
    try:
        fields = list(map(_FIELDS, entries))
        if list(map(type, fields)).count(list) != len(fields):
            return None
        if list(map(len, fields)).count(4) != len(fields):
            return None
        if list(map(_NAMES, fields)).count(_FRAME_NAMES) != len(fields):
            return None
    except (IndexError, KeyError, TypeError):
        return None
    bodies = list(map(_BODY, fields))
    sizes = list(map(len, bodies))
    if sizes and (max(sizes) > MAX_ENTRY_BYTES or sum(sizes) > MAX_CALL_BYTES):
        return None
    return bodies


def decode_call(entries: list[Entry], expected_request_id: str | None = None) -> CallRecord:
    """Decode a whole call stream; raises ``InputError`` when it cannot be reconciled."""
    if len(entries) > MAX_ENTRIES:
        raise InputError(f"stream has more than {MAX_ENTRIES} entries")
    meta, head = read_head(entries, expected_request_id)
    status: int | None = None
    body: bytes | None = None
    frames = _raw_frames(entries[head:])
    if frames is None:
        frames, status, body = _read_entries(entries[head:])
    if status is not None and frames:
        raise InputError("stream holds both frames and a response")
    if meta.stream and status is not None:
        raise InputError("streamed request answered with a non-streamed response entry")
    if not meta.stream and frames:
        raise InputError("non-streamed request answered with frames")
    return CallRecord(meta, frames, status, body, entries[-1][0])


def _read_entries(entries: list[Entry]) -> tuple[list[bytes], int | None, bytes | None]:
    """The frames, and the response's status and body, of the entries after the request one, each
    decided in turn; raises ``InputError`` naming the first entry that cannot be used.

    A ``frame`` or ``response`` entry with ``more=1`` continues in the ``part`` entries after it
    (docs/events.md §1): their bodies are joined into the one frame or body. One whose ``part``
    never comes (the stream ends, or another kind of entry follows) was cut: what came of it is
    the frame or body, as the gateway sent it."""
    frames: list[bytes] = []
    status: int | None = None
    body: bytes | None = None
    total = 0
    held: list[bytes] | None = None  # the pieces of a body continued in ``part`` entries
    held_at = -1  # the frame they are (its index in ``frames``), or -1: the response's body
    ended = False  # the last of them came (a part without more=1)
    for entry_id, fields in entries:
        more = False
        # The gateway's frames are [kind, frame, body, …] as Redis sends them: read in place.
        if (
            type(fields) is list
            and len(fields) == 4
            and fields[0] == b"kind"
            and fields[2] == b"body"
        ):
            kind, payload = fields[1], fields[3]
        else:
            fields = _pairs(fields)
            kind = fields.get(b"kind")
            payload = fields.get(b"body", b"")
            flag = fields.get(b"more")
            if flag is not None:
                if flag != b"1":
                    raise InputError(f"entry {entry_id.decode()} with bad more {text(flag)!r:.40}")
                more = True
        size = len(payload)
        if size > MAX_ENTRY_BYTES:
            raise InputError(f"entry {entry_id.decode()} larger than {MAX_ENTRY_BYTES} bytes")
        total += size
        if total > MAX_CALL_BYTES:
            raise InputError(f"call stream larger than {MAX_CALL_BYTES} bytes")
        if kind == b"part":
            if held is None or ended:
                raise InputError(
                    f"entry {entry_id.decode()} is a part that continues no entry with more=1"
                )
            held.append(payload)
            ended = not more
            continue
        if held is not None:  # its last part came, or never will (cut): joined either way
            if held_at < 0:
                body = b"".join(held)
            else:
                frames[held_at] = b"".join(held)
            held = None
        if kind == b"frame":
            if more:
                held, held_at, ended = [payload], len(frames), False
            frames.append(payload)
        elif kind == b"response":
            if status is not None:
                raise InputError("more than one response entry")
            raw_status = text(_pairs(fields).get(b"status"))
            parsed = _decimal(raw_status, 3)
            if parsed is None or not 100 <= parsed <= 599:
                raise InputError(f"response entry with bad status {raw_status!r:.40}")
            status, body = parsed, payload
            if more:
                held, held_at, ended = [payload], -1, False
        elif kind == b"request":
            raise InputError("second request entry in one stream")
        elif kind == b"admission":
            raise InputError("an admission entry after the stream's head")
        else:
            raise InputError(f"unknown entry kind {text(kind)!r}")
    if held is not None:
        if held_at < 0:
            body = b"".join(held)
        else:
            frames[held_at] = b"".join(held)
    return frames, status, body


def size_refusal(entries: int, redis_bytes: int) -> str | None:
    """Why a call's stream of ``entries`` entries taking ``redis_bytes`` in Redis (``XLEN`` and
    ``MEMORY USAGE``) is refused before it is read, or None when it may be read."""
    if entries > MAX_ENTRIES:
        return f"stream has more than {MAX_ENTRIES} entries ({entries})"
    if redis_bytes > MAX_STREAM_BYTES:
        return (
            f"call stream larger than the limits: {redis_bytes} bytes in Redis, "
            f"more than {MAX_STREAM_BYTES}"
        )
    return None


def _capped(value: Any, limit: int) -> Any:
    """``value`` (bytes or str) cut to ``limit`` with a marker of what was cut; others unchanged."""
    if isinstance(value, bytes | str) and len(value) > limit:
        marker = f"…[{len(value) - limit} more]"
        return value[:limit] + (marker.encode() if isinstance(value, bytes) else marker)
    return value


def dead_letter_fields(
    source: str, reason: str, original: dict[Any, Any], now_ms: int, entry_id: bytes | None = None
) -> dict[str, Any]:
    """Fields of a dead letter: where it came from, why, when, and the original fields prefixed.

    Bounded whatever the input: ``DEAD_LETTER_FIELDS`` original fields at most (``orig_dropped``
    counts the rest), each name and value cut with a marker (``_capped``)."""
    fields: dict[str, Any] = {"source": source, "reason": reason[:500], "ts": now_ms}
    if entry_id is not None:
        fields["entry_id"] = _capped(entry_id, DEAD_LETTER_NAME_CHARS)
    for number, (key, value) in enumerate(original.items()):
        if number == DEAD_LETTER_FIELDS:
            fields["orig_dropped"] = len(original) - DEAD_LETTER_FIELDS
            break
        name = key.decode(errors="replace") if isinstance(key, bytes) else str(key)
        fields[f"orig.{_capped(name, DEAD_LETTER_NAME_CHARS)}"] = _capped(
            value, DEAD_LETTER_VALUE_BYTES
        )
    return fields
