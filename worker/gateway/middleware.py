"""The ASGI middleware: bill every chat completion an ASGI gateway (Starlette, FastAPI…) serves.

    app = BillingMiddleware(app, publisher=Tee.from_url(REDIS_URL, spool_dir="var/spool"),
                            hook=lambda scope, body: CallInfo(account_id=...))

Every other request (a free route, a route it does not bill, a WebSocket, ``lifespan``) is
served, refused or passed by ``serving``, as the one table ``routes`` says. For a
``POST …/chat/completions`` it reads the request body (and hands it on to the app unchanged),
then, in this order:

1. reads the body as the app will (``metadata.read_body``: orjson, else Python's ``json``, which
   also takes a lone surrogate escape, a byte order mark, UTF-16 and UTF-32) and answers the
   contract's refusals with an HTTP 400 in OpenAI's error shape (``refusals``), before the hook,
   the app or any write: a body that is not a JSON object at all, a stream (``stream`` read as
   the app reads it: truthy) with an ``Idempotency-Key`` or for a non-streamable model;
2. asks the gateway's ``hook`` whose call it is (``metadata``; None: no account, so not billed:
   refused with 403 as a route the gateway does not bill, or with ``unbilled_routes="pass"``
   served and recorded unbilled, ``serving``);
   an account id the worker would refuse is billed to ``fallback_account`` instead, the entry's
   ``account_fallback`` saying why;
3. checks the ``request`` entry as the worker will (a field outside the contract: HTTP 400),
   prices the hold off the event loop (``holds.price_hold``; with spend control, a model the book
   does not price is refused with HTTP 400 ``model_not_priced`` unless the authorizer's
   ``unpriced_hold`` is set, and a request that states no output limit gets the one held written
   into the body the app receives, ``holds.with_limit``), and writes the call's admission record
   (``authorize``: one Redis step, the spool when Redis cannot; with spend control on it takes the
   hold too): a call that does not fit is answered HTTP 402, one that cannot be recorded 503, a
   reused request id or an idempotency key in flight 409, and none of them reaches the app;
4. calls the app (every response carries the call's ``X-Billing-Request-Id``), watching what it sends. Once the response's first body bytes went to the client
   (so not on the time to first byte) it publishes the ``request`` entry beside the admission (within its byte budget, media replaced by
   placeholders: ``request_budget``) and ``open`` (``stream``
   is how the response came: an SSE body, or a plain one such as an upstream's JSON error, which
   is then recorded as the non-streamed response it was); each body chunk goes to the client
   first, then to the publisher: as it is to a publisher that cuts SSE events itself (the tee's
   ``chunk``, on its own thread), else as the SSE events it completes, cut here (``events``), byte
   for byte either way; a plain body is published whole as the ``response`` entry. To ``chunk``
   the chunks go in handfuls: the middleware holds a call's chunks until ``HOLD_BYTES`` of them,
   or ``HOLD_SECONDS`` after the first of them (looked at as each chunk comes), or the end, and
   hands them over joined: a hand-off per chunk (a lock each) cost the event loop more than the
   rest of the tee's calls;
5. publishes ``close`` with its reason: ``client_disconnect`` when the client went away
   (``http.disconnect``, or a send that failed), ``timeout`` when the app raised a timeout
   (``TimeoutError`` or an exception class named ``…Timeout…``, such as httpx's), ``upstream_error``
   when it raised anything else, ended without finishing its body, or answered an HTTP error
   (a stream with status ≥ 400, a plain body with status ≥ 500), else ``done``.

Every billed request that asks to stream without asking for usage is forwarded asking for it
(``usage_option``: the entry's ``include_usage`` is then true), and the usage-only chunk is taken
out of what the client receives, never out of what is published. A response's
``Content-Encoding`` is undone for the publisher only (``content_coding``).

A request that never got a response (the app raised first, the client left first) is published at
the end, as asked, with no frames: the worker keeps it unsettled ``incomplete``. A body that is not
a JSON object is refused (step 1): the middleware could not bill what the app might serve from it.
A publisher error is logged and never reaches the client: with the ``Tee`` there is none (it
queues or spools).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from worker.contract.authorization import AuthorizationStore
from worker.core.errors import RequestMetaError
from worker.core.prices import PriceBook, load_price_book
from worker.core.request import check_identifier
from worker.gateway.authorize import Admission, Authorizer
from worker.gateway.content_coding import ResponseDecoder
from worker.gateway.endpoint_requests import CHAT, ImageAsk, endpoint_request
from worker.gateway.events import EventSplitter
from worker.gateway.holds import price_hold, unpriced_hold, with_limit
from worker.gateway.metadata import (
    FALLBACK_ACCOUNT,
    MetadataHook,
    admission_facts,
    asks_to_stream,
    inflate,
    new_request_id,
    read_body,
    request_entry,
    usage_asked,
)
from worker.gateway.refusals import NOT_JSON, Refusal, refusal
from worker.gateway.request_budget import entry_body
from worker.gateway.reservation import DEFAULT_MAX_TOKENS, Unpriced
from worker.gateway.serving import (
    NO_ACCOUNT,
    REQUEST_ID_HEADER,
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    route_of,
    serve_unbilled,
)
from worker.gateway.unbilled import passes
from worker.gateway.usage_option import UsageChunkStrip, usage_options, with_usage_asked

log = logging.getLogger(__name__)


_SSE = b"text/event-stream"
# A call's streamed body chunks held before they go to the publisher's ``chunk`` (see the module's
# docstring): at most this many bytes, or this long after the first of them.
HOLD_BYTES = 16 << 10
HOLD_SECONDS = 0.05
_monotonic = time.monotonic


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def close_reason_of(exc: BaseException) -> str:
    """``timeout`` for a timeout the app raised, else ``upstream_error``."""
    if isinstance(exc, TimeoutError) or "Timeout" in type(exc).__name__:
        return "timeout"
    return "upstream_error"


_BODY_HEADERS = (b"content-length", b"content-encoding")


def _forwarded_scope(scope: Scope, length: int) -> Scope:
    """``scope`` for a request body the middleware rewrote: plain (not encoded), ``length``
    bytes."""
    headers = [(k, v) for k, v in scope.get("headers") or () if k.lower() not in _BODY_HEADERS]
    headers.append((b"content-length", b"%d" % length))
    return {**scope, "headers": headers}


async def _answer(send: Send, refused: Refusal) -> None:
    body = refused.body()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    if refused.request_id is not None:
        headers.append((REQUEST_ID_HEADER, refused.request_id.encode()))
    await send({"type": "http.response.start", "status": refused.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@dataclass(frozen=True, slots=True)
class _Priced:
    """What a call's hold is priced from: ``view``, the request as a chat request, with its
    messages as published; ``raw`` the bytes the app forwards and ``body`` the request as the
    client sent it, where a written limit goes (``field``; None: by provider); ``whole_context``:
    hold the model's whole input window (``endpoint_requests``)."""

    view: dict[str, Any]
    provider: str | None
    raw: bytes
    body: dict[str, Any]
    field: str | None
    whole_context: bool
    image: ImageAsk | None = None


class _Call:
    """One billed call on its way through the app: what the middleware saw of its response."""

    __slots__ = (
        "admission",
        "budget_model",
        "chunk",
        "created_at",
        "decoded",
        "decoder",
        "disconnected",
        "entry",
        "finished",
        "forward",
        "held",
        "held_bytes",
        "held_since",
        "opened",
        "parts",
        "priced",
        "prompt_count",
        "publisher",
        "request_id",
        "splitter",
        "started",
        "status",
        "streamed",
        "strip",
        "strip_usage",
        "usage_asked",
    )

    def __init__(
        self,
        publisher: Any,
        request_id: str,
        entry: dict[str, Any],
        usage_asked: bool = True,
        created_at: datetime | None = None,
    ) -> None:
        self.created_at = created_at or datetime.now(UTC)
        self.publisher = publisher
        self.request_id = request_id
        self.entry = entry
        # ``stream_options.include_usage``: the entry's ``include_usage`` when the response came
        # streamed, whatever the request's ``stream`` said.
        self.usage_asked = usage_asked
        self.admission: Admission | None = None  # the write-ahead record, once admitted
        # What the hold is priced from before the admission (``_price``): the request as priced,
        # its provider, the bytes the app would get; None when the hook gave the hold.
        self.priced: _Priced | None = None
        self.prompt_count: int | None = None  # the hold's estimate of the prompt (``Hold``)
        self.budget_model: str | None = None  # the model the hold's budgets apply to
        self.started = False  # the app started its response (``status``, ``streamed``)
        self.opened = False  # ``open`` published
        self.streamed = False
        self.status = 0
        self.finished = False
        self.disconnected = False
        # A publisher that cuts a body into its events itself (the tee's ``chunk``, off the
        # event loop) gets the chunks as they are; any other gets the events cut here.
        self.chunk: Callable[[str, bytes], None] | None = getattr(publisher, "chunk", None)
        self.splitter = EventSplitter()
        self.parts: list[bytes] = []
        self.held: list[bytes] = []  # chunks not handed to ``chunk`` yet
        self.held_bytes = 0
        self.held_since = 0.0
        # The request bytes the app gets instead of the client's when the gateway asks the
        # upstream for usage (``usage_option``); the client's usage-only chunks are then stripped.
        self.forward: bytes | None = None
        self.strip: UsageChunkStrip | None = None
        self.strip_usage = False  # usage was asked for the client: its chunk is not theirs
        self.decoder: ResponseDecoder | None = None  # the response's Content-Encoding, undone
        self.decoded = False  # the client gets the body decoded (a coded stream to strip)

    def start(self, status: int, streamed: bool, headers: Iterable[tuple[bytes, bytes]]) -> None:
        self.started, self.status, self.streamed = True, status, streamed
        encoding = None
        for key, value in headers:
            if key.lower() == b"content-encoding":
                encoding = value.decode("latin-1")
        decoder = ResponseDecoder.for_header(encoding)
        if decoder is not None and decoder.failed:
            # A coding this gateway cannot undo: the body goes as it came, a plain response the
            # worker cannot read (unsettled ``unreadable``, exposed at the hold), never nothing.
            self.streamed, decoder = False, None
        self.decoder = decoder
        if self.strip_usage and self.streamed:
            # The usage chunk is cut from the events: a coded stream goes to the client decoded.
            self.strip = UsageChunkStrip()
            self.decoded = decoder is not None

    def publish(self, method: str, *args: Any) -> None:
        try:
            getattr(self.publisher, method)(self.request_id, *args)
        except Exception:  # the user's response goes on; the sync Publisher can raise here
            log.exception("billing: %s of %s not published", method, self.request_id)

    def open(self, streamed: bool) -> None:
        self.opened, self.streamed = True, streamed
        entry = self.entry
        if entry["stream"] != streamed:
            usage = self.usage_asked if streamed else True
            entry = {**entry, "stream": streamed, "include_usage": usage}
        fields = self.admission.fields if self.admission is not None else None
        try:
            if fields is None:
                self.publisher.open(entry_body(entry), self.request_id)
            else:
                self.publisher.open(entry_body(entry), self.request_id, admission=fields)
        except Exception:
            log.exception("billing: open of %s not published", self.request_id)

    def body(self, chunk: bytes) -> None:
        """Called per body chunk: the hot path, so the publisher is called without ``publish``."""
        if not self.streamed:
            self.parts.append(chunk)
            return
        if self.chunk is not None:
            if chunk:
                held = self.held
                held.append(chunk)
                self.held_bytes += len(chunk)
                now = _monotonic()
                if len(held) == 1:
                    self.held_since = now
                if self.held_bytes >= HOLD_BYTES or now - self.held_since >= HOLD_SECONDS:
                    self.hand_off()
            return
        events = self.splitter.feed(chunk)
        if events:
            try:
                self.publisher.frames(self.request_id, events)
            except Exception:
                log.exception("billing: frames of %s not published", self.request_id)

    def hand_off(self) -> None:
        """The held chunks to the publisher's ``chunk``, joined."""
        held = self.held
        self.held, self.held_bytes = [], 0
        try:
            self.chunk(self.request_id, held[0] if len(held) == 1 else b"".join(held))  # type: ignore[misc]
        except Exception:
            log.exception("billing: chunks of %s not published", self.request_id)

    def end(self, reason: str | None) -> None:
        if not self.started:  # no response: the request as asked, no frames
            self.open(self.entry["stream"])
        else:
            if not self.opened:
                self.open(self.streamed)
            if self.held:
                self.hand_off()
            if self.streamed:
                rest = self.splitter.rest()  # none with ``chunk``: the ``close`` publishes it
                if rest:
                    self.publish("frames", [rest])
            else:
                self.publish("response", self.status, b"".join(self.parts))
        if reason is None:
            # A client that leaves after the last byte (as the openai client does) left nothing.
            if self.finished:
                failed = self.status >= (400 if self.streamed else 500)
                reason = "upstream_error" if failed else "done"
            else:
                reason = "client_disconnect" if self.disconnected else "upstream_error"
        self.publish("close", reason)


class BillingMiddleware:
    """Publishes every chat completion the wrapped ASGI app serves (see the module docstring).

    ``publisher``: a ``Tee`` (or anything with ``Publisher``'s methods). ``hook``: the gateway's
    ``MetadataHook``. ``prices``: the book holds are priced from (the bundled one by default).
    ``non_streamable``: model prefixes that must not stream (``BILLING_NON_STREAMABLE_MODELS``).
    ``default_max_tokens``: the output limit a hold assumes when the request states none and the
    book does not know the model's ``max_output_tokens``.
    ``fallback_account``: the account a call is billed to when the hook's account id is one the
    worker would refuse (``metadata.usable_account``). ``authorizer``: spend control
    (``authorize``): the hold is priced and taken before the app is called, and a call that does
    not fit is answered 402 without reaching the app; None (the default): not checked.
    ``unbilled_routes``: ``refuse`` (the default) or ``pass`` (``BILLING_UNBILLED_ROUTES``): what
    becomes of a request that is not a billed route (``serving``)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        publisher: Any,
        hook: MetadataHook,
        prices: PriceBook | None = None,
        non_streamable: Iterable[str] = (),
        default_max_tokens: int = DEFAULT_MAX_TOKENS,
        fallback_account: str = FALLBACK_ACCOUNT,
        authorizer: Authorizer | None = None,
        unbilled_routes: str = "refuse",
    ) -> None:
        if authorizer is None:  # every call is admitted, with or without spend control
            keys = publisher.keys
            store = AuthorizationStore(publisher.client, keys.prefix)
            authorizer = Authorizer(store, check_spend=False, keys=keys)
        self.authorizer = authorizer
        self.pass_unbilled = passes(unbilled_routes)
        self.fallback_account = check_identifier(fallback_account, "fallback_account")
        self.app = app
        self.publisher = publisher
        self.hook = hook
        self.prices = prices if prices is not None else load_price_book()
        self.non_streamable = tuple(non_streamable)
        self.default_max_tokens = default_max_tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = route_of(scope)
        if route is None or not route.billed:
            await serve_unbilled(
                self.app, scope, receive, send, route=route, answer=_answer,
                pass_unbilled=self.pass_unbilled, publisher=self.publisher, hook=self.hook,
            )  # fmt: skip
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left before its request was whole: nothing ran
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        raw = b"".join(chunks)
        pending: list[Message] = [{"type": "http.request", "body": raw, "more_body": False}]
        call: _Call | None = None

        async def replay() -> Message:
            if pending:
                return pending.pop()
            message = await receive()
            if message["type"] == "http.disconnect" and call is not None:
                call.disconnected = True
            return message

        call = self._prepare(scope, raw, route.endpoint)
        if isinstance(call, Refusal):
            await _answer(send, call)
            return
        if call is None:  # the hook named no account: refused, or passed and recorded unbilled
            await serve_unbilled(
                self.app, scope, replay, send, route=NO_ACCOUNT, answer=_answer,
                pass_unbilled=self.pass_unbilled, publisher=self.publisher, hook=self.hook,
            )  # fmt: skip
            return
        refused = await self._price(call)
        if refused is not None:
            await _answer(send, refused)
            return
        admission = await self._admit(self.authorizer, call)
        if admission.refusal is not None:
            await _answer(send, admission.refusal)
            return
        call.admission = admission
        if call.forward is not None:
            pending[0] = {"type": "http.request", "body": call.forward, "more_body": False}
            scope = _forwarded_scope(scope, len(call.forward))
        try:
            await self._run(scope, replay, send, call)
        finally:
            await self.authorizer.finish_async(admission, call.request_id)

    def _prepare(self, scope: Scope, raw: bytes, endpoint: str | None) -> _Call | Refusal | None:
        inflated = inflate(raw, _header(scope, b"content-encoding"))
        original = None if inflated is None else read_body(inflated)
        if not isinstance(original, dict):
            return NOT_JSON
        key = _header(scope, b"idempotency-key")
        refused = refusal(original, key, self.non_streamable)
        if refused is not None:
            return refused
        info = self.hook(scope, original)
        if info is None:
            return None
        view = endpoint_request(endpoint, original)
        if isinstance(view, Refusal):
            return view
        body = view.body  # the request as a chat request (``endpoint_requests``)
        forward = None
        if view.usage_by_option:
            options = usage_options(body)
            if options is not None:  # usage asked of the upstream (``usage_option``)
                forward = with_usage_asked(inflated, original, options)  # type: ignore[arg-type]
                body = {**body, "stream_options": options}
                original = {**original, "stream_options": options}
        else:  # the endpoint's stream always carries its usage
            body = {**body, "stream_options": {"include_usage": True}}
        created_at = datetime.now(UTC)
        # The billing id is the gateway's, unique per call; the client's id is its reference only.
        request_id = new_request_id()
        client_request_id = info.request_id or _header(scope, b"x-request-id") or None
        reserved = info.reserved_micros
        try:
            entry = request_entry(
                body,
                info,
                request_id=request_id,
                # 0 stands for a hold priced later: ``reserve`` gives one within the contract.
                reserved_micros=0 if reserved is None else int(reserved),
                created_at=created_at,
                idempotency_key=key,
                streamed=asks_to_stream(body),
                fallback_account=self.fallback_account,
                client_request_id=client_request_id,
                endpoint=None if view.endpoint == CHAT else view.endpoint,
                prompt_tokens=view.prompt_tokens,
            )
        except RequestMetaError as exc:
            return Refusal(400, f"Invalid request: {exc}", str(exc).split(":", 1)[0], "invalid")
        if "account_fallback" in entry:  # the reason only: the id may be anything a client sent
            log.warning(
                "billing: %s billed to %s: %s",
                request_id,
                self.fallback_account,
                entry["account_fallback"],
            )
        call = _Call(self.publisher, request_id, entry, usage_asked(body), created_at)
        call.forward = forward
        call.strip_usage = forward is not None  # asked here, not by the client
        if isinstance(entry["model"], str):
            try:
                call.budget_model = self.prices.budget_model(entry["model"])
            except Exception:  # a broken book: the model as named (``_price`` says so)
                call.budget_model = entry["model"]
        if reserved is None:
            # Priced before the app (``_price``, off the event loop): the hold is what the
            # admission records (and, with spend control, takes), from the messages as
            # published (an image as its placeholder).
            raw_sent = forward if forward is not None else inflated
            call.priced = _Priced(
                {**body, "messages": entry["messages"]}, info.provider, raw_sent,  # type: ignore[arg-type]
                original, view.limit_field, view.whole_context, view.image,
            )  # fmt: skip
        return call

    async def _price(self, call: _Call) -> Refusal | None:
        """Price the call's hold (``holds.price_hold``, off the event loop) into its entry, or the
        refusal. With spend control, a model the book does not price is refused (or held at the
        authorizer's ``unpriced_hold``), and a request that states no output limit gets the one
        held written into the body the app receives (``holds.with_limit``); without it, an
        unpriced model is held at 0 (the worker marks the call ``unpriced``)."""
        if call.priced is None:
            return None
        priced = call.priced
        entry = call.entry
        try:
            found = await price_hold(
                self.prices, priced.view, call.created_at, provider=priced.provider,
                size=len(priced.raw), default_max_tokens=self.default_max_tokens,
                field=priced.field, whole_context=priced.whole_context, image=priced.image,
            )  # fmt: skip
        except Exception:  # a bug in pricing: unpriced, never held at 0 under spend control
            log.exception("billing: the hold of %s not priced", call.request_id)
            found = Unpriced(str(entry["model"]), "its hold could not be priced", "")
        spend = self.authorizer.check_spend
        if isinstance(found, Unpriced):
            if not spend:
                entry["reserved_micros"] = 0
                return None
            held = unpriced_hold(found, self.authorizer.unpriced_hold, call.request_id)
            if isinstance(held, Refusal):
                return held
            entry["reserved_micros"] = held[0]
            return None
        entry["reserved_micros"], call.budget_model = int(found.micros), found.model
        call.prompt_count = found.prompt_estimate
        if spend and found.write is not None:
            call.forward = with_limit(priced.raw, priced.body, found.write, found.output_tokens)
            entry["max_tokens"] = found.output_tokens
        return None

    async def _admit(self, authorizer: Authorizer, call: _Call) -> Admission:
        """Write the call's admission record, taking its hold with spend control (one Redis
        round trip; the spool when Redis cannot): the refusal the client gets, or the record
        (the entry says ``authorization: unchecked`` when it was admitted unchecked)."""
        entry = call.entry
        admission = await authorizer.admit_async(
            entry["account_id"], call.request_id, entry["reserved_micros"], call.created_at,
            call.budget_model or entry["model"], facts=admission_facts(entry, call.prompt_count),
            idempotency_key=entry.get("idempotency_key"),
            spool=getattr(self.publisher, "spool_now", None),
        )  # fmt: skip
        if admission.unchecked:
            entry["authorization"] = "unchecked"
        return admission

    async def _run(self, scope: Scope, receive: Receive, send: Send, call: _Call) -> None:
        async def watch(message: Message) -> None:
            body = message["type"] == "http.response.body"
            if not body and message["type"] == "http.response.start":
                content_type = b""
                for key, value in message.get("headers") or ():
                    if key.lower() == b"content-type":
                        content_type = value
                headers = list(message.get("headers") or ())
                call.start(message["status"], content_type.lower().startswith(_SSE), headers)
                if call.decoded:
                    headers = [(k, v) for k, v in headers if k.lower() not in _BODY_HEADERS]
                headers.append((REQUEST_ID_HEADER, call.request_id.encode()))
                message = {**message, "headers": headers}
            # What the publisher reads: the body with its coding undone.
            data = message.get("body", b"") if body else b""
            if body and call.decoder is not None:
                data = call.decoder.feed(data)
            if body and call.strip is not None:  # what the client gets: no usage chunk
                shown = call.strip.feed(data)
                if not message.get("more_body", False):
                    shown += call.strip.rest()
                message = {**message, "body": shown}
            try:
                await send(message)
            except OSError:  # uvicorn's ClientDisconnected: the client went away
                call.disconnected = True
                raise
            if body:
                if not call.opened:
                    # After the first body bytes went out: not on the time to first byte.
                    call.open(call.streamed)
                call.body(data)
                if not message.get("more_body", False):
                    call.finished = True

        reason: str | None = None
        try:
            await self.app(scope, receive, watch)
        except BaseException as exc:
            left = call.disconnected and not call.finished
            reason = "client_disconnect" if left else close_reason_of(exc)
            raise
        finally:
            call.end(reason)
