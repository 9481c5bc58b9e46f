"""What the worker still knows of a call it cannot read: the money facts. Pure; no IO.

Conservation: every call the gateway published ends in the ledger, settled, unsettled or void,
never only in the dead letters. When a call's metadata or stream is refused (``InputError``: a
field outside the contract, metadata that is not JSON, a stream past the limits), its request
entry usually still says whose call it was and what was held. ``salvage`` reads those fields one by
one, each by the metadata's own rule (``worker.core.request``), and keeps what passes; a field that does
not pass takes a stated stand-in (the account ``UNATTRIBUTED``, the model ``UNKNOWN_MODEL``, a hold
of 0, the notification's time) and is named in the problems. ``unreadable_result`` is the call as
the ledger records it: unsettled ``unreadable``, its exposure the hold (the gateway's own price of
the call: nothing better is known), to be resolved by a person; the anomaly ``unreadable`` carries
why (``summary``), without a byte of the prompt.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import orjson

from worker.contract.entries import MAX_CALL_BYTES, Entry
from worker.core.errors import RequestMetaError
from worker.core.money import Micros
from worker.core.request import (
    EARLIEST_CREATED_AT,
    LATEST_CREATED_AT,
    MAX_RESERVED_MICROS,
    RequestMeta,
    check_identifier,
    parse_rfc3339,
    request_digest,
)
from worker.core.result import Estimate, Outcome, Reason, Result

# Where a call whose own account id is unusable is recorded (never nowhere): a ledger account like
# any other, which `billing unsettled list` and the alerts name.
UNATTRIBUTED = "unattributed"
UNKNOWN_MODEL = "unknown"
# The most of the refusal reason an anomaly keeps.
MAX_REASON_CHARS = 300


@dataclass(frozen=True, slots=True)
class Salvaged:
    """A refused call's money facts, and what could not be read of them."""

    meta: RequestMeta
    problems: tuple[str, ...]


def _fields(raw: object) -> dict:
    """An entry's fields as redis-py parses them (a dict) or as Redis sends them (a flat list)."""
    if isinstance(raw, list):
        return dict(zip(raw[::2], raw[1::2], strict=False))
    return raw if isinstance(raw, dict) else {}


def _lenient_json(body: bytes) -> object:
    """The body as JSON by orjson, else by Python's json (a BOM, UTF-16/32, lone surrogates);
    None when neither reads it."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


def _identifier(data: dict, key: str, stand_in: str, problems: list[str]) -> str:
    value = data.get(key)
    if isinstance(value, str):
        try:
            return check_identifier(value, key)
        except RequestMetaError as exc:
            problems.append(str(exc))
            return stand_in
    problems.append(f"{key}: missing or not a string")
    return stand_in


def _reserved(data: dict, problems: list[str]) -> int:
    value = data.get("reserved_micros")
    if type(value) is int and 0 <= value <= MAX_RESERVED_MICROS:
        return value
    problems.append(f"reserved_micros: unusable ({type(value).__name__}); recorded as 0")
    return 0


def _created_at(data: dict, fallback: datetime, problems: list[str]) -> datetime:
    try:
        created_at = parse_rfc3339(data.get("created_at"))
    except RequestMetaError as exc:
        problems.append(f"{exc}; the notification's time taken")
        return fallback
    if not EARLIEST_CREATED_AT <= created_at < LATEST_CREATED_AT:
        problems.append("created_at: outside the century; the notification's time taken")
        return fallback
    return created_at


def admission_time(fields: dict) -> datetime | None:
    """An admission entry's ``at`` (unix ms, Redis ``TIME``), as ``read_head`` reads it."""
    raw = fields.get(b"at")
    if isinstance(raw, bytes) and raw.isdigit() and len(raw) <= 15:
        return datetime.fromtimestamp(int(raw) / 1000, UTC)
    return None


def salvage(entries: list[Entry], request_id: str, fallback_time: datetime) -> Salvaged | None:
    """The money facts of a refused call's stream (its first entry must be a ``request`` entry or
    the gateway's ``admission`` record, whose ``at`` is the call's time); None when there is
    neither (nothing says a call was made)."""
    if not entries:
        return None
    entry_id, raw = entries[0][0], _fields(entries[0][1])
    kind = raw.get(b"kind")
    if kind not in (b"request", b"admission"):
        return None
    at = admission_time(raw) if kind == b"admission" else None
    if at is not None:
        fallback_time = at
    body = raw.get(b"body") or b""
    problems: list[str] = []
    data = _lenient_json(body) if len(body) <= MAX_CALL_BYTES else None
    if not isinstance(data, dict):
        problems.append("the request entry's body is not a JSON object")
        data = {}
    stream = data.get("stream")
    meta = RequestMeta(
        request_id=request_id,
        account_id=_identifier(data, "account_id", UNATTRIBUTED, problems),
        model=_identifier(data, "model", UNKNOWN_MODEL, problems),
        stream=stream if isinstance(stream, bool) else False,
        include_usage=True,
        reserved_micros=Micros(_reserved(data, problems)),
        created_at=at or _created_at(data, fallback_time, problems),
    )
    # The digest of the entry it was salvaged from: a second call published under the same id is
    # still told apart (docs/events.md §5).
    meta = replace(meta, digest=request_digest(entry_id, meta))
    return Salvaged(meta, tuple(problems))


def summary(reason: str, problems: tuple[str, ...] = (), entries: int | None = None) -> str:
    """The anomaly's detail: why the call was refused and which money facts were stood in for;
    never a byte of the prompt (the problems name fields and types, not values)."""
    parts = [f"refused: {reason[:MAX_REASON_CHARS]}"]
    if entries is not None:
        parts.append(f"{entries} entries in its stream")
    parts.extend(problems)
    return "; ".join(parts)


def unreadable_result(meta: RequestMeta) -> Result:
    """The refused call as the ledger records it: unsettled ``unreadable``, exposure the hold."""
    return Result(
        request_id=meta.request_id,
        account_id=meta.account_id,
        model=meta.model,
        stream=meta.stream,
        created_at=meta.created_at,
        reserved_micros=meta.reserved_micros,
        outcome=Outcome.UNSETTLED,
        reason=Reason.UNREADABLE,
        usage_source=None,
        usage=None,
        usage_raw=None,
        estimate=Estimate(prompt_tokens=0, completion_tokens=0, approximate=True),
        charge_micros=None,
        exposure_micros=Micros(meta.reserved_micros),
        choices=(),
        completion_id=None,
        system_fingerprint=None,
        anomalies=(),
    )
