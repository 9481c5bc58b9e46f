"""Spend control through the real middleware: a uvicorn-served Starlette app, the real openai
client, the tee publishing into the real Redis, the authorization store in it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import openai
import orjson
import pytest
import redis
from gateway.serving import served
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from worker.contract.keys import Keys
from worker.gateway.authorize import Authorizer
from worker.gateway.metadata import CallInfo
from worker.gateway.middleware import BillingMiddleware
from worker.gateway.tee import Tee

pytestmark = pytest.mark.redis

HOLD = 20_000
SERVED: list[str] = []
# The client's reference (the test hook's ``request_id``) → the billing id the middleware made,
# from the response's X-Billing-Request-Id.
BILLING_IDS: dict[str, str] = {}


async def chat(request: Request) -> Response:
    body = orjson.loads(await request.body())
    SERVED.append(body["user"])
    await asyncio.sleep(0.01)  # the upstream's time: the calls overlap
    reply = {
        "id": f"chatcmpl-{body['user']}",
        "object": "chat.completion",
        "created": 1,
        "model": body["model"],
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10},
    }
    return Response(orjson.dumps(reply), media_type="application/json")


def hook(scope: dict[str, Any], body: dict[str, Any]) -> CallInfo:
    account, _, _ = body["user"].partition(".")
    return CallInfo(account_id=account, request_id=body["user"], reserved_micros=HOLD,
                    provider="openai")  # fmt: skip


class Gateway:
    def __init__(self, url: str, keys: Keys, tee: Tee, authorizer: Authorizer) -> None:
        self.url, self.keys, self.tee, self.authorizer = url, keys, tee, authorizer

    def client(self, account: str = "x") -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.url + "/v1", api_key=account, max_retries=2)

    def published(self, *references: str) -> list[list[dict[bytes, bytes]]]:
        """Each call's stream entries (by the client's reference), once what the tee holds is
        written."""
        assert self.tee.flush(timeout=10)
        client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
        try:
            return [
                [fields for _id, fields in client.xrange(self.keys.request(BILLING_IDS[reference]))]
                for reference in references
            ]
        finally:
            client.close()


def serve(tmp_path: Any, authorizer_options: dict[str, Any], redis_url: str) -> Iterator[Gateway]:
    prefix = f"t-auth-{uuid.uuid4().hex[:10]}"
    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    keys = Keys(prefix)
    tee = Tee(client, keys, spool_dir=tmp_path / "spool")
    authorizer = Authorizer.for_url(redis_url, prefix, **authorizer_options)
    app = BillingMiddleware(
        Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]),
        publisher=tee,
        hook=hook,
        authorizer=authorizer,
    )
    try:
        with served(app) as url:
            yield Gateway(url, keys, tee, authorizer)
    finally:
        tee.stop()
        found = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if found:
            client.delete(*found)
        client.close()


@pytest.fixture
def gateway(tmp_path: Any) -> Iterator[Gateway]:
    yield from serve(tmp_path, {}, "redis://127.0.0.1:6379/0")


async def call(client: openai.AsyncOpenAI, reference: str) -> int:
    """200, or the status the openai client raised. Refused or not, the response names the
    billing id the gateway made (never the client's reference)."""
    try:
        raw = await client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], user=reference
        )
        headers, status = raw.headers, 200
    except openai.APIStatusError as exc:
        headers, status = exc.response.headers, exc.status_code
    BILLING_IDS[reference] = headers["x-billing-request-id"]
    assert BILLING_IDS[reference].startswith("req_") and BILLING_IDS[reference] != reference
    return status


def run_all(gateway: Gateway, request_ids: list[str]) -> list[int]:
    """The calls all at once, from one openai client (its default retries on)."""

    async def everything() -> list[int]:
        async with gateway.client() as client:
            return list(await asyncio.gather(*(call(client, rid) for rid in request_ids)))

    return asyncio.run(everything())


def test_200_concurrent_calls_against_funds_for_50_holds_admit_exactly_50(gateway) -> None:
    store = gateway.authorizer.store
    store.install("acct", funds=50 * HOLD + HOLD - 1, charged=0, fields={})
    store.mark_ready()
    SERVED.clear()
    ids = [f"acct.{i}" for i in range(200)]
    statuses = run_all(gateway, ids)
    assert statuses.count(200) == 50
    assert statuses.count(402) == 150
    # Refused before the app: the upstream served 50, and the client did not retry a 402.
    assert sorted(SERVED) == sorted(rid for rid, s in zip(ids, statuses, strict=True) if s == 200)
    assert gateway.authorizer.refused == 150
    # Nothing published for a refused call; every admitted one published with its hold.
    for status, entries in zip(statuses, gateway.published(*ids), strict=True):
        if status == 402:
            assert entries == []
        else:
            request = orjson.loads(entries[0][b"body"])
            assert request["reserved_micros"] == HOLD and "authorization" not in request


def test_the_refusal_is_openai_shaped_and_names_the_amounts(gateway) -> None:
    store = gateway.authorizer.store
    store.install("poor", funds=HOLD - 1, charged=0, fields={})
    store.mark_ready()

    async def refused() -> openai.APIStatusError:
        async with gateway.client() as client:
            with pytest.raises(openai.APIStatusError) as caught:
                await client.chat.completions.with_raw_response.create(
                    model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}],
                    user="poor.1",
                )  # fmt: skip
            return caught.value

    error = asyncio.run(refused())
    assert error.status_code == 402
    body = error.body
    assert isinstance(body, dict)
    assert (body["code"], body["type"], body["account_id"]) == (
        "insufficient_funds", "insufficient_quota", "poor"
    )  # fmt: skip
    assert (body["requested_micros"], body["spendable_micros"]) == (HOLD, HOLD - 1)


def test_admitted_calls_carry_their_billing_request_id(gateway) -> None:
    store = gateway.authorizer.store
    store.install("rich", funds=10 * HOLD, charged=0, fields={})
    store.mark_ready()

    async def raw() -> Any:
        async with gateway.client() as client:
            return await client.chat.completions.with_raw_response.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], user="rich.1"
            )

    billing_id = asyncio.run(raw()).headers["x-billing-request-id"]
    assert billing_id.startswith("req_") and billing_id != "rich.1"  # the gateway's own
    BILLING_IDS["rich.1"] = billing_id
    (entries,) = gateway.published("rich.1")
    request = orjson.loads(entries[0][b"body"])
    assert (request["request_id"], request["client_request_id"]) == (billing_id, "rich.1")


def test_concurrent_first_calls_of_a_new_user_under_a_default_budget(tmp_path) -> None:
    """BerriAI/litellm#40095: every concurrent first request of a new end user was admitted past a
    tiny budget. Here only what fits the default budget is."""
    options = {"unknown": "default_budget", "default_budget": 3 * HOLD}
    for gateway in serve(tmp_path, options, "redis://127.0.0.1:6379/0"):
        gateway.authorizer.store.mark_ready("default_budget", 3 * HOLD)
        statuses = run_all(gateway, [f"newuser.{i}" for i in range(40)])
        assert (statuses.count(200), statuses.count(402)) == (3, 37)


def test_unknown_accounts_are_refused_by_default(gateway) -> None:
    gateway.authorizer.store.mark_ready()
    assert run_all(gateway, ["stranger.1"]) == [402]


def test_redis_unreachable_fails_open_counted_and_flagged(tmp_path) -> None:
    for gateway in serve(tmp_path, {}, "redis://127.0.0.1:1/0"):
        assert run_all(gateway, ["acct.open"]) == [200]
        assert gateway.authorizer.unchecked == 1
        request = orjson.loads(gateway.published("acct.open")[0][0][b"body"])
        assert request["authorization"] == "unchecked"


def test_redis_unreachable_fails_closed_when_set(tmp_path) -> None:
    for gateway in serve(tmp_path, {"unreachable": "closed"}, "redis://127.0.0.1:1/0"):
        SERVED.clear()
        assert run_all(gateway, ["acct.closed"]) == [503]
        assert SERVED == [] and gateway.published("acct.closed") == [[]]


def test_a_store_not_built_yet_is_unreachable_too(gateway) -> None:
    assert run_all(gateway, ["acct.early"]) == [200]
    assert gateway.authorizer.unchecked == 1
