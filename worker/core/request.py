"""Request metadata: what the gateway tells the worker about a call before it runs.

The same JSON object arrives as a ``billing replay --request`` file and as the ``kind=request`` entry of
a call's Redis stream. Unknown keys are ignored so the gateway can add fields without a worker release.

This is the boundary: every field that reaches a database column is checked here, once, against
limits both engines hold (SQLite would store what PostgreSQL refuses), so a bad value is a
``RequestMetaError`` naming the field, never a database error on a later retry. The limits are the
constants below; docs/events.md states them for gateway authors.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from worker.core.errors import RequestMetaError
from worker.core.money import Micros
from worker.core.readers import CHAT, ENDPOINTS

# request_id, account_id and model are VARCHAR(200) columns (reservations, accounts, money_daily).
MAX_ID_CHARS = 200
# Control characters (C0, DEL, C1) and unpaired surrogates: PostgreSQL refuses NUL in text and
# psycopg cannot encode a surrogate; none belongs in an identifier, and an escape sequence in one
# would reach operators' terminals through `billing show` and the reports.
_NOT_IN_IDS = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
# The largest hold of one call: 10^12 micro-USD, one million USD. Holds are summed per account, day
# and model (money_daily) and per ledger account; at this bound a BIGINT sum overflows only past
# 9.2 million maximal holds in one of them, where 2^63 - 1 in a single hold overflowed at once.
MAX_RESERVED_MICROS = 10**12
# Calls of this century: a gateway clock outside it is broken, and every time the ledger derives
# from created_at (its UTC day, a price's effective date, a day either side) stays far inside what
# Python's datetime and both engines hold. The reports' "every call" window is the same.
EARLIEST_CREATED_AT = datetime(2000, 1, 1, tzinfo=UTC)
LATEST_CREATED_AT = datetime(2100, 1, 1, tzinfo=UTC)  # exclusive
# The most choices one request may ask for (OpenAI's own limit on n).
MAX_CHOICES = 128
# Optional integer fields travel on into the parity fingerprint: a signed 64-bit value each.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


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
    provider: str | None = None  # where the gateway routed the call (``worker.core.usage`` rules)
    # Which upstream credential served the call, as a label (``key_abc123``, ``team-a``), never the
    # secret itself: the upstream reconciliation matches it to the exports' ``api_key_id``.
    upstream_key: str | None = None
    # Why the gateway billed the call to its fallback account (the payer's own id was unusable):
    # recorded as the anomaly ``account_fallback``; never the id itself.
    account_fallback: str | None = None
    # The gateway served the call without a spend check (Redis unreachable or the authorization
    # store not built, and the gateway set to fail open): entry ``"authorization": "unchecked"``,
    # recorded as the anomaly ``admitted_unchecked``.
    admitted_unchecked: bool = False
    # The search context size of a request that asked for web search (``web_search_options``;
    # ``medium`` when it names none): ``worker.core.searches`` bills the search its usage may not count.
    web_search: str | None = None
    # The prompt tokens of the whole request as sent, counted by the gateway with the worker's own
    # estimate when it published the prompt cut to its budget (``prompt_estimate``); the estimate
    # then covers what was cut. None when the entry carries the prompt whole.
    prompt_estimate: int | None = None
    # The gateway published the entry without its messages and tools (``omitted_messages``).
    omitted_messages: bool = False
    # Which request entry this metadata came from (``request_digest``); None when it did not come
    # from a call's stream (a replay file, a test). Stored on the reservation, never the prompt.
    digest: str | None = None
    # The client's own reference for the call (its ``X-Request-Id``), kept so ``billing show``
    # finds the call by it; never the billing id: two calls may carry the same one.
    client_request_id: str | None = None
    # The endpoint the call was made to (``worker.core.readers.ENDPOINTS``), which picks the reader
    # of its answer; entries without one are chat completions.
    endpoint: str = "chat_completions"
    # The size and quality an image generation request asked for (entry ``image``: ``{"size",
    # "quality"}``), which price an image billed per image whose answer names neither
    # (``worker.core.images``); None when the request names none.
    image_size: str | None = None
    image_quality: str | None = None


def request_digest(entry_id: bytes, meta: RequestMeta) -> str:
    """The identity of one call's request entry: SHA-256 of its stream entry id and the fields its
    reservation records. A redelivered notification reads the same entry and gets the same digest;
    a second call published under the same request id is a new entry with another id (and usually
    other fields). The prompt is left out: the digest is stored, and must reveal nothing of it."""
    return _digest(
        entry_id, meta.request_id, meta.account_id, meta.model, meta.stream,
        meta.reserved_micros, meta.created_at,
    )  # fmt: skip


def _digest(
    entry_id: bytes,
    request_id: str,
    account_id: str,
    model: str,
    stream: bool,
    reserved: int,
    created_at: datetime,
) -> str:
    # Identifiers hold no NUL (``_identifier``), so NUL separates the fields unambiguously.
    text = f"{request_id}\x00{account_id}\x00{model}\x00{stream:d}\x00{reserved:d}\x00"
    stamp = int(created_at.timestamp() * 1_000_000)
    return hashlib.sha256(b"%b\x00%b%d" % (entry_id, text.encode(), stamp)).hexdigest()


def parse_rfc3339(value: object, field: str = "created_at") -> datetime:
    """Parse an RFC 3339 timestamp into an aware UTC datetime; a naive one is taken as UTC."""
    if not isinstance(value, str) or not value:
        raise RequestMetaError(f"{field}: expected an RFC 3339 string, got {value!r:.60}")
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise RequestMetaError(f"{field}: not an RFC 3339 timestamp: {value!r:.60}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except OverflowError:  # year 1 or 9999 shifted past the calendar's ends
        raise RequestMetaError(f"{field}: out of range: {value!r:.60}") from None


def _require(data: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    if key not in data:
        raise RequestMetaError(f"{key}: missing")
    value = data[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise RequestMetaError(f"{key}: wrong type {type(value).__name__}")
    return value


def _optional_int(
    data: dict[str, Any], key: str, low: int = INT64_MIN, high: int = INT64_MAX
) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise RequestMetaError(f"{key}: expected an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise RequestMetaError(f"{key}: must be between {low} and {high}")
    return value


# No prompt holds more tokens (a ``prompt_estimate`` beyond it is no count a gateway made).
MAX_PROMPT_ESTIMATE = 10**9


def _omitted_messages(data: dict[str, Any]) -> bool:
    value = data.get("omitted_messages")
    if value is None:
        return False
    if not isinstance(value, bool):
        raise RequestMetaError("omitted_messages: expected a boolean")
    return value


MAX_PROVIDER_CHARS = 64  # usage_records.provider is VARCHAR(64)
MAX_UPSTREAM_KEY_CHARS = 64  # call_routes.upstream_key is VARCHAR(64)
# A label names a key; it is never the key. Letters, digits and ``._:-`` only, and none of the
# prefixes the providers give their secrets (OpenAI ``sk-``/``sk-proj-``, Anthropic ``sk-ant-``).
_LABEL = re.compile(r"[A-Za-z0-9._:-]+")
_SECRET_PREFIXES = ("sk-", "sk_")


def upstream_key_label(value: object, key: str = "upstream_key") -> str:
    """``value`` if it is a usable upstream key label, else ``RequestMetaError`` naming ``key``."""
    if not isinstance(value, str):
        raise RequestMetaError(f"{key}: expected a string, got {type(value).__name__}")
    if not value:
        raise RequestMetaError(f"{key}: empty")
    if len(value) > MAX_UPSTREAM_KEY_CHARS:
        raise RequestMetaError(f"{key}: longer than {MAX_UPSTREAM_KEY_CHARS} characters")
    if not _LABEL.fullmatch(value):
        raise RequestMetaError(f"{key}: a label holds only letters, digits and . _ : -")
    if value.lower().startswith(_SECRET_PREFIXES):
        # The value is not echoed: it may be a real secret.
        raise RequestMetaError(f"{key}: looks like an API key secret; send its id or a label")
    return value


def cut_to_column(text: str) -> str:
    """``text`` as an id column holds it: whole when it fits ``MAX_ID_CHARS``, else its first
    ``MAX_ID_CHARS - 1`` characters and ``…`` (a provider's answer id, which can be longer: the
    ids LiteLLM gives Responses API answers encode their deployment)."""
    if len(text) <= MAX_ID_CHARS:
        return text
    return text[: MAX_ID_CHARS - 1] + "\u2026"


def _identifier(data: dict[str, Any], key: str) -> str:
    """A non-empty string of at most ``MAX_ID_CHARS`` characters with no control character and no
    whitespace at either end: the one rule for every id a call, a credit or a limit names (an id
    that differs from a call's only by a space or a control character would fund an account no
    call can reach)."""
    value = _require(data, key, str)
    if not value:
        raise RequestMetaError(f"{key}: empty")
    if len(value) > MAX_ID_CHARS:
        raise RequestMetaError(f"{key}: longer than {MAX_ID_CHARS} characters")
    if _NOT_IN_IDS.search(value):
        raise RequestMetaError(f"{key}: holds a control character or an unpaired surrogate")
    if value != value.strip():
        raise RequestMetaError(f"{key}: starts or ends with whitespace")
    return value


def check_identifier(value: str, key: str) -> str:
    """``value`` if it is a usable identifier (as ``request_id`` in the metadata), else raise
    ``RequestMetaError``: the notifications' request ids follow the same rule."""
    return _identifier({key: value}, key)


# The longest free-text note the metadata may carry (an anomaly's detail).
MAX_NOTE_CHARS = 500


def _note(data: dict[str, Any], key: str) -> str | None:
    """An optional free-text note (``account_fallback``): a string, control characters and
    unpaired surrogates replaced by U+FFFD (it is shown, never parsed), cut to
    ``MAX_NOTE_CHARS``; anything else is refused."""
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise RequestMetaError(f"{key}: expected a string")
    return _NOT_IN_IDS.sub("\ufffd", value)[:MAX_NOTE_CHARS] or None


AUTHORIZATION_VALUES = ("unchecked",)


def _authorization(data: dict[str, Any]) -> bool:
    """The entry's ``authorization``: absent (the call was checked, or the gateway does not
    authorize) or ``unchecked``; anything else is refused."""
    value = data.get("authorization")
    if value is None:
        return False
    if value not in AUTHORIZATION_VALUES:
        raise RequestMetaError('authorization: expected "unchecked" or nothing')
    return True


def _created_at(data: dict[str, Any]) -> datetime:
    created_at = parse_rfc3339(data.get("created_at"))
    if not EARLIEST_CREATED_AT <= created_at < LATEST_CREATED_AT:
        raise RequestMetaError(
            f"created_at: outside {EARLIEST_CREATED_AT.year} to {LATEST_CREATED_AT.year - 1}"
        )
    return created_at


def _temperature(data: dict[str, Any]) -> float | None:
    value = data.get("temperature")
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise RequestMetaError("temperature: expected a number")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        finite = False
    if not finite:
        raise RequestMetaError("temperature: must be finite")
    return value


def _web_search(data: dict[str, Any]) -> str | None:
    """The search context size of ``web_search_options`` (OpenAI's Chat Completions parameter)."""
    options = data.get("web_search_options")
    if options is None:
        return None
    if not isinstance(options, dict):
        raise RequestMetaError("web_search_options: expected an object")
    size = options.get("search_context_size")
    if size is None:
        return "medium"
    if size not in ("low", "medium", "high"):
        raise RequestMetaError("web_search_options.search_context_size: low, medium or high")
    return str(size)


_IMAGE_SIZE = re.compile(r"auto|[1-9][0-9]{1,4}x[1-9][0-9]{1,4}")
_IMAGE_QUALITY = re.compile(r"[a-z0-9_-]{1,16}")


def _image(data: dict[str, Any]) -> tuple[str | None, str | None]:
    """The ``image`` entry field: the size (``1024x1792``, ``auto``) and quality (a lower-case
    name) an image generation request asked for, each optional."""
    image = data.get("image")
    if image is None:
        return None, None
    if not isinstance(image, dict):
        raise RequestMetaError("image: expected an object of size and quality")
    size, quality = image.get("size"), image.get("quality")
    if size is not None and (not isinstance(size, str) or not _IMAGE_SIZE.fullmatch(size)):
        raise RequestMetaError("image.size: WIDTHxHEIGHT (1024x1024) or auto")
    if quality is not None and (
        not isinstance(quality, str) or not _IMAGE_QUALITY.fullmatch(quality)
    ):
        raise RequestMetaError("image.quality: a lower-case name (standard, hd, low, high)")
    return size, quality


def request_from_dict(data: object, entry_id: bytes | None = None) -> RequestMeta:
    """Validate a decoded metadata object; raises ``RequestMetaError`` naming the bad field.

    ``entry_id``: the id of the stream entry it was read from, which sets ``digest``."""
    if not isinstance(data, dict):
        raise RequestMetaError(f"request metadata must be a JSON object, not {type(data).__name__}")
    request_id = _identifier(data, "request_id")
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
    if reserved > MAX_RESERVED_MICROS:
        raise RequestMetaError(f"reserved_micros: more than {MAX_RESERVED_MICROS}")
    messages = data.get("messages") or []
    tools = data.get("tools") or []
    if not isinstance(messages, list):
        raise RequestMetaError("messages: expected a list")
    if not isinstance(tools, list):
        raise RequestMetaError("tools: expected a list")
    n = _optional_int(data, "n", 1, MAX_CHOICES)
    key = data.get("idempotency_key")
    if key is not None and not isinstance(key, str):
        raise RequestMetaError("idempotency_key: expected a string")
    provider = data.get("provider")
    if provider is not None:
        provider = _identifier(data, "provider")
        if len(provider) > MAX_PROVIDER_CHARS:
            raise RequestMetaError(f"provider: longer than {MAX_PROVIDER_CHARS} characters")
    upstream_key = data.get("upstream_key")
    if upstream_key is not None:
        upstream_key = upstream_key_label(upstream_key)
    account_id = _identifier(data, "account_id")
    model = _identifier(data, "model")
    created_at = _created_at(data)
    image = _image(data)
    endpoint = data.get("endpoint", CHAT)
    if endpoint not in ENDPOINTS:
        raise RequestMetaError(f"endpoint: one of {', '.join(ENDPOINTS)}, not {endpoint!r:.60}")
    client_request_id = None
    if data.get("client_request_id") is not None:
        client_request_id = _identifier(data, "client_request_id")
    return RequestMeta(
        request_id=request_id,
        account_id=account_id,
        model=model,
        stream=stream,
        include_usage=include_usage,
        reserved_micros=Micros(reserved),
        created_at=created_at,
        messages=tuple(messages),
        tools=tuple(tools),
        n=1 if n is None else n,
        max_tokens=_optional_int(data, "max_tokens", 0),
        temperature=_temperature(data),
        seed=_optional_int(data, "seed"),
        idempotency_key=key,
        provider=provider,
        upstream_key=upstream_key,
        account_fallback=_note(data, "account_fallback"),
        admitted_unchecked=_authorization(data),
        web_search=_web_search(data),
        prompt_estimate=_optional_int(data, "prompt_estimate", 0, MAX_PROMPT_ESTIMATE),
        omitted_messages=_omitted_messages(data),
        digest=None
        if entry_id is None
        else _digest(entry_id, request_id, account_id, model, stream, reserved, created_at),
        client_request_id=client_request_id,
        endpoint=endpoint,
        image_size=image[0],
        image_quality=image[1],
    )


def parse_request(raw: bytes | str, entry_id: bytes | None = None) -> RequestMeta:
    """Decode and validate request metadata JSON (``entry_id``: see ``request_from_dict``)."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RequestMetaError(f"request metadata is not JSON: {exc}") from None
    return request_from_dict(data, entry_id)
