"""The request-edge stack the gateway's end-to-end tests run against (``open_edges``): a private
Redis, the recorded upstream, the real LiteLLM proxy with the billing hook (its fallback account
set in a hook module of its own, as docs/gateway.md shows), a real ``billing worker`` on
PostgreSQL, and the example gateway (the ASGI middleware and the tee); with the requests they
send and the check of a call against what the upstream sent. Used by
``tests/gateway/test_request_edges.py`` and the whole-path chaos test
(``tests/chaos/test_gateway_conservation.py``)."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy.orm import Session, sessionmaker

from devtools.demo_gateway import litellm_config
from devtools.example_app import account_from_key, create_app
from devtools.localservers.redis_server import PrivateRedis
from worker.contract.keys import Keys
from worker.gateway.metadata import CallInfo
from worker.gateway.tee import Tee
from worker.ledger.database import make_engine

from .harness import BillingWorker, Call, LiteLLMProxy, oracle_charge, wait_decided
from .serving import served
from .upstream import Sent, Upstream

GATEWAY_USER, GATEWAY_PASSWORD = "gateway", "gateway-e2e-pass"

MODEL = "gpt-4o-mini"  # what the ``clean`` scenario's recording names
ALIAS = "clean"  # the proxy's name for its deployment of it
PRICES = {"input": "0.15", "cached_input": "0.075", "output": "0.60"}  # USD per 1M tokens
# A hook module next to the proxy's config.yaml, as docs/gateway.md shows for a fallback account
# of one's own (LiteLLM loads ``<module>.<instance>`` from the config's directory first).
HOOKS = (
    "from worker.gateway.litellm_hook import BillingHook\n"
    "billing_hook = BillingHook(fallback_account={fallback!r})\n"
)
# The PNG made by Pillow in test_request_budget.py (37 x 21), its data padded to 2 MiB: the prompt
# is MBs, as a photo's is.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAACUAAAAVCAIAAABOhrD5AAAAgElEQVR4nL3VsQ3AIAxEUfAgZg32r1gDFkm6KCIk"
    "4Dscdy6+nuTGMYSjaAro5FZNuRRNuVXYs+YCNAwpQMOQAjQMKfflB1K63ZvsPW9y4LmSY8+PfPWcyC/Pg5x428m5"
    "t5dc8jaSsaiuZ9bv88xtHk+u3vMa8rBmjyQRjyFBDyZPPNpvL9yyIdAAAAAASUVORK5CYII="
)
BIG_IMAGE = "data:image/png;base64," + base64.b64encode(PNG + bytes(2 << 20)).decode()


def hook(scope: dict[str, Any], body: dict[str, Any]) -> CallInfo | None:
    """The example gateway's hook (the bearer token names the account), except that a request's
    ``user`` names it when present, as a gateway billing its end users does."""
    info = account_from_key(scope, body)
    user = body.get("user")
    if info is None or user is None:
        return info
    return CallInfo(account_id=user, provider="openai")


class Edges:
    def __init__(self, redis_server: PrivateRedis, upstream: Upstream, gateway: str,
                 proxy: LiteLLMProxy, worker: BillingWorker, sessions: sessionmaker[Session],
                 keys: Keys, tee: Tee) -> None:  # fmt: skip
        self.redis = redis_server
        self.upstream = upstream
        self.gateway = gateway + "/v1"
        self.proxy = proxy
        self.worker = worker
        self.sessions = sessions
        self.keys = keys
        self.tee = tee
        self.asgi_fallback = self.litellm_fallback = ""  # the gateways' fallback accounts

    def post(self, base: str, raw: bytes, key: str, **headers: str) -> tuple[httpx.Response, int]:
        """``raw`` as the request body; the answer, and how many calls the upstream served."""
        before = len(self.upstream.sent)
        answer = httpx.post(
            f"{base}/chat/completions",
            content=raw,
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json",
                     **headers},
            timeout=30,
        )  # fmt: skip
        return answer, len(self.upstream.sent) - before

    def decided(self, accounts: list[str], count: int) -> list[Call]:
        return wait_decided(
            self.sessions, accounts, count, timeout=60, processes=(self.worker, self.proxy)
        )

    def last_sent(self, count: int) -> list[Sent]:
        return self.upstream.sent[-count:]

    def gateway_writes(self, allowed: bool) -> None:
        """Give the example gateway's Redis user its writes, or take them away (its tee is
        answered NOPERM and spools until they are back); the worker's user is untouched."""
        self.redis.client().acl_setuser(
            GATEWAY_USER, enabled=True, commands=["+@all" if allowed else "-@write"]
        )


@contextmanager
def open_edges(pg_url: str, workdir: Path) -> Iterator[Edges]:
    """The stack, up and ready: a private Redis, the recorded upstream, the LiteLLM proxy with
    the billing hook, a ``billing worker``, and the example gateway, whose tee connects as the
    Redis user ``GATEWAY_USER`` (a fault can take its writes away while the worker works on:
    ``Edges.gateway_writes``)."""
    redis_server = PrivateRedis(workdir / "redis")
    redis_server.start()
    redis_server.client().acl_setuser(
        GATEWAY_USER, enabled=True, passwords=[f"+{GATEWAY_PASSWORD}"], keys=["*"],
        channels=["*"], commands=["+@all"],
    )  # fmt: skip
    upstream = Upstream.start()
    book = workdir / "prices.toml"
    book.write_text(
        f'[[price]]\nmodel = "{MODEL}"\n' + "".join(f'{k} = "{v}"\n' for k, v in PRICES.items())
    )
    config = workdir / "config.yaml"
    config.write_text(
        litellm_config([(ALIAS, MODEL, upstream.scenario_url("clean"))]).replace(
            "worker.gateway.litellm_hook.billing_hook", "billing_hooks.billing_hook"
        )
    )
    run = uuid.uuid4().hex[:8]  # this stack's own keys and fallback accounts
    asgi_fallback, litellm_fallback = f"fallback-asgi-{run}", f"fallback-litellm-{run}"
    (workdir / "billing_hooks.py").write_text(HOOKS.format(fallback=litellm_fallback))
    prefix = f"edges-{run}"
    env = {
        "REDIS_URL": redis_server.url(0),
        "CELERY_BROKER_URL": redis_server.url(1),
        "DATABASE_URL": pg_url,
        "BILLING_PREFIX": prefix,
        "BILLING_PRICE_BOOK": str(book),
        "BILLING_LITELLM_ACCOUNT": "end_user",
        "BILLING_DRAIN_MS": "1000",
        "BILLING_BLOCK_MS": "100",
        "BILLING_SWEEP_IDLE_MS": "3000",
        "BILLING_SWEEP_INTERVAL_SECONDS": "1",
        "BILLING_CLAIM_IDLE_MS": "3000",
        "BILLING_SPOOL_DIR": str(workdir / "spool"),
    }
    proxy = LiteLLMProxy(config, env, workdir / "proxy")
    worker = BillingWorker(env, workdir / "worker")
    keys = Keys(prefix)
    tee_url = f"redis://{GATEWAY_USER}:{GATEWAY_PASSWORD}@127.0.0.1:{redis_server.port}/0"
    tee = Tee.from_url(tee_url, keys, spool_dir=workdir / "asgi-spool", retry_seconds=0.1)
    app = create_app(
        upstream.base_url,
        tee,
        hook=hook,
        non_streamable=("o1-pro",),
        fallback_account=asgi_fallback,
    )
    engine = make_engine(pg_url)
    try:
        proxy.start()
        worker.start()
        with served(app) as url:
            proxy.wait_ready()
            stack = Edges(
                redis_server, upstream, url, proxy, worker, sessionmaker(engine), keys, tee
            )
            stack.asgi_fallback, stack.litellm_fallback = asgi_fallback, litellm_fallback
            yield stack
    finally:
        tee.stop()
        proxy.stop()
        worker.stop()
        upstream.stop()
        redis_server.stop()
        engine.dispose()


def account() -> str:
    return f"acct-edge-{uuid.uuid4().hex[:10]}"


def body(user: str | None = None, model: str = MODEL, **extra: Any) -> dict[str, Any]:
    request: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": "Say hello."}],
        **extra,
    }
    if user is not None:
        request["user"] = user
    return request


def usage_of(sent: Sent) -> dict[str, Any]:
    """The last usage block the upstream sent for a call."""
    if sent.body is not None:
        return sent.body["usage"]
    return [f["usage"] for f in sent.frames or [] if isinstance(f, dict) and f.get("usage")][-1]


def assert_settled_as_sent(calls: list[Call], sents: list[Sent]) -> None:
    assert len(calls) == len(sents)
    for call, sent in zip(calls, sents, strict=True):
        usage = usage_of(sent)
        assert (call.status, call.usage_source, call.model) == ("settled", "reported", MODEL)
        assert (call.prompt_tokens, call.completion_tokens) == (
            usage["prompt_tokens"],
            usage["completion_tokens"],
        )
        assert call.charge_micros == oracle_charge(PRICES, usage)


def vision(user: str, model: str = MODEL) -> dict[str, Any]:
    image = {"type": "image_url", "image_url": {"url": BIG_IMAGE, "detail": "high"}}
    content = [{"type": "text", "text": "What is in this image?"}, image]
    return body(user, model, messages=[{"role": "user", "content": content}])
