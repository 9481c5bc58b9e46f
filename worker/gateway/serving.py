"""The ASGI middleware's requests that are not billed chat completions (``routes``).

``serve_unbilled`` takes every ASGI request ``BillingMiddleware`` does not bill:

* a scope that is neither ``http`` nor ``websocket`` (``lifespan``): to the app, untouched;
* a ``free`` HTTP route (``routes.FREE_PATHS``: the model list, health checks): to the app,
  unrecorded;
* a refused HTTP route: answered ``routes.not_billed`` (403, OpenAI's error shape) without
  reaching the app;
* a WebSocket (the Realtime API, ``/v1/realtime``, or any other path): closed before it is
  accepted, which the server answers with HTTP 403;
* a chat completion whose hook named no account (``NO_ACCOUNT``): refused as the above.

With ``pass_unbilled`` (``BILLING_UNBILLED_ROUTES=pass``) a refused HTTP route or WebSocket goes
to the app instead, after its ``unbilled`` notification (``worker.gateway.unbilled``), and an HTTP
response carries the id it was recorded under as ``X-Billing-Request-Id``. The account is the
hook's answer for the request with an empty body (the body is not read: it may be large, or not
JSON); a hook that raises or answers None leaves the account out.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from worker.gateway import unbilled
from worker.gateway.metadata import MetadataHook, new_request_id
from worker.gateway.refusals import Refusal
from worker.gateway.routes import (
    NO_ACCOUNT_ENDPOINT,
    Route,
    Treatment,
    http_route,
    not_billed,
    websocket_route,
)

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Answer = Callable[[Send, Refusal], Awaitable[None]]

REQUEST_ID_HEADER = b"x-billing-request-id"
# A billed route whose hook named no account (``MetadataHook`` answered None): not billed, so
# treated as a refused route.
NO_ACCOUNT = Route(Treatment.REFUSED, NO_ACCOUNT_ENDPOINT)


def route_of(scope: Scope) -> Route | None:
    """The request's route; None for a scope that is neither HTTP nor a WebSocket."""
    if scope["type"] == "http":
        return http_route(scope["method"], scope["path"])
    if scope["type"] == "websocket":
        return websocket_route(scope["path"])
    return None


def _account(hook: MetadataHook, scope: Scope) -> str | None:
    try:
        info = hook(scope, {})
    except Exception:
        return None
    return None if info is None else info.account_id


async def serve_unbilled(
    app: ASGIApp,
    scope: Scope,
    receive: Receive,
    send: Send,
    *,
    route: Route | None,
    answer: Answer,
    pass_unbilled: bool,
    publisher: Any,
    hook: MetadataHook,
) -> None:
    """Serve, pass or refuse a request that is not billed (see the module docstring)."""
    if route is None or route.treatment is Treatment.FREE:
        await app(scope, receive, send)
        return
    websocket = scope["type"] == "websocket"
    what = f"{'WEBSOCKET' if websocket else scope['method']} {scope['path']}"
    if not pass_unbilled:
        if websocket:
            # Before ``websocket.accept``, a close is the server's HTTP 403 to the handshake.
            await send({"type": "websocket.close", "code": 1008, "reason": "not billed"})
        else:
            await answer(send, not_billed(what, route))
        log.info("billing: refused %s: not billed", what)
        return
    request_id = new_request_id()
    unbilled.record(publisher, request_id, what, _account(hook, scope))
    if websocket:
        await app(scope, receive, send)
        return

    async def tagged(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [*(message.get("headers") or ()), (REQUEST_ID_HEADER, request_id.encode())]
            message = {**message, "headers": headers}
        await send(message)

    await app(scope, receive, tagged)
