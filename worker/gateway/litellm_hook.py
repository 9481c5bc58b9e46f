"""The LiteLLM proxy hook: every call the proxy serves to a billed endpoint (chat completions,
legacy completions, embeddings, the Responses API, Anthropic's Messages API: ``routes``), published
to the billing contract.

A LiteLLM proxy names it in its ``config.yaml`` (docs/gateway.md, *LiteLLM proxy*)::

    litellm_settings:
      callbacks: worker.gateway.litellm_hook.billing_hook

It is a ``CustomLogger`` whose proxy hooks write docs/events.md's entries through ``make_publisher()``:

* ``async_pre_call_hook`` gives the call its request id (``metadata["billing_request_id"]``) and
  remembers who pays (``BILLING_LITELLM_ACCOUNT``: the key's team, else its user, else the key's
  hash; ``end_user`` first to bill LiteLLM's customers, the request's ``user``). The first source
  the call has is checked by the worker's own identifier rule (``worker.core.request.check_identifier``):
  an id the worker would refuse (a control character, more than 200 characters, a space at either
  end) is billed to the fallback account instead (``fallback_account``, ``litellm-anonymous`` by
  default, also the account of a call no source names), the request entry's ``account_fallback``
  saying why (never the id: a client may send anything).
  It then prices the hold off the event loop (``holds.price_hold``, for every deployment of the
  model name the client named: the router has not chosen one yet). With spend control on
  (``BILLING_AUTHORIZE``), a deployment without a price refuses the call (HTTP 400
  ``model_not_priced``) unless ``BILLING_AUTH_UNPRICED_HOLD_USD`` sets a ceiling, the output limit
  held is written into ``data`` when the request states none (``max_tokens``, which LiteLLM maps
  per provider), and the hold is taken from the authorization store (``authorize``), recording
  when (``billing_admitted_at``: the call's ``created_at``, its budget period); a call that does
  not fit is refused as LiteLLM refuses its own budgets, a
  ``ProxyException`` of type ``budget_exceeded``, here with status 402 (the body's ``code``, as
  LiteLLM writes it) and, in ``provider_specific_fields``, ``billing_code`` (``insufficient_funds``,
  ``budget_exceeded`` or ``unknown_account``), the account and the amounts. The hold is priced at
  the most any deployment of the model name could cost (the router has not chosen one yet), and
  the hold taken is the one published. ``async_post_call_response_headers_hook`` adds ``X-Billing-Request-Id``.
* ``async_post_call_streaming_iterator_hook`` wraps the stream the proxy sends on: ``open`` with the
  first chunk (whose ``model`` is the deployment's model, the one priced), one ``frame`` per chunk,
  serialized as the proxy serializes it, then ``data: [DONE]`` and ``close done``. A client that
  goes away closes the generator: ``close client_disconnect``. An upstream failure mid-stream is the
  error event the proxy sends (``data: {"error": …}``) and ``close upstream_error``.
* ``async_post_call_success_hook`` (non-streamed): ``open``, ``response 200 <body>``, ``close done``.
* ``async_post_call_failure_hook``: a call that failed before any chunk or body is ``open``,
  ``response <status> {"error": …}``, ``close upstream_error`` (the worker voids it); one already
  closed by the stream wrapper is left alone.

The endpoints beside chat (docs/gateway.md, *The endpoints beside chat*): each request is read as
the chat request the hold and the entry read (``endpoint_requests.endpoint_request``, the
middleware's own mapping; a background response refused with 400), the entry names its
``endpoint`` (and ``prompt_estimate`` for token ids), a held limit goes into the endpoint's own
field (``EndpointRequest.limit_field``), and the hook's keys live in ``litellm_metadata`` where
LiteLLM keeps one (``hook_metadata``: there ``metadata`` is the client's, sent upstream). What is
published is what the client is answered, in the endpoint's shape, which its reader reads: the
Responses events and ``TextCompletionResponse`` chunks as ``data: <JSON>``, a Messages stream's
bytes cut into whole events (no ``[DONE]``: it ends with ``message_stop``), each body's JSON (a
Messages body is a dict, ``_hidden_params`` left out). A legacy completion's stream gets usage
asked of the upstream (LiteLLM asks for chat only, and sends zeros otherwise) and the usage-only
chunk kept from a client that did not ask.

The ``request`` entry (``_meta``) is published through ``request_budget.entry_body``, as the ASGI
middleware's is: image, audio and file parts as placeholders (their size, not their bytes), the
whole within ``REQUEST_BUDGET_BYTES``, so a vision call with a large image is billed like any other;
an optional field outside the contract (``n`` of 0, a negative ``max_tokens``…) is left out rather
than make the worker refuse the call.

What differs from the bytes the client receives, on purpose: LiteLLM asks the upstream for usage on
every streamed call and strips that usage chunk when the client did not ask for it; the hook runs
before the strip, so the worker bills the upstream's counts (``include_usage`` is recorded as the
upstream request had it). The proxy later rewrites each chunk's ``model`` to the name the client
asked for; the frames keep the deployment's.

Publishing never blocks the proxy's event loop and never fails the user's call. The publisher is a
``worker.gateway.tee.Tee`` (built by ``make_publisher``): each hook queues its commands in memory
and the tee's thread writes them to Redis, spooling to ``BILLING_SPOOL_DIR`` while Redis is away
and replaying the spool when it is back. A publisher error is logged with the request id (never a
prompt or a completion) and the call goes on. The hold is priced by the middleware's own rule
(``worker.gateway.reservation.reserve``).

Start-up: loading this module checks ``BILLING_SPOOL_DIR`` (``check_spool_dir``: a file made,
written, synced and deleted there) and raises ``SpoolUnwritable`` when it cannot be written, which
stops the proxy as it loads its config: a proxy without its spool bills nothing once Redis is
away. (The tee itself only logs it and reports ``billing_gateway_spool_writable`` 0: it writes to
Redis while it can, and makes its spool file only when it must spool.)

Lifecycle: the tee is built at the first call a proxy process publishes (so each worker process of
a forking server gets its own, and its own spool file if it must spool) and stopped at interpreter
exit through ``atexit``: LiteLLM 1.108.7 gives a ``CustomLogger`` no shutdown hook (``proxy_shutdown_event``
flushes its own loggers only). ``stop`` flushes for up to five seconds; what did not reach Redis
stays in the spool file, which the next start (or any tee sharing the directory) replays.
``atexit`` runs when the interpreter exits (Ctrl-C / SIGINT: the proxy exits 0), but not on
SIGTERM: uvicorn 0.54 drains the open requests and runs the app's shutdown, then re-raises the
signal with its default action, which ends the process without ``atexit`` (seen with 1.108.7).
The tee thread runs through that drain, so only batches queued in the last moments (the linger,
``BILLING_TEE_LINGER_MS``, and a round trip) can be lost; what was spooled is on disk, and the
file left behind is adopted by the next tee in the directory.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import threading
import uuid
from collections.abc import AsyncGenerator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from litellm.integrations.custom_logger import CustomLogger
from litellm.proxy._types import ProxyException

from worker.config import Settings
from worker.contract.authorization import AuthorizationStore
from worker.contract.keys import Keys
from worker.contract.publisher import Publisher, admission_fields
from worker.core.errors import RequestMetaError
from worker.core.prices import PriceBook, load_price_book
from worker.core.request import check_identifier, request_from_dict
from worker.gateway import client_keys, unbilled
from worker.gateway.authorize import Admission, Authorizer
from worker.gateway.endpoint_requests import CHAT, EndpointRequest, endpoint_request
from worker.gateway.events import EventSplitter
from worker.gateway.holds import price_hold, unpriced_hold
from worker.gateway.metadata import search_options, usable_account
from worker.gateway.refusals import Refusal
from worker.gateway.request_budget import entry_body, slim_messages
from worker.gateway.reservation import NOT_PROMPT, Unpriced, reserve
from worker.gateway.routes import Route, call_type_route, not_billed
from worker.gateway.spool import probe
from worker.gateway.tee import Tee
from worker.gateway.usage_option import usage_options

log = logging.getLogger(__name__)

REQUEST_ID_KEY = "billing_request_id"
FALLBACK_KEY = "billing_account_fallback"  # why the call is billed to the fallback account
HOLD_KEY = "billing_reserved_micros"  # the hold the authorization took (spend control)
UNCHECKED_KEY = "billing_unchecked"  # served without a spend check (Redis away, fail open)
ADMISSION_KEY = "billing_admission"  # the call's admission record: its entry's ``at`` and ``body``
IN_FLIGHT_KEY = "billing_in_flight"  # an idempotency key's marker, cleared when the call ends
ADMITTED_KEY = "billing_admitted_at"  # when the hold was taken: the call's created_at (its period)
ENDPOINT_KEY = "billing_endpoint"  # the call's endpoint (``routes``'s kind), which picks its reader
USAGE_ASKED_KEY = "billing_usage_asked"  # the hook asked the upstream for a stream's usage
# The field a held output limit is written into: every LiteLLM provider config takes
# ``max_tokens`` (some only it), and LiteLLM sends it as ``max_completion_tokens`` to OpenAI's
# reasoning models, which refuse ``max_tokens`` (o-series, gpt-5: LiteLLM 1.108.7).
WRITTEN_LIMIT = "max_tokens"
LIMIT_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens", "n")
# The fields of a request that LiteLLM's ``data`` holds besides the proxy's own (``client_body``).
PROMPT_FIELDS = frozenset(
    {"messages", "tools", "functions", "tool_choice", "function_call", "response_format",
     "prediction"}
)  # fmt: skip
CLIENT_ID_KEY = "billing_client_request_id"  # the client's X-Request-Id, its reference only
UNBILLED_ID_KEY = "billing_unbilled_id"  # the id a call served unbilled was recorded under
DONE_EVENT = b"data: [DONE]\n\n"
# The endpoints whose stream the proxy ends with ``data: [DONE]`` (its OpenAI-shaped generator);
# an Anthropic Messages stream ends with its own ``message_stop``.
DONE_ENDPOINTS = frozenset({CHAT, "completions", "responses"})
# The keys of a request body (``proxy_server_request.body``) that are the proxy's, not the prompt's.
PROXY_KEYS = frozenset({"metadata", "litellm_metadata", "proxy_server_request", "secret_fields"})
STOP_TIMEOUT_SECONDS = 5.0


def make_publisher() -> Tee:
    """The one place the hook's publisher is built: a ``Tee`` (``REDIS_URL``, ``BILLING_PREFIX``,
    ``BILLING_PARTITIONS``, the stream TTL, its spool in ``BILLING_SPOOL_DIR``, its linger
    ``BILLING_TEE_LINGER_MS``)."""
    settings = Settings.from_env()
    return Tee.from_url(
        settings.redis_url,
        Keys(settings.prefix, settings.partitions),
        ttl_seconds=settings.stream_ttl_seconds,
        spool_dir=settings.spool_dir,
        linger_seconds=settings.tee_linger_ms / 1000,
    )


class SpoolUnwritable(RuntimeError):
    """``BILLING_SPOOL_DIR`` cannot be written: the proxy must not start (``check_spool_dir``)."""


def check_spool_dir() -> None:
    """At start-up: raise ``SpoolUnwritable`` unless ``BILLING_SPOOL_DIR`` (made if missing) can
    be written. The proxy loads this module from its config, so it stops there, loudly."""
    spool_dir = Settings.from_env().spool_dir
    try:
        probe(Path(spool_dir))
    except OSError as exc:
        raise SpoolUnwritable(
            f"BILLING_SPOOL_DIR={spool_dir!r} cannot be written ({exc}): the billing hook would"
            " lose every call made while Redis is away. Make it writable, or set"
            " BILLING_SPOOL_DIR to a directory that is."
        ) from exc


def now_rfc3339() -> str:
    return rfc3339_of(datetime.now(UTC))


def rfc3339_of(at: datetime) -> str:
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def admitted_at(metadata: dict[str, Any]) -> str | None:
    """When the call was admitted, as its ``created_at``: the period its budgets count it in is
    the one it was admitted in."""
    raw = metadata.get(ADMITTED_KEY)
    try:
        return rfc3339_of(datetime.fromisoformat(raw)) if isinstance(raw, str) else None
    except ValueError:
        return None


ACCOUNT_SOURCES = ("end_user", "team", "user", "key")
# Where each source's value comes from, as the reason for a fallback names it.
SOURCE_FIELDS = {"end_user": "user", "team": "team_id", "user": "user_id", "key": "token"}
# The account of a call whose payer no source names, or names with an id the worker would refuse.
FALLBACK_ACCOUNT = "litellm-anonymous"
# The entry's optional fields, left out when outside the contract (the worker would refuse them).
OPTIONAL_FIELDS = ("n", "max_tokens", "temperature", "seed", "provider")


def account_sources(raw: str | None) -> tuple[str, ...]:
    """``BILLING_LITELLM_ACCOUNT``: where the payer comes from, first found wins (default
    ``team,user,key``); ``end_user`` is the request's ``user`` field, LiteLLM's customer."""
    names = tuple(part.strip() for part in (raw or "team,user,key").split(",") if part.strip())
    unknown = [name for name in names if name not in ACCOUNT_SOURCES]
    if unknown or not names:
        raise ValueError(
            f"BILLING_LITELLM_ACCOUNT: expected some of {ACCOUNT_SOURCES}, got {raw!r}"
        )
    return names


def account_of(
    user_api_key_dict: Any,
    data: dict[str, Any],
    sources: tuple[str, ...],
    fallback: str = FALLBACK_ACCOUNT,
) -> tuple[str, str | None]:
    """Who pays, and why not the one named: the first of ``sources`` the call has (absent or
    empty: the next), if the worker takes it as an account id; else ``fallback`` and the reason
    (``metadata.usable_account``: the worker's rule). ``fallback`` and no reason when no source
    names anyone."""
    values = {
        "end_user": data.get("user"),
        "team": getattr(user_api_key_dict, "team_id", None),
        "user": getattr(user_api_key_dict, "user_id", None),
        "key": getattr(user_api_key_dict, "token", None),
    }
    for source in sources:
        value = values[source]
        if value is None or value == "":
            continue
        return usable_account(value, fallback, SOURCE_FIELDS[source])
    return fallback, None


def client_request_id(data: dict[str, Any]) -> str | None:
    """The client's ``X-Request-Id`` (as LiteLLM keeps the request's headers), its own reference
    for the call; never the billing id. One the worker would refuse as an id is refused with 400:
    the client can fix what it sends."""
    request = data.get("proxy_server_request")
    headers = request.get("headers") if isinstance(request, dict) else None
    if not isinstance(headers, dict):
        return None
    value = next((v for k, v in headers.items() if str(k).lower() == "x-request-id"), None)
    if not value:
        return None
    try:
        return check_identifier(str(value), "X-Request-Id")
    except RequestMetaError as exc:
        raise ProxyException(
            message=f"Invalid request: {exc}", type="invalid_request_error",
            param="X-Request-Id", code=400, openai_code="invalid",
        ) from None  # fmt: skip


def within_contract(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` without the optional fields the worker would refuse (``OPTIONAL_FIELDS``: the call
    is billed without them rather than refused whole). Changes ``meta``."""
    for _ in OPTIONAL_FIELDS:
        try:
            request_from_dict(meta)
        except RequestMetaError as exc:
            field = str(exc).split(":", 1)[0]
            if field in OPTIONAL_FIELDS and field in meta:
                del meta[field]
                continue
        break
    return meta


def _optional(body: dict[str, Any], key: str, kind: type) -> Any:
    value = body.get(key)
    if isinstance(value, kind) and not isinstance(value, bool):
        return value
    return None


def _chunk_event(chunk: Any) -> bytes:
    """One chunk as the proxy writes it: ``data: <JSON without unset or None fields>``."""
    if hasattr(chunk, "model_dump_json"):
        text = chunk.model_dump_json(exclude_none=True, exclude_unset=True)
    elif isinstance(chunk, bytes | str):
        raw = chunk.encode() if isinstance(chunk, str) else chunk
        return raw if raw.startswith(b"data:") else b"data: " + raw + b"\n\n"
    else:
        text = orjson.dumps(chunk).decode()
    return b"data: " + text.encode() + b"\n\n"


def _error_body(exc: BaseException) -> tuple[int, dict[str, Any]]:
    """The status and ``{"error": …}`` body the proxy answers a failed call with."""
    status = getattr(exc, "status_code", None)
    if not isinstance(status, int) or not 100 <= status <= 599:
        status = 500
    error = {
        "message": str(getattr(exc, "message", None) or exc)[:2000],
        "type": str(getattr(exc, "type", None) or "None"),
        "param": str(getattr(exc, "param", None) or "None"),
        "code": str(status),
    }
    return status, {"error": error}


def _hidden(obj: Any, key: str) -> Any:
    hidden = obj.get("_hidden_params") if isinstance(obj, dict) else None
    hidden = getattr(obj, "_hidden_params", None) if hidden is None else hidden
    return hidden.get(key) if isinstance(hidden, dict) else None


def hook_metadata(data: dict[str, Any], *, create: bool = False) -> dict[str, Any] | None:
    """The dict the hook keeps its ``billing_`` keys in: LiteLLM's ``litellm_metadata`` where the
    route keeps one (``/v1/responses``, ``/v1/messages``…: there ``metadata`` is the client's own
    field, forwarded to the provider), else ``metadata``; made when ``create`` and neither is."""
    for field in client_keys.METADATA_FIELDS[::-1]:
        found = data.get(field)
        if isinstance(found, dict):
            return found
    if not create:
        return None
    data["metadata"] = {}
    return data["metadata"]


def endpoint_of(data: dict[str, Any]) -> str:
    """The endpoint the pre-call hook recorded for the call (chat completions when none)."""
    metadata = hook_metadata(data)
    kind = metadata.get(ENDPOINT_KEY) if metadata is not None else None
    return kind if isinstance(kind, str) else CHAT


def _body_json(response: Any) -> bytes | None:
    """A non-streamed answer as the proxy sends it: a model's JSON without None fields, or a dict
    (the Messages API's) without LiteLLM's ``_hidden_params``; None for anything else."""
    if hasattr(response, "model_dump_json"):
        return response.model_dump_json(exclude_none=True).encode()
    if isinstance(response, dict):
        shown = {k: v for k, v in response.items() if k != "_hidden_params"}
        return orjson.dumps(shown, default=_jsonable)
    return None


def _jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(exclude_none=True)
    raise TypeError(type(value).__name__)


def _served_model(chunk: Any) -> str | None:
    """The model an answer (or its first stream event) names: a chunk's ``model``, a Responses
    event's ``response.model``, a Messages dict's ``model``."""
    model = chunk.get("model") if isinstance(chunk, dict) else getattr(chunk, "model", None)
    if model is None:
        inner = getattr(chunk, "response", None)
        model = getattr(inner, "model", None) if inner is not None else None
    return model if isinstance(model, str) and model else None


def _usage_only(chunk: Any) -> bool:
    """A legacy-completion chunk that carries usage and nothing else (no text, no finish): the
    chunk a usage the hook asked for arrives in."""
    if getattr(chunk, "usage", None) is None:
        return False
    for choice in getattr(chunk, "choices", None) or []:
        get = choice.get if isinstance(choice, dict) else lambda k, c=choice: getattr(c, k, None)
        if get("text") or get("finish_reason") is not None:
            return False
    return True


def _error_event(kind: str, body: dict[str, Any]) -> bytes:
    """A mid-stream failure as the endpoint's stream carries it: ``data: {"error": …}`` on the
    OpenAI-shaped chat and completions streams, an ``error`` event on Responses and Messages."""
    if kind in (CHAT, "completions"):
        return b"data: " + orjson.dumps(body) + b"\n\n"
    event = {"type": "error", "error": body["error"]}
    return b"event: error\ndata: " + orjson.dumps(event) + b"\n\n"


class BillingHook(CustomLogger):
    """Publishes the proxy's chat completions; one instance serves every call of the proxy."""

    def __init__(
        self,
        publisher_factory: Callable[[], Publisher | Tee] = make_publisher,
        book: PriceBook | None = None,
        fallback_account: str = FALLBACK_ACCOUNT,
        authorizer: Authorizer | None = None,
    ) -> None:
        super().__init__()
        self.authorizer = authorizer
        self.fallback_account = check_identifier(fallback_account, "fallback_account")
        self._authorizer_made = authorizer is not None
        self._publisher_factory = publisher_factory
        self._publisher: Publisher | Tee | None = None
        self._publisher_pid = 0
        self._publisher_lock = threading.Lock()
        self._book = book
        self._accounts = account_sources(os.environ.get("BILLING_LITELLM_ACCOUNT"))
        self._pass_unbilled = unbilled.passes(Settings.from_env().unbilled_routes)
        # Streams the wrapper closed as upstream_error; the failure hook that follows drops them.
        self._closed: set[str] = set()
        # Calls admitted with an Idempotency-Key: their in-flight marker, cleared at their close.
        self._in_flight: dict[str, Admission] = {}

    @property
    def publisher(self) -> Publisher | Tee:
        """This process's publisher, built at first use (a forked child builds its own: the
        parent's tee thread does not survive a fork) and stopped at exit (``stop``)."""
        publisher, pid = self._publisher, os.getpid()
        if publisher is not None and self._publisher_pid == pid:
            return publisher
        with self._publisher_lock:
            if self._publisher is None or self._publisher_pid != pid:
                self._publisher = self._publisher_factory()
                self._publisher_pid = pid
                atexit.register(self.stop)
            return self._publisher

    def stop(self) -> None:
        """Flush and stop this process's tee (what cannot reach Redis stays in its spool)."""
        with self._publisher_lock:
            publisher, self._publisher = self._publisher, None
        mine = isinstance(publisher, Tee) and self._publisher_pid == os.getpid()
        if mine and not publisher.stop(STOP_TIMEOUT_SECONDS):  # type: ignore[union-attr]
            log.warning("billing: Redis unreachable at shutdown; the rest stays in the spool")

    def admitter(self) -> Authorizer:
        """Who writes each call's admission record: the spend-control ``authorizer``, else one
        on the publisher's Redis that admits without a spend check."""
        if self.authorizer is None or not self._authorizer_made:
            publisher = self.publisher
            store = AuthorizationStore(publisher.client, publisher.keys.prefix)
            self.authorizer = Authorizer(store, check_spend=False, keys=publisher.keys)
            self._authorizer_made = True
        return self.authorizer

    @property
    def book(self) -> PriceBook:
        if self._book is None:
            self._book = load_price_book(os.environ.get("BILLING_PRICE_BOOK") or None)
        return self._book

    # -- helpers -------------------------------------------------------------------------------

    def _publish(self, rid: str, what: str, action: Callable[[Publisher | Tee], None]) -> None:
        try:
            action(self.publisher)
        except Exception as exc:  # publishing must never fail the user's call
            log.error("billing: %s of %s not published: %s", what, rid, type(exc).__name__)

    def _meta(
        self, data: dict[str, Any], rid: str, model: str, *, stream: bool, provider: str | None
    ) -> dict[str, Any]:
        at = datetime.now(UTC)
        view = request_view(data)
        body = view.body
        include_usage = True
        if stream and view.usage_by_option:  # the other endpoints' streams always carry usage
            options = data.get("stream_options")
            include_usage = isinstance(options, dict) and options.get("include_usage") is True
        metadata = hook_metadata(data) or {}
        messages = slim_messages(body.get("messages") or [])
        # Priced for the deployment's model (the one the worker prices), not the alias asked, and
        # from the messages as published (an image as its placeholder, not its bytes).
        priced = {**body, "model": model, "messages": messages}
        held = metadata.get(HOLD_KEY)
        meta: dict[str, Any] = {
            "request_id": rid,
            "account_id": metadata.get("billing_account_id") or self.fallback_account,
            "account_fallback": metadata.get(FALLBACK_KEY),
            "authorization": "unchecked" if metadata.get(UNCHECKED_KEY) else None,
            "client_request_id": metadata.get(CLIENT_ID_KEY),
            "model": model,
            "stream": stream,
            "include_usage": include_usage,
            # The hold the admission recorded (what the ledger holds: ``hold_of_routes`` priced
            # every deployment the router could pick); where it is 0 (a model name the book does
            # not price, without spend control), the price of the deployment that served.
            "reserved_micros": held
            if isinstance(held, int) and held > 0
            else int(reserve(self.book, priced, at, provider=provider)),
            "created_at": admitted_at(metadata) or now_rfc3339(),
            "messages": messages,
            "tools": body.get("tools") or body.get("functions") or [],
            "n": _optional(body, "n", int),
            "max_tokens": _limit(body),
            "temperature": _optional(data, "temperature", (int, float)),
            "seed": _optional(data, "seed", int),
            "provider": provider,
            # a search its usage will not count (``worker.core.searches``)
            "web_search_options": search_options(data.get("web_search_options")),
            "endpoint": None if view.endpoint == CHAT else view.endpoint,
            "prompt_estimate": view.prompt_tokens,
        }
        return within_contract({k: v for k, v in meta.items() if v is not None})

    def _bare_meta(
        self, data: dict[str, Any], rid: str, model: str, *, stream: bool
    ) -> dict[str, Any]:
        """The entry's money fields alone, for a request ``_meta`` could not read."""
        metadata = hook_metadata(data)
        account = metadata.get("billing_account_id") if metadata is not None else None
        bare: dict[str, Any] = {
            "request_id": rid,
            "account_id": account if isinstance(account, str) else self.fallback_account,
            "model": model,
            "stream": stream,
            "include_usage": True,
            "reserved_micros": 0,
            "created_at": now_rfc3339(),
            "messages": [],
            "omitted_messages": True,
        }
        kind = endpoint_of(data)
        if kind != CHAT:
            bare["endpoint"] = kind
        return bare

    def _open(
        self, data: dict[str, Any], rid: str, model: str, *, stream: bool, provider: str | None
    ) -> None:
        def open_call(publisher: Publisher | Tee) -> None:
            try:
                meta = self._meta(data, rid, model, stream=stream, provider=provider)
            except Exception as exc:  # the call is published all the same: held at 0, no prompt
                log.error("billing: the request of %s not read: %s", rid, type(exc).__name__)
                meta = self._bare_meta(data, rid, model, stream=stream)
            admission = _admission_fields(data)
            if admission is None:
                publisher.open(entry_body(meta), rid)
            else:
                publisher.open(entry_body(meta), rid, admission=admission)

        self._publish(rid, "open", open_call)

    def _close(self, rid: str, reason: str) -> None:
        if reason == "upstream_error":  # the proxy calls the failure hook next: it must not repeat
            self._closed.add(rid)
        self._publish(rid, "close", lambda p: p.close(rid, reason))
        admission = self._in_flight.pop(rid, None)
        if admission is not None and self.authorizer is not None:
            # The call ended: its Idempotency-Key may serve a new call (never awaited here; the
            # marker expires by itself should this not run).
            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop().create_task(self.authorizer.finish_async(admission, rid))

    @staticmethod
    def _request_id(data: dict[str, Any]) -> str | None:
        metadata = hook_metadata(data)
        rid = metadata.get(REQUEST_ID_KEY) if metadata is not None else None
        return rid if isinstance(rid, str) else None

    # -- LiteLLM proxy hooks -------------------------------------------------------------------

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: Any
    ) -> dict[str, Any]:
        # Every call type, first: only the hook writes ``billing_`` keys (``client_keys``).
        removed = client_keys.strip(data)
        if removed:
            log.warning("billing: client-supplied %s stripped", ", ".join(removed[:10]))
        route = call_type_route(call_type)
        if not route.billed:
            self._not_billed(user_api_key_dict, data, call_type, route)
            return data
        kind = route.endpoint or CHAT
        view = endpoint_request(kind, client_body(data, kind))
        if isinstance(view, Refusal):  # a request no record could bill (a background response)
            raise_refusal(view, None)
        metadata = hook_metadata(data, create=True)
        rid = f"req_litellm_{uuid.uuid4().hex}"
        metadata[REQUEST_ID_KEY] = rid
        metadata[ENDPOINT_KEY] = kind
        reference = client_request_id(data)
        if reference is not None:
            metadata[CLIENT_ID_KEY] = reference
        account, problem = account_of(
            user_api_key_dict, data, self._accounts, self.fallback_account
        )
        metadata["billing_account_id"] = account
        if problem is not None:  # the reason only: the id may be anything a client sent
            metadata[FALLBACK_KEY] = problem
            log.warning("billing: %s billed to %s: %s", rid, account, problem)
        await self._admit(self.admitter(), data, metadata, rid, account, view)
        if kind != CHAT and view.usage_by_option:
            # A legacy completion's stream: LiteLLM asks usage of the upstream for chat only, and
            # without it sends a usage of zeros on every chunk; the hook asks, and keeps the
            # usage-only chunk from a client that did not (the stream wrapper).
            options = usage_options(data)
            if options is not None:
                data["stream_options"] = options
                metadata[USAGE_ASKED_KEY] = True
        return data

    def _not_billed(
        self, user_api_key_dict: Any, data: dict[str, Any], call_type: Any, route: Route
    ) -> None:
        """A call type the table does not bill: refused (``routes.not_billed``, raised as a
        ``ProxyException`` of status 403), or with ``BILLING_UNBILLED_ROUTES=pass`` served and
        published ``unbilled`` (``worker.gateway.unbilled``)."""
        name = str(getattr(call_type, "value", call_type))
        if self._pass_unbilled:
            account, _problem = account_of(
                user_api_key_dict, data, self._accounts, self.fallback_account
            )
            rid = f"req_litellm_{uuid.uuid4().hex}"
            unbilled.record(self.publisher, rid, f"call type {name}", account)
            for field in client_keys.METADATA_FIELDS:  # for X-Billing-Request-Id only
                metadata = data.get(field)
                if isinstance(metadata, dict):
                    metadata[UNBILLED_ID_KEY] = rid
            return
        refused = not_billed(f"call type {name}", route)
        raise ProxyException(
            message=refused.message,
            type=refused.type,
            param=None,
            code=refused.status,
            openai_code=refused.code,
            provider_specific_fields={"billing_code": refused.code},
        )

    async def _admit(
        self,
        authorizer: Authorizer,
        data: dict[str, Any],
        metadata: dict[str, Any],
        rid: str,
        account: str,
        view: EndpointRequest,
    ) -> None:
        """Write the call's admission record, with spend control taking its hold, or raise the
        refusal (see the module docstring). ``view``: the request as a chat request."""
        at = datetime.now(UTC)
        model = str(data.get("model") or "unknown")
        deployments = [name for name, _provider in deployment_routes(model)]
        amount, budget_model, counted = await self._hold(authorizer, data, rid, model, at, view)
        facts = within_contract(
            {
                "request_id": rid,
                "account_id": account,
                "account_fallback": metadata.get(FALLBACK_KEY),
                # The model the worker prices: the deployment's when the alias has one model.
                "model": deployments[0] if len(set(deployments)) == 1 else model,
                "stream": data.get("stream") is True,
                "include_usage": True,
                "reserved_micros": amount,
                "created_at": at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                "n": _optional(view.body, "n", int),
                "max_tokens": _limit({**view.body, **_written(data, view)}),
                "messages": [],
                "omitted_messages": True,
                "endpoint": None if view.endpoint == CHAT else view.endpoint,
                # the prompt's count, never its text: token ids exactly, else the hold's estimate
                "prompt_estimate": view.prompt_tokens
                if view.prompt_tokens is not None
                else counted,
            }
        )
        facts = {k: v for k, v in facts.items() if v is not None}
        admission = await authorizer.admit_async(
            account, rid, amount, at, budget_model, facts=facts,
            idempotency_key=idempotency_key(data),
            spool=getattr(self.publisher, "spool_now", None),
        )  # fmt: skip
        if admission.refusal is not None:
            raise_refusal(admission.refusal, rid)
        if admission.in_flight is not None:
            self._in_flight[rid] = admission
        metadata[HOLD_KEY] = amount
        metadata[ADMITTED_KEY] = at.isoformat()
        if admission.fields is not None:
            metadata[ADMISSION_KEY] = {
                "at": admission.fields["at"].decode(),
                "body": admission.fields["body"].decode(),
            }
        if admission.unchecked:
            metadata[UNCHECKED_KEY] = True

    async def _hold(
        self,
        authorizer: Authorizer,
        data: dict[str, Any],
        rid: str,
        model: str,
        at: datetime,
        view: EndpointRequest,
    ) -> tuple[int, str, int | None]:
        """The call's hold, the model its budgets apply to and the hold's estimate of the prompt
        (``Hold.prompt_estimate``: the admission's count of it), priced off the event loop
        (``holds.price_hold``) for every deployment the router may pick (it has not chosen one
        yet), from the request as the client sent it (``client_body``). With spend control, a
        deployment without a price refuses the call (HTTP 400 ``model_not_priced``, raised) unless
        ``unpriced_hold`` sets a ceiling, and a request that states no output limit gets the one
        held written into ``data`` (``WRITTEN_LIMIT``, which LiteLLM maps per provider; another
        endpoint's own field, ``view.limit_field``). ``view``: the request as a chat request
        (``endpoint_requests``)."""
        body = view.body
        priced = {**body, "messages": slim_messages(body.get("messages") or [])}
        try:
            found = await price_hold(
                self.book, priced, at, routes=deployment_routes(model) or [(model, None)],
                field=view.limit_field or WRITTEN_LIMIT, whole_context=view.whole_context,
            )  # fmt: skip
        except Exception as exc:  # a bug in pricing: unpriced, never held at 0 under spend control
            log.error("billing: the hold of %s not priced: %s", rid, type(exc).__name__)
            found = Unpriced(model, "its hold could not be priced", model)
        if isinstance(found, Unpriced):
            if not authorizer.check_spend:
                return 0, found.budget_model, None
            held = unpriced_hold(found, authorizer.unpriced_hold, rid)
            if isinstance(held, Refusal):
                raise_refusal(held, rid)
            return held[0], held[1], None
        if authorizer.check_spend and found.write is not None:
            data[found.write] = found.output_tokens
        return int(found.micros), found.model, found.prompt_estimate

    async def async_post_call_response_headers_hook(
        self,
        data: dict[str, Any],
        user_api_key_dict: Any,
        response: Any,
        request_headers: dict[str, str] | None = None,
        litellm_call_info: dict[str, object] | None = None,
    ) -> dict[str, str] | None:
        rid = self._request_id(data)
        if rid is None:
            found = [
                data[field].get(UNBILLED_ID_KEY)
                for field in client_keys.METADATA_FIELDS
                if isinstance(data.get(field), dict)
            ]
            rid = next((f for f in found if isinstance(f, str)), None)
        return None if rid is None else {"x-billing-request-id": rid}

    async def async_post_call_streaming_iterator_hook(
        self, user_api_key_dict: Any, response: Any, request_data: dict[str, Any]
    ) -> AsyncGenerator[Any, None]:
        rid = self._request_id(request_data)
        if rid is None:  # not a call this hook saw begin
            async for item in response:
                yield item
            return
        kind = endpoint_of(request_data)
        metadata = hook_metadata(request_data) or {}
        withhold = metadata.get(USAGE_ASKED_KEY) is True  # usage the client did not ask for
        splitter = EventSplitter()  # raw bytes (a Messages stream passed through): whole events
        opened = False
        model = str(request_data.get("model") or "unknown")
        try:
            async for chunk in response:
                if not opened:
                    alias = model
                    model = answer_model(kind, alias, _served_model(chunk))
                    provider = answer_provider(kind, alias, chunk)
                    self._open(request_data, rid, model, stream=True, provider=provider)
                    opened = True
                if isinstance(chunk, bytes | str) and kind != CHAT:
                    raw = chunk.encode() if isinstance(chunk, str) else chunk
                    events = splitter.feed(raw)
                else:
                    events = [_chunk_event(chunk)]
                if events:
                    self._publish(rid, "frame", lambda p, e=events: p.frames(rid, e))
                if withhold and _usage_only(chunk):
                    continue
                yield chunk
        except BaseException as exc:
            rest = splitter.rest()
            if rest:
                self._publish(rid, "frame", lambda p: p.frames(rid, [rest]))
            if isinstance(exc, Exception):
                if not opened:
                    self._open(request_data, rid, model, stream=True, provider=None)
                _, body = _error_body(exc)
                event = _error_event(kind, body)
                self._publish(rid, "frame", lambda p: p.frames(rid, [event]))
                self._close(rid, "upstream_error")
            else:  # GeneratorExit, CancelledError: the client went away
                if not opened:
                    self._open(request_data, rid, model, stream=True, provider=None)
                self._close(rid, "client_disconnect")
            raise
        if not opened:
            self._open(request_data, rid, model, stream=True, provider=None)
        ending = [splitter.rest()] if kind not in DONE_ENDPOINTS else [DONE_EVENT]
        ending = [event for event in ending if event]
        if ending:
            self._publish(rid, "frame", lambda p: p.frames(rid, ending))
        self._close(rid, "done")

    async def async_post_call_success_hook(
        self, data: dict[str, Any], user_api_key_dict: Any, response: Any
    ) -> Any:
        rid = self._request_id(data)
        if rid is None:
            return response
        kind = endpoint_of(data)
        if kind == CHAT and (
            data.get("stream") is True or not hasattr(response, "model_dump_json")
        ):
            return response
        try:
            body = _body_json(response)
        except Exception as exc:  # never fails the call: its body is published unreadable
            log.error("billing: the answer of %s not serialized: %s", rid, type(exc).__name__)
            body = b""
        if body is None:  # a stream object: the stream wrapper publishes it
            return response
        alias = str(data.get("model") or "unknown")
        model = answer_model(kind, alias, _served_model(response))
        provider = answer_provider(kind, alias, response)
        self._open(data, rid, model, stream=False, provider=provider)
        self._publish(rid, "response", lambda p: p.response(rid, 200, body))
        self._close(rid, "done")
        return response

    async def async_post_call_failure_hook(
        self,
        request_data: dict[str, Any],
        original_exception: Exception,
        user_api_key_dict: Any,
        traceback_str: str | None = None,
    ) -> None:
        rid = self._request_id(request_data)
        if rid is None or rid in self._closed:
            self._closed.discard(rid or "")
            return None
        status, body = _error_body(original_exception)
        model = str(request_data.get("model") or "unknown")
        payload = orjson.dumps(body)
        self._open(request_data, rid, model, stream=False, provider=None)
        self._publish(rid, "response", lambda p: p.response(rid, status, payload))
        self._close(rid, "upstream_error")
        return None


def idempotency_key(data: dict[str, Any]) -> str | None:
    """The request's ``Idempotency-Key`` header, as LiteLLM keeps the request's headers in
    ``proxy_server_request`` (1.108.7: credential headers redacted, this one kept)."""
    request = data.get("proxy_server_request")
    headers = request.get("headers") if isinstance(request, dict) else None
    if not isinstance(headers, dict):
        return None
    for name, value in headers.items():
        if isinstance(name, str) and name.lower() == "idempotency-key" and isinstance(value, str):
            return value or None
    return None


def _admission_fields(data: dict[str, Any]) -> dict[str, bytes] | None:
    """The admission entry's fields the pre-call hook kept in the call's metadata."""
    metadata = hook_metadata(data)
    kept = metadata.get(ADMISSION_KEY) if metadata is not None else None
    if not isinstance(kept, dict):
        return None
    at, body = kept.get("at"), kept.get("body")
    if not isinstance(at, str) or not isinstance(body, str):
        return None
    return admission_fields(body.encode(), int(at))


def raise_refusal(refused: Refusal, rid: str | None) -> None:
    """Raise ``refused`` as LiteLLM raises its own budget errors (see the module docstring);
    ``rid`` None: refused before the call had a request id."""
    error = orjson.loads(refused.body())["error"]
    spend = refused.status == 402
    raise ProxyException(
        message=refused.message,
        type="budget_exceeded" if spend else refused.type,
        param=refused.param,
        code=refused.status,
        headers={} if rid is None else {"x-billing-request-id": rid},
        openai_code=refused.code,
        # LiteLLM's error body keeps ``code`` for the status; the reason is here.
        provider_specific_fields={
            "billing_code": refused.code,
            **{k: v for k, v in error.items() if k not in ("message", "type", "param", "code")},
        },
    )


def client_body(data: dict[str, Any], endpoint: str = CHAT) -> dict[str, Any]:
    """The request to ``endpoint`` as the client sent it (the proxy's snapshot,
    ``proxy_server_request.body``), without the keys the proxy adds to ``data`` but with the limits
    the hook wrote; failing that, ``data``'s chat-completion fields (another endpoint's: ``data``
    without the proxy's keys)."""
    request = data.get("proxy_server_request")
    body = request.get("body") if isinstance(request, dict) else None
    if isinstance(body, dict) and (endpoint != CHAT or "messages" in body):
        limits = {k: data[k] for k in LIMIT_FIELDS if k in data}
        return {**{k: v for k, v in body.items() if k not in PROXY_KEYS}, **limits}
    if endpoint != CHAT:
        return {
            k: v for k, v in data.items() if k not in PROXY_KEYS and not k.startswith("litellm_")
        }
    return {k: v for k, v in data.items() if k in NOT_PROMPT or k in PROMPT_FIELDS}


def request_view(data: dict[str, Any]) -> EndpointRequest:
    """The call's request as the chat request the billing rules read (``endpoint_requests``),
    for the endpoint the pre-call hook recorded."""
    kind = endpoint_of(data)
    view = endpoint_request(kind, client_body(data, kind))
    if isinstance(view, Refusal):  # refused at admission; read as it came should it get here
        return EndpointRequest(kind, client_body(data, kind))
    return view


def _limit(body: dict[str, Any]) -> int | None:
    """The output limit a chat request states (``max_completion_tokens``, else ``max_tokens``)."""
    found = _optional(body, "max_completion_tokens", int)
    return found if found is not None else _optional(body, "max_tokens", int)


def _written(data: dict[str, Any], view: EndpointRequest) -> dict[str, Any]:
    """The limit the hold wrote into ``data``, as the chat view's ``max_tokens``."""
    field = view.limit_field
    if field is not None and field != "max_tokens" and isinstance(data.get(field), int):
        return {"max_tokens": data[field]}
    return {k: data[k] for k in ("max_tokens", "max_completion_tokens") if k in data}


def deployment_routes(alias: str) -> list[tuple[str, str | None]]:
    """The (model, provider) of each deployment the proxy's router may send a call for ``alias``
    to (``litellm_params.model``, its provider prefix apart); none outside a proxy or for a name
    it does not route."""
    try:
        from litellm.proxy.proxy_server import llm_router
    except Exception:  # not inside a proxy
        return []
    if llm_router is None:
        return []
    found = []
    for deployment in llm_router.get_model_list(model_name=alias) or []:
        params = deployment.get("litellm_params") or {}
        name = params.get("model") if isinstance(params, dict) else None
        if isinstance(name, str) and name:
            provider, _, bare = name.rpartition("/")
            # A wildcard deployment (``openai/*``) sends the name asked for.
            found.append((alias if "*" in bare else bare, provider or None))
    return found


def answer_model(endpoint: str, alias: str, served: str | None) -> str:
    """The model a call to ``alias`` is published with: a chat completion's, the model its answer
    names (the deployment's); another endpoint's, the deployment's when the alias has one model
    (as the admission names it), else the model the answer names, else the alias."""
    if endpoint == CHAT:
        return served or alias
    deployments = {name for name, _provider in deployment_routes(alias)}
    if len(deployments) == 1:
        return deployments.pop()
    return served or alias


def answer_provider(endpoint: str, alias: str, answer: Any) -> str | None:
    """The provider a call to ``alias`` is published with: the one LiteLLM names in the answer's
    hidden params; for another endpoint than chat, whose stream events carry none (a Responses
    event), the provider of the alias's deployments when they share one."""
    named = _hidden(answer, "custom_llm_provider")
    if named is not None or endpoint == CHAT:
        return named
    providers = {provider for _name, provider in deployment_routes(alias)}
    return providers.pop() if len(providers) == 1 else None


def make_authorizer() -> Authorizer:
    """The hook's admission (and, with ``BILLING_AUTHORIZE`` on, spend control)."""
    return Authorizer.from_settings(Settings.from_env())


check_spool_dir()  # the proxy's start-up: it loads this module from its config
billing_hook = BillingHook(authorizer=make_authorizer())
