"""A hold is a true upper bound, through the real middleware: a uvicorn-served Starlette app, the
real openai client (or httpx for raw bodies), the authorization store in the real Redis. The
middleware prices each hold itself (the hook gives none), as a gateway without its own rule does.
Each test is a measured overspend of issue 48 that admitted what the funds did not cover."""

from __future__ import annotations

import asyncio
import gzip
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import openai
import orjson
import pytest
import redis
from gateway.serving import served
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from worker.contract.authorization import budget_field
from worker.contract.keys import Keys
from worker.core.prices import load_price_book
from worker.gateway.authorize import Authorizer
from worker.gateway.metadata import CallInfo
from worker.gateway.middleware import BillingMiddleware
from worker.gateway.reservation import Hold, hold_for
from worker.gateway.tee import Tee

pytestmark = pytest.mark.redis

BOOK = load_price_book()
MESSAGES = [{"role": "user", "content": "Say hello."}]
RECEIVED: dict[str, tuple[bytes, dict[str, str]]] = {}  # user → the body and headers the app got


async def chat(request: Request) -> Response:
    raw = await request.body()
    body = orjson.loads(raw)
    RECEIVED[body["user"]] = (raw, {k.lower(): v for k, v in request.headers.items()})
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
    free = body["user"].endswith(".free")  # a gateway that holds nothing for this call
    return CallInfo(account_id=account, request_id=body["user"], provider="openai",
                    reserved_micros=0 if free else None)  # fmt: skip


class Gateway:
    def __init__(self, url: str, authorizer: Authorizer) -> None:
        self.url, self.authorizer = url, authorizer
        self.store = authorizer.store

    def fund(self, account: str, funds: int | None, **fields: int) -> None:
        self.store.install(account, funds=funds, charged=0, fields=fields)

    def call(self, user: str, **request: Any) -> int | str:
        """200, or the status and code the openai client raised."""
        body = {"model": "gpt-4o-mini", "messages": MESSAGES, **request}

        async def one() -> int | str:
            async with openai.AsyncOpenAI(base_url=self.url + "/v1", api_key="k") as client:
                try:
                    await client.chat.completions.create(user=user, **body)
                    return 200
                except openai.APIStatusError as exc:
                    code = exc.body.get("code") if isinstance(exc.body, dict) else None
                    return f"{exc.status_code} {code}"

        return asyncio.run(one())


def serve(tmp_path: Any, **options: Any) -> Iterator[Gateway]:
    prefix = f"t-holds-{uuid.uuid4().hex[:10]}"
    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    tee = Tee(client, Keys(prefix), spool_dir=tmp_path / "spool")
    authorizer = Authorizer.for_url("redis://127.0.0.1:6379/0", prefix, **options)
    authorizer.store.mark_ready()
    app = BillingMiddleware(
        Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]),
        publisher=tee,
        hook=hook,
        prices=BOOK,
        authorizer=authorizer,
    )
    try:
        with served(app) as url:
            yield Gateway(url, authorizer)
    finally:
        tee.stop()
        found = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if found:
            client.delete(*found)
        client.close()


@pytest.fixture
def gateway(tmp_path: Any) -> Iterator[Gateway]:
    yield from serve(tmp_path)


def held(body: dict[str, Any]) -> Hold:
    found = hold_for(BOOK, body, datetime.now(UTC), provider="openai")
    assert isinstance(found, Hold)
    return found


def user(account: str, i: int | str) -> str:
    return f"{account}.{i}"


def test_without_a_limit_the_hold_is_the_models_max_output_written_into_the_request(
    gateway: Gateway,
) -> None:
    """Was: 4,096 output tokens held, nothing written, so one call could spend 3.4x its hold.
    Funds for one hold at the model's max output admit one call, whose request upstream carries
    the limit held; a request with its own limit reaches the app byte for byte."""
    account = f"a{uuid.uuid4().hex[:8]}"
    hold = held({"model": "gpt-4o-mini", "messages": MESSAGES, "user": user(account, 0)})
    assert hold.write == "max_completion_tokens" and hold.output_tokens == 16_384
    gateway.fund(account, int(hold.micros) * 2 - 1)
    got = [gateway.call(user(account, i)) for i in range(3)]
    assert got == [200, "402 insufficient_funds", "402 insufficient_funds"], got
    raw, headers = RECEIVED[user(account, 0)]
    assert orjson.loads(raw)["max_completion_tokens"] == hold.output_tokens
    assert headers["content-length"] == str(len(raw))

    stated = orjson.dumps({"model": "gpt-4o-mini", "messages": MESSAGES, "max_tokens": 5,
                           "user": user(account, "stated")})  # fmt: skip
    with httpx.Client(base_url=gateway.url) as client:
        assert client.post("/v1/chat/completions", content=stated).status_code == 200
    assert RECEIVED[user(account, "stated")][0] == stated


def test_a_gzip_body_gets_its_limit_inflated(gateway: Gateway) -> None:
    account = f"z{uuid.uuid4().hex[:8]}"
    gateway.fund(account, 10**9)
    body = {"model": "gpt-4o-mini", "messages": MESSAGES, "user": user(account, 0)}
    headers = {"content-encoding": "gzip", "content-type": "application/json"}
    with httpx.Client(base_url=gateway.url) as client:
        sent = client.post("/v1/chat/completions", content=gzip.compress(orjson.dumps(body)),
                           headers=headers)  # fmt: skip
    assert sent.status_code == 200
    raw, got = RECEIVED[user(account, 0)]
    assert "content-encoding" not in got
    assert orjson.loads(raw) == {**body, "max_completion_tokens": 16_384}


def test_a_response_format_schema_is_held(gateway: Gateway) -> None:
    """Was: prompt fields beyond messages and tools not held, 13x overspend with a large schema."""
    account = f"s{uuid.uuid4().hex[:8]}"
    schema = {"type": "object", "properties": {f"f{i}": {"type": "string",
              "description": "what this field holds, said at length " * 8} for i in range(80)}}  # fmt: skip
    shaped = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
    plain = held({"model": "gpt-4o-mini", "messages": MESSAGES, "max_tokens": 10})
    full = held({"model": "gpt-4o-mini", "messages": MESSAGES, "max_tokens": 10,
                 "response_format": shaped})  # fmt: skip
    assert full.micros > 5 * plain.micros
    gateway.fund(account, int(full.micros) - 1)
    assert gateway.call(user(account, 0), max_tokens=10, response_format=shaped) == (
        "402 insufficient_funds"
    )
    assert gateway.call(user(account, 1), max_tokens=10) == 200


def test_a_model_without_a_price_is_refused_never_held_at_0(gateway: Gateway) -> None:
    """Was: held at 0, 20 of 20 calls admitted on funds for one."""
    account = f"u{uuid.uuid4().hex[:8]}"
    gateway.fund(account, int(held({"model": "gpt-4o-mini", "messages": MESSAGES}).micros))
    got = [gateway.call(user(account, i), model="openai/gpt-4o-mini") for i in range(20)]
    assert got == ["400 model_not_priced"] * 20
    assert not any(k.startswith(account) for k in RECEIVED)


def test_a_model_without_a_price_is_held_at_the_ceiling_when_set(tmp_path: Any) -> None:
    ceiling = 50_000
    for gateway in serve(tmp_path, unpriced_hold=ceiling):
        account = f"c{uuid.uuid4().hex[:8]}"
        gateway.fund(account, ceiling + ceiling // 2)
        got = [gateway.call(user(account, i), model="no-such-model") for i in range(20)]
        assert got.count(200) == 1 and got.count("402 insufficient_funds") == 19, got


def test_a_zero_budget_refuses_everything_even_a_hold_of_0(gateway: Gateway) -> None:
    """Was: a call held at 0 passed a $0 budget (the kill switch)."""
    account = f"k{uuid.uuid4().hex[:8]}"
    gateway.fund(account, 10**9, **{budget_field("day"): 0})
    assert gateway.call(user(account, "free")) == "402 budget_exceeded"
    assert gateway.call(user(account, 1), max_tokens=5) == "402 budget_exceeded"


def test_a_model_budget_holds_for_every_spelling_of_the_model(gateway: Gateway) -> None:
    """Was: the budget matched the exact name; a dated id went around it (7x)."""
    account = f"m{uuid.uuid4().hex[:8]}"
    one = held({"model": "gpt-4o-mini", "messages": MESSAGES, "max_tokens": 50})
    dated = held({"model": "gpt-4o-mini-2024-07-18", "messages": MESSAGES, "max_tokens": 50})
    gateway.fund(account, 10**9, **{budget_field("day", "gpt-4o-mini"): int(one.micros) + 1})
    assert gateway.call(user(account, 0), model="gpt-4o-mini", max_tokens=50) == 200
    assert int(dated.micros) > 1
    assert gateway.call(user(account, 1), model="gpt-4o-mini-2024-07-18", max_tokens=50) == (
        "402 budget_exceeded"
    )


def test_a_huge_prompt_is_priced_off_the_loop_and_never_admitted_unchecked(
    gateway: Gateway,
) -> None:
    """Was: tokenizing 5.7 MB on the event loop stalled the gateway 1.75-2.8 s, and the Redis
    call timed out into an unchecked admission. Now the poor account's huge call is refused and
    the small calls beside it are answered meanwhile."""
    poor, rich = f"p{uuid.uuid4().hex[:8]}", f"r{uuid.uuid4().hex[:8]}"
    gateway.fund(poor, 1_000)
    gateway.fund(rich, 10**9)
    huge = orjson.dumps({"model": "gpt-4o-mini", "max_tokens": 5, "user": user(poor, 0),
                         "messages": [{"role": "user", "content": "word " * 1_140_000}]})  # fmt: skip

    async def run() -> tuple[int, list[float]]:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as client:
            big = asyncio.create_task(client.post("/v1/chat/completions", content=huge))
            await asyncio.sleep(0.3)  # the big body is being read and priced
            times = []
            for i in range(5):
                small = orjson.dumps({"model": "gpt-4o-mini", "max_tokens": 5,
                                      "messages": MESSAGES, "user": user(rich, i)})  # fmt: skip
                start = time.monotonic()
                answer = await client.post("/v1/chat/completions", content=small)
                assert answer.status_code == 200
                times.append(time.monotonic() - start)
            return (await big).status_code, times

    status, times = asyncio.run(run())
    assert status == 402
    assert gateway.authorizer.unchecked == 0
    assert max(times) < 0.5, times
