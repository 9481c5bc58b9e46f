"""The gateway as a trust and accounting boundary, through both real gateways: the example ASGI
gateway (``BillingMiddleware``) and the LiteLLM proxy with the billing hook, each in front of the
recorded upstream, each once with ``BILLING_UNBILLED_ROUTES=refuse`` (the default) and once with
``pass``, called by the real openai client, and a real ``billing worker`` writing the ledger.

* What a gateway serves is one table (``worker.gateway.routes``): the endpoints with a reader
  billed (tests/gateway/test_endpoints_e2e.py), the
  model list and health free, everything else refused with 403 ``route_not_billed``, a WebSocket
  too; with ``pass`` a refused route is served and the ledger records it (anomaly
  ``unbilled_route``).
* Identity comes from the gateway's authentication only: the client's ``metadata.billing_*`` keys
  choose nothing (chat, and a refused call type), and a client's reused ``X-Request-Id`` never
  merges two calls: each is its own record, each charged.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
import redis
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from devtools.demo_gateway import litellm_config
from devtools.example_app import create_app
from devtools.localservers.redis_server import PrivateRedis
from models.anomalies import Anomaly
from models.reservations import Reservation
from worker.contract.keys import Keys
from worker.gateway.tee import Tee
from worker.ledger.database import make_engine
from worker.ledger.queries import requests_of_client_reference

from .harness import MASTER_KEY, BillingWorker, Call, LiteLLMProxy, ledger, wait_decided
from .serving import served
from .upstream import SCENARIO_HEADER, Upstream

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]

MODEL = "gpt-4o-mini"
MESSAGES = [{"role": "user", "content": "Say hello."}]


def hostile(victim: str) -> dict[str, Any]:
    """The LiteLLM hook's own metadata keys, as a client trying to bill ``victim`` would send."""
    return {
        "billing_account_id": victim,
        "billing_request_id": f"req_{victim}",
        "billing_reserved_micros": 10**12,
        "billing_unchecked": True,
        "billing_account_fallback": "made up",
    }


@dataclass
class Stack:
    redis: redis.Redis
    keys: Keys
    tee: Tee
    worker: BillingWorker
    proxy: LiteLLMProxy  # refuse
    proxy_pass: LiteLLMProxy
    asgi: str  # the example gateway's base URL, refuse
    asgi_pass: str
    sessions: sessionmaker[Session]

    def asgi_client(self, account: str, *, unbilled_pass: bool = False) -> openai.OpenAI:
        base = self.asgi_pass if unbilled_pass else self.asgi
        return openai.OpenAI(
            base_url=base + "/v1", api_key=account, max_retries=0,
            default_headers={SCENARIO_HEADER: "clean"},
        )  # fmt: skip

    def litellm_client(self, *, unbilled_pass: bool = False) -> openai.OpenAI:
        proxy = self.proxy_pass if unbilled_pass else self.proxy
        return openai.OpenAI(base_url=proxy.base_url, api_key=MASTER_KEY, max_retries=0)

    def decided(self, accounts: list[str], count: int) -> list[Call]:
        processes = (self.worker, self.proxy, self.proxy_pass)
        return wait_decided(self.sessions, accounts, count, timeout=60, processes=processes)

    def anomalies(self, account: str) -> list[tuple[str, str, str | None]]:
        with self.sessions() as s:
            rows = s.execute(
                select(Reservation.model, Anomaly.kind, Anomaly.detail)
                .join(Anomaly, Anomaly.reservation_id == Reservation.id)
                .where(Reservation.account_id == account)
            )
            return [(model, kind, detail) for model, kind, detail in rows]


@pytest.fixture(scope="module")
def stack(pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("trust-e2e")
    redis_server = PrivateRedis(workdir / "redis")
    redis_server.start()
    upstream = Upstream.start()
    prefix = f"trust-{uuid.uuid4().hex[:8]}"
    config = workdir / "config.yaml"
    clean = upstream.scenario_url("clean")
    config.write_text(
        litellm_config([(MODEL, MODEL, clean), ("emb", "text-embedding-3-small", clean)])
    )
    env = {
        "REDIS_URL": redis_server.url(0),
        "CELERY_BROKER_URL": redis_server.url(1),
        "DATABASE_URL": pg_url,
        "BILLING_PREFIX": prefix,
        "BILLING_LITELLM_ACCOUNT": "end_user,team,user,key",
        "BILLING_DRAIN_MS": "1000",
        "BILLING_BLOCK_MS": "100",
        "BILLING_SWEEP_IDLE_MS": "3000",
        "BILLING_SWEEP_INTERVAL_SECONDS": "1",
        "BILLING_RECHECK_SECONDS": "1",
        "BILLING_CLAIM_IDLE_MS": "3000",
    }
    proxy = LiteLLMProxy(
        config, {**env, "BILLING_SPOOL_DIR": str(workdir / "spool-r")}, workdir / "proxy"
    )
    proxy_pass = LiteLLMProxy(
        config,
        {**env, "BILLING_SPOOL_DIR": str(workdir / "spool-p"), "BILLING_UNBILLED_ROUTES": "pass"},
        workdir / "proxy-pass",
    )
    worker = BillingWorker(env, workdir / "worker")
    keys = Keys(prefix)
    tee = Tee.from_url(redis_server.url(0), keys, spool_dir=workdir / "spool-asgi")
    engine = make_engine(pg_url)
    try:
        proxy.start()
        proxy_pass.start()
        worker.start()
        proxy.wait_ready(120)
        proxy_pass.wait_ready(120)
        with (
            served(create_app(upstream.base_url, tee)) as asgi,
            served(create_app(upstream.base_url, tee, unbilled_routes="pass")) as asgi_pass,
        ):
            yield Stack(
                redis_server.client(0), keys, tee, worker, proxy, proxy_pass, asgi, asgi_pass,
                sessionmaker(engine),
            )  # fmt: skip
    finally:
        tee.stop()
        proxy.stop()
        proxy_pass.stop()
        worker.stop()
        upstream.stop()
        redis_server.stop()
        engine.dispose()


def new_account() -> str:
    return f"acct-trust-{uuid.uuid4().hex[:10]}"


def notifications(stack: Stack) -> int:
    assert stack.tee.flush(timeout=10)
    return int(stack.redis.xlen(stack.keys.events()))


def published_under(stack: Stack, request_id: str) -> list[dict[bytes, bytes]]:
    """Every notification and dead letter naming ``request_id``, and its stream's entries."""
    found = [
        fields
        for key in (stack.keys.events(), stack.keys.dead)
        for _id, fields in stack.redis.xrange(key)
        if request_id.encode() in (fields.get(b"request_id"), fields.get(b"orig.request_id"))
    ]
    return found + [fields for _id, fields in stack.redis.xrange(stack.keys.request(request_id))]


# -- identity ------------------------------------------------------------------------------------


def test_asgi_a_reused_x_request_id_is_two_calls_both_charged(stack: Stack) -> None:
    """The same client ``X-Request-Id`` on two calls (a streamed one and a plain one): two
    records, each under the gateway's own id, each settled and charged; the client's id is kept
    as each call's reference, and ``billing show`` finds both by it."""
    account, reference = new_account(), f"client-{uuid.uuid4().hex[:8]}"
    client = stack.asgi_client(account)
    headers = {"X-Request-Id": reference}
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=MESSAGES, extra_headers=headers
    )
    ids = [raw.headers["x-billing-request-id"]]
    with client.chat.completions.with_streaming_response.create(
        model=MODEL, messages=MESSAGES, stream=True, stream_options={"include_usage": True},
        extra_headers=headers,
    ) as streamed:  # fmt: skip
        ids.append(streamed.headers["x-billing-request-id"])
        for _chunk in streamed.parse():
            pass
    assert len(set(ids)) == 2 and reference not in ids
    calls = stack.decided([account], 2)
    assert sorted(c.request_id for c in calls) == sorted(ids)
    assert [c.status for c in calls] == ["settled", "settled"], calls
    assert all(c.charge_micros and c.charge_micros > 0 for c in calls)
    assert calls[0].charge_micros == calls[1].charge_micros  # the twins cost the same
    with stack.sessions() as s:
        assert sorted(requests_of_client_reference(s, reference)) == sorted(ids)


def test_litellm_client_billing_metadata_chooses_neither_the_payer_nor_the_hold(
    stack: Stack,
) -> None:
    account, victim = new_account(), new_account()
    client = stack.litellm_client()
    client.chat.completions.create(
        model=MODEL, messages=MESSAGES, user=account, extra_body={"metadata": hostile(victim)}
    )
    (call,) = stack.decided([account], 1)
    assert call.status == "settled" and call.charge_micros and call.charge_micros > 0
    assert call.request_id.startswith("req_litellm_") and call.request_id != f"req_{victim}"
    with stack.sessions() as s:
        held = s.scalar(
            select(Reservation.reserved_micros).where(Reservation.request_id == call.request_id)
        )
    assert held is not None and 0 < held < 10**6  # priced, not the client's 10^12
    assert ledger(stack.sessions, [victim]) == []


def test_litellm_a_refused_call_type_with_client_billing_metadata_books_nothing(
    stack: Stack,
) -> None:
    """A moderation carrying the hook's keys (a call type the hook refuses: once such call types
    were left alone, so the post-call hooks published the client's account and id): refused, and
    nothing recorded for anyone; a chat call made after it is the only call the ledger gets."""
    account, victim = new_account(), new_account()
    client = stack.litellm_client()
    with pytest.raises(openai.PermissionDeniedError, match="not billed by this gateway"):
        client.moderations.create(
            model="emb", input="hi", extra_body={"metadata": hostile(victim), "user": account}
        )
    client.chat.completions.create(model=MODEL, messages=MESSAGES, user=account)
    (call,) = stack.decided([account], 1)
    assert call.status == "settled"
    assert ledger(stack.sessions, [victim]) == []
    assert published_under(stack, f"req_{victim}") == []
    with stack.sessions() as s:
        found = s.scalar(select(Reservation.id).where(Reservation.request_id == f"req_{victim}"))
    assert found is None


# -- what the gateways serve ------------------------------------------------------------------


def test_asgi_unknown_and_unread_paths_are_refused_before_the_app(stack: Stack) -> None:
    account = new_account()
    before = notifications(stack)
    client = stack.asgi_client(account)
    with pytest.raises(openai.PermissionDeniedError) as refused:
        client.moderations.create(model="omni-moderation-latest", input="hi")
    error = refused.value.body
    assert isinstance(error, dict) and error["code"] == "route_not_billed"
    assert "POST /v1/moderations is not billed by this gateway" in error["message"]
    answer = httpx.post(
        stack.asgi + "/v1/assistants", json={"model": MODEL},
        headers={"Authorization": f"Bearer {account}"},
    )  # fmt: skip
    assert answer.status_code == 403
    assert "POST /v1/assistants is not billed by this gateway" in answer.json()["error"]["message"]
    assert notifications(stack) == before  # nothing published: nothing served


def test_litellm_call_types_without_a_reader_are_refused(stack: Stack) -> None:
    client = stack.litellm_client()
    with pytest.raises(
        openai.PermissionDeniedError, match="call type image_generation is not billed"
    ):
        client.images.generate(model=MODEL, prompt="a cat", user=new_account())
    with pytest.raises(openai.PermissionDeniedError, match="call type moderation is not billed"):
        client.moderations.create(model=MODEL, input="Say hello.")


def test_the_model_list_and_health_are_served_free_by_both(stack: Stack) -> None:
    account = new_account()
    before = notifications(stack)
    listed = stack.asgi_client(account).models.list()
    assert [m.id for m in listed.data] == [MODEL]
    assert httpx.get(stack.asgi + "/health").json() == {"status": "ok"}
    assert notifications(stack) == before
    assert MODEL in [m.id for m in stack.litellm_client().models.list().data]
    assert httpx.get(stack.proxy.base_url.removesuffix("/v1") + "/health/liveliness").is_success


def test_asgi_a_websocket_is_refused_at_the_handshake(stack: Stack) -> None:
    url = stack.asgi.replace("http://", "ws://")
    for path in ("/v1/realtime?model=gpt-4o-realtime-preview", "/v1/anything"):
        with pytest.raises(InvalidStatus) as refused, connect(url + path, open_timeout=5):
            pass
        assert refused.value.response.status_code == 403


def test_pass_serves_an_unbilled_path_and_the_ledger_records_it(stack: Stack) -> None:
    """``BILLING_UNBILLED_ROUTES=pass``: a moderation is served by both gateways, and each is a
    voided call of its account with the anomaly ``unbilled_route`` naming the route."""
    asgi_account, litellm_account = new_account(), new_account()
    raw = stack.asgi_client(asgi_account, unbilled_pass=True).moderations.with_raw_response.create(
        model="omni-moderation-latest", input="hi"
    )
    assert raw.parse().results[0].flagged is False
    rid = raw.headers["x-billing-request-id"]
    served_litellm = stack.litellm_client(unbilled_pass=True).moderations.with_raw_response.create(
        model="emb", input="hi", extra_body={"metadata": hostile("v"), "user": litellm_account}
    )
    assert served_litellm.parse().results[0].flagged is False
    (asgi_call,) = stack.decided([asgi_account], 1)
    (litellm_call,) = stack.decided([litellm_account], 1)
    assert (asgi_call.request_id, asgi_call.status, asgi_call.model) == (rid, "voided", "unbilled")
    # LiteLLM 1.108.7 sends no X-Billing-Request-Id on a moderation (its headers hook does not
    # see the hook's id there): the call is found by its account.
    assert litellm_call.request_id.startswith("req_litellm_")
    assert (litellm_call.status, litellm_call.model) == ("voided", "unbilled")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not stack.anomalies(litellm_account):
        time.sleep(0.2)
    assert stack.anomalies(asgi_account) == [
        ("unbilled", "unbilled_route",
         "served unbilled: POST /v1/moderations (BILLING_UNBILLED_ROUTES=pass)"),
    ]  # fmt: skip
    assert stack.anomalies(litellm_account) == [
        ("unbilled", "unbilled_route",
         "served unbilled: call type moderation (BILLING_UNBILLED_ROUTES=pass)"),
    ]  # fmt: skip
    assert ledger(stack.sessions, ["v"]) == []
    assert published_under(stack, "req_v") == []


def test_pass_leaves_billed_calls_billed(stack: Stack) -> None:
    account = new_account()
    stack.asgi_client(account, unbilled_pass=True).chat.completions.create(
        model=MODEL, messages=MESSAGES
    )
    (call,) = stack.decided([account], 1)
    assert call.status == "settled" and call.model == MODEL and stack.anomalies(account) == []
