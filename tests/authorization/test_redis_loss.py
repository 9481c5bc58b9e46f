"""The authorization store's Redis restarts and loses everything mid-traffic (no persistence):
authorizations fail closed until the sync task has rebuilt the store, which it does only once the
calls authorized before the loss are in the ledger; no call is ever admitted past the funds.

Real processes where they matter: a private ``redis-server`` for the store (restarted), the real
middleware under uvicorn called by the openai client, the tee into the machine's Redis, and the
real consumer (``Consumer.drain``) settling what was published into the ledger of both engines.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
import redis
from gateway.serving import served
from sqlalchemy.orm import Session, sessionmaker
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from devtools.localservers.redis_server import PrivateRedis
from worker.config import Settings
from worker.consumer.consumer import Consumer
from worker.contract.authorization import AuthorizationStore
from worker.contract.keys import Keys
from worker.core.money import Micros
from worker.gateway.authorize import Authorizer
from worker.gateway.metadata import CallInfo
from worker.gateway.middleware import BillingMiddleware
from worker.gateway.tee import Tee
from worker.ledger.credits import credit
from worker.ledger.funds import funds_of
from worker.service.authorization import SyncPolicy, backlog_passed, sync

pytestmark = [pytest.mark.redis, pytest.mark.e2e]

# Each call is charged exactly its hold (gpt-4o-mini: 0.15 and 0.60 USD per 1M tokens), so the
# funds pay for exactly FITS calls, Redis loss or not.
CHARGE_TOKENS = {"prompt_tokens": 120_000, "completion_tokens": 16_000, "total_tokens": 136_000}
HOLD = 120_000 * 15 // 100 + 16_000 * 60 // 100
FITS = 12
KEY = "k" * 32


async def chat(request: Request) -> Response:
    body = orjson.loads(await request.body())
    reply = {
        "id": f"chatcmpl-{body['user']}", "object": "chat.completion", "created": 1,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                     "finish_reason": "stop"}],
        "usage": CHARGE_TOKENS,
    }  # fmt: skip
    return Response(orjson.dumps(reply), media_type="application/json")


def test_a_lost_store_is_rebuilt_after_the_backlog_and_nothing_passes_the_funds(
    sessions: sessionmaker[Session], redis_client: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    account = f"acct-{uuid.uuid4().hex[:8]}"
    funds = FITS * HOLD
    with sessions() as session, session.begin():
        credit(session, account, Micros(funds), key=f"{account}-k", note="t", who="t",
               now=datetime.now(UTC), new_account=True)  # fmt: skip
    private = PrivateRedis(tmp_path / "auth-redis", appendonly=False)
    private.start()
    store_client = private.client()
    store = AuthorizationStore(store_client, prefix)
    keys = Keys(prefix)
    settings = Settings(prefix=prefix, batch_size=50, claim_idle_ms=60_000, hash_salt=KEY)
    consumer = Consumer(redis_client, sessions, settings, name="c1", recheck_seconds=0)
    consumer.intake  # noqa: B018 - the group exists before the first tip is noted
    events = (redis_client, keys)
    policy = SyncPolicy()
    for _ in range(3):  # the first run notes the streams' tips, a later one builds the store
        sync(sessions, store, policy, events=events)
    assert store.is_ready()

    def hook(scope: dict[str, Any], body: dict[str, Any]) -> CallInfo:
        return CallInfo(account_id=account, request_id=body["user"], reserved_micros=HOLD,
                        provider="openai")  # fmt: skip

    tee = Tee(redis_client, keys, spool_dir=tmp_path / "spool")
    authorizer = Authorizer.for_url(private.url(), prefix, unreachable="closed")
    app = BillingMiddleware(
        Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]),
        publisher=tee, hook=hook, authorizer=authorizer,
    )  # fmt: skip
    stop = threading.Event()
    statuses: list[tuple[float, int]] = []
    lost_at: list[float] = []

    def worker() -> None:
        """The consumer and the beat's sync, as a worker runs them; the consumer lags (a drain
        every 1.5 s, a sync every 50 ms), so calls are in flight when the store is lost."""
        turn = 0
        while not stop.is_set():
            if turn % 30 == 0:
                consumer.drain(0, seconds=0.05, block_ms=10)
            turn += 1
            with contextlib.suppress(redis.RedisError):  # the store's Redis is down: next run
                sync(sessions, store, policy, events=events)
            time.sleep(0.05)

    async def traffic(url: str) -> None:
        loop = asyncio.get_running_loop()
        restarting: list[asyncio.Future[None]] = []
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0) as api:
            began = time.monotonic()
            i = 0
            while time.monotonic() - began < 8:  # the consumer passes the tips within it
                try:
                    await api.chat.completions.create(
                        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}],
                        user=f"{account}-{i}",
                    )  # fmt: skip
                    statuses.append((time.monotonic(), 200))
                except openai.APIStatusError as exc:
                    statuses.append((time.monotonic(), exc.status_code))
                if i == FITS // 2:  # no persistence: the store is gone; the calls go on
                    lost_at.append(time.monotonic())
                    # From the loop's executor, whose thread outlives the restart: the server
                    # dies with the thread that started it (PR_SET_PDEATHSIG).
                    restarting.append(loop.run_in_executor(None, private.restart, 0.5))
                i += 1
                await asyncio.sleep(0.02)
        await asyncio.gather(*restarting)

    background = threading.Thread(target=worker, daemon=True)
    try:
        background.start()
        with served(app) as url:
            asyncio.run(traffic(url))
        assert tee.flush(timeout=10)
    finally:
        stop.set()
        background.join(30)
        tee.stop()
        store_client.close()
        private.stop()
    consumer.drain(0, seconds=1, block_ms=50, until_idle=True)
    after = [status for at, status in statuses if at > lost_at[0]]
    # Refused while the store was down or not rebuilt (closed), then admitted again.
    assert 503 in after, after
    assert 200 in after[after.index(503) :], after
    # Exactly the calls the funds pay for were served, before and after the loss; every other
    # was refused (402 once the funds were held or charged, 503 while the store was rebuilt).
    assert [s for _, s in statuses].count(200) == FITS, statuses
    with sessions() as session:
        left = funds_of(session, account)
    assert (left.charged, left.held, left.available) == (funds, 0, 0), left
    assert left.ties_out


def test_a_rebuild_waits_until_the_published_calls_are_acknowledged(
    redis_client: redis.Redis, prefix: str
) -> None:
    keys = Keys(prefix)
    store = AuthorizationStore(redis_client, prefix)
    redis_client.xgroup_create(keys.events(), keys.group, id="0", mkstream=True)
    first = redis_client.xadd(keys.events(), {"kind": "open"})
    assert backlog_passed(store, (redis_client, keys)) is False  # notes the tip
    assert backlog_passed(store, (redis_client, keys)) is False  # not read yet
    redis_client.xreadgroup(keys.group, "c", {keys.events(): ">"}, count=10)
    assert backlog_passed(store, (redis_client, keys)) is False  # read, not acknowledged
    redis_client.xadd(keys.events(), {"kind": "open"})  # after the tip: not waited for
    redis_client.xack(keys.events(), keys.group, first)
    assert backlog_passed(store, (redis_client, keys)) is True
