"""Request metadata: what the gateway tells the worker about a call before it runs.

The same JSON object arrives as a ``billing replay --request`` file and as the ``kind=request`` entry of
a call's Redis stream. Unknown keys are ignored so the gateway can add fields without a worker release.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from worker.errors import RequestMetaError
from worker.money import Micros


@dataclass(frozen=True, slots=True)
class RequestMeta:
    request_id: str
    account_id: str
    model: str
    stream: bool
    include_usage: bool
    reserved_micros: Micros
    created_at: datetime
    messages: tuple[Any, ...] = ()
    tools: tuple[Any, ...] = ()
    n: int = 1
    max_tokens: int | None = None
    temperature: float | None = None
    seed: int | None = None
    idempotency_key: str | None = None
    provider: str | None = None  # where the gateway routed the call (``worker.usage`` rules)


def parse_rfc3339(value: object, field: str = "created_at") -> datetime:
    """Parse an RFC 3339 timestamp into an aware UTC datetime; a naive one is taken as UTC."""
    if not isinstance(value, str) or not value:
        raise RequestMetaError(f"{field}: expected an RFC 3339 string, got {value!r}")
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise RequestMetaError(f"{field}: not an RFC 3339 timestamp: {value!r}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def _require(data: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    if key not in data:
        raise RequestMetaError(f"{key}: missing")
    value = data[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise RequestMetaError(f"{key}: wrong type {type(value).__name__}")
    return value


def _optional_int(data: dict[str, Any], key: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise RequestMetaError(f"{key}: expected an integer, got {type(value).__name__}")
    return value


def request_from_dict(data: object) -> RequestMeta:
    """Validate a decoded metadata object; raises ``RequestMetaError`` naming the bad field."""
    if not isinstance(data, dict):
        raise RequestMetaError(f"request metadata must be a JSON object, not {type(data).__name__}")
    request_id = _require(data, "request_id", str)
    if not request_id:
        raise RequestMetaError("request_id: empty")
    stream = _require(data, "stream", bool)
    include_usage = data.get("include_usage")
    if include_usage is None:
        options = data.get("stream_options")
        if isinstance(options, dict) and isinstance(options.get("include_usage"), bool):
            include_usage = options["include_usage"]
        else:
            include_usage = True
    if not isinstance(include_usage, bool):
        raise RequestMetaError("include_usage: expected a boolean")
    reserved = _require(data, "reserved_micros", int)
    if reserved < 0:
        raise RequestMetaError("reserved_micros: must not be negative")
    messages = data.get("messages") or []
    tools = data.get("tools") or []
    if not isinstance(messages, list):
        raise RequestMetaError("messages: expected a list")
    if not isinstance(tools, list):
        raise RequestMetaError("tools: expected a list")
    n = _optional_int(data, "n")
    n = 1 if n is None else n
    if n < 1:
        raise RequestMetaError("n: must be at least 1")
    temperature = data.get("temperature")
    if temperature is not None and (
        not isinstance(temperature, int | float) or isinstance(temperature, bool)
    ):
        raise RequestMetaError("temperature: expected a number")
    key = data.get("idempotency_key")
    if key is not None and not isinstance(key, str):
        raise RequestMetaError("idempotency_key: expected a string")
    provider = data.get("provider")
    if provider is not None and (not isinstance(provider, str) or not 0 < len(provider) <= 64):
        raise RequestMetaError("provider: expected a string of 1 to 64 characters")
    return RequestMeta(
        request_id=request_id,
        account_id=_require(data, "account_id", str),
        model=_require(data, "model", str),
        stream=stream,
        include_usage=include_usage,
        reserved_micros=Micros(reserved),
        created_at=parse_rfc3339(data.get("created_at")),
        messages=tuple(messages),
        tools=tuple(tools),
        n=n,
        max_tokens=_optional_int(data, "max_tokens"),
        temperature=temperature,
        seed=_optional_int(data, "seed"),
        idempotency_key=key,
        provider=provider,
    )


def parse_request(raw: bytes | str) -> RequestMeta:
    """Decode and validate request metadata JSON."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RequestMetaError(f"request metadata is not JSON: {exc}") from None
    return request_from_dict(data)
