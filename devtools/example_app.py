"""A small OpenAI-compatible gateway built on the middleware: it proxies every ``/v1/…`` request to
one upstream, and the middleware bills the chat completions and refuses what it does not bill
(docs/gateway.md, *What the gateway serves*). The end-to-end tests and the benchmark run it; it
shows the few lines a gateway needs (``create_app``). Needs the ``gateway`` extra (Starlette,
httpx, uvicorn).

    python -m devtools.example_app --upstream http://127.0.0.1:8001/v1 --port 8000 \\
        --redis redis://127.0.0.1:6379/0 --spool-dir var/spool [--no-billing] [--authorize] \\
        [--unbilled-routes refuse|pass]

The account is the client's API key (``Authorization: Bearer <key>``), a stand-in for the gateway's
own key-to-account lookup; the provider is ``openai``. The billing request id is the middleware's
own; a client's ``X-Request-Id`` is kept as its reference (``client_request_id``), never used as
the id. ``GET /health`` is answered here (a free route). Request headers other than hop-by-hop
ones and ``authorization`` go upstream as they came (an ``X-Upstream-Scenario`` picks a recorded
reply).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from worker.contract.keys import Keys
from worker.gateway.metadata import CallInfo
from worker.gateway.middleware import BillingMiddleware
from worker.gateway.tee import DEFAULT_SPOOL_DIR, Tee

_NOT_FORWARDED = {"host", "content-length", "connection", "authorization", "accept-encoding"}


def account_from_key(scope: dict[str, Any], body: dict[str, Any]) -> CallInfo | None:
    """The example's hook: the bearer token names the account; no token, no account (the
    middleware refuses the call)."""
    for key, value in scope.get("headers") or ():
        if key == b"authorization" and value.lower().startswith(b"bearer "):
            return CallInfo(account_id=value[7:].decode("latin-1").strip(), provider="openai")
    return None


def proxy_app(upstream: str, *, on_shutdown: Callable[[], object] | None = None) -> Starlette:
    """The gateway without billing: forwards every ``/v1/…`` request to ``upstream``.
    ``on_shutdown`` runs (in a thread) when the server shuts down: uvicorn runs the lifespan's end
    on SIGTERM and SIGINT before it exits, which a ``finally`` around ``uvicorn.run`` is not."""
    client = httpx.AsyncClient(base_url=upstream, timeout=httpx.Timeout(60.0, connect=5.0))

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await client.aclose()
            if on_shutdown is not None:
                await asyncio.get_running_loop().run_in_executor(None, on_shutdown)

    async def forward(request: Request) -> StreamingResponse:
        headers = {k: v for k, v in request.headers.items() if k not in _NOT_FORWARDED}
        sent = client.build_request(
            request.method,
            "/" + request.path_params["path"],
            content=await request.body(),
            headers=headers,
            params=request.query_params,
        )
        reply = await client.send(sent, stream=True)

        async def body() -> AsyncIterator[bytes]:
            async for chunk in reply.aiter_raw():
                yield chunk

        kept = {
            k: v
            for k, v in reply.headers.items()
            # the body goes as it came (``aiter_raw``), so its coding goes with it
            if k.lower() in ("content-type", "content-encoding", "x-request-id")
        }
        return StreamingResponse(
            body(),
            status_code=reply.status_code,
            headers=kept,
            background=BackgroundTask(reply.aclose),
        )

    async def health(_request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    return Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/v1/{path:path}", forward, methods=["GET", "POST", "DELETE"]),
        ],
        lifespan=lifespan,
    )


def create_app(upstream: str, publisher: Any, **options: Any) -> BillingMiddleware:
    """The billed gateway: ``proxy_app`` inside the middleware (``options``: its keywords)."""
    options.setdefault("hook", account_from_key)
    app = proxy_app(upstream, on_shutdown=getattr(publisher, "stop", None))
    return BillingMiddleware(app, publisher=publisher, **options)


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="the upstream's OpenAI base URL")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--prefix", default="billing")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--spool-dir", default=DEFAULT_SPOOL_DIR)
    parser.add_argument("--no-billing", action="store_true", help="serve the bare proxy")
    parser.add_argument(
        "--authorize", action="store_true", help="spend control: take each hold before the call"
    )
    parser.add_argument(
        "--unbilled-routes",
        choices=("refuse", "pass"),
        default="refuse",
        help="a route it does not bill: refused (403), or served unbilled and recorded",
    )
    args = parser.parse_args(argv)
    if args.no_billing:
        uvicorn.run(proxy_app(args.upstream), host=args.host, port=args.port, log_level="warning")
        return
    tee = Tee.from_url(args.redis, Keys(args.prefix, args.partitions), spool_dir=args.spool_dir)
    try:
        options: dict[str, Any] = {"unbilled_routes": args.unbilled_routes}
        if args.authorize:
            from worker.gateway.authorize import Authorizer

            options["authorizer"] = Authorizer.for_url(args.redis, args.prefix)
        app = create_app(args.upstream, tee, **options)
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    finally:
        tee.stop()


if __name__ == "__main__":
    main()
