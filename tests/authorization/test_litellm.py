"""Spend control through the real LiteLLM proxy: openai-python → ``litellm`` with the billing hook
and ``BILLING_AUTHORIZE=1`` → the recorded upstream, and a real ``billing worker`` whose sync task
builds the authorization store from the ledger.

The proxy's model names are aliases (``clean`` routes to ``gpt-4o-mini``): the hook holds what the
deployment would cost. Unknown accounts get a default budget of three holds.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime

import openai
import pytest
import redis
from gateway.harness import MASTER_KEY, BillingWorker, LiteLLMProxy
from gateway.upstream import Upstream
from sqlalchemy.orm import sessionmaker

from devtools.demo_gateway import litellm_config
from devtools.localservers.redis_server import PrivateRedis
from worker.contract.authorization import AuthorizationStore
from worker.core.money import Micros
from worker.core.prices import load_price_book
from worker.gateway.reservation import reserve
from worker.ledger.credits import credit
from worker.ledger.database import make_engine

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]

PRICE_TOML = '[[price]]\nmodel = "gpt-4o-mini"\ninput = "0.15"\noutput = "0.60"\n'
MESSAGES = [{"role": "user", "content": "Say hello."}]
MAX_TOKENS = 1000


class Stack:
    def __init__(self, proxy: LiteLLMProxy, upstream: Upstream, store: AuthorizationStore,
                 sessions: sessionmaker, hold: int, worker: BillingWorker) -> None:  # fmt: skip
        self.proxy, self.upstream, self.store, self.sessions = proxy, upstream, store, sessions
        self.hold, self.worker = hold, worker

    @contextmanager
    def nothing_settles(self) -> Iterator[None]:
        """The billing worker stopped for the block: no call settles, so no hold is released
        and no room comes back while the burst is being authorized. A call that settled at
        less than its hold would leave room for one more (that is correct, and made this test
        flaky: 4 of 12 admitted once on a loaded machine)."""
        self.worker.stop()
        try:
            yield
        finally:
            self.worker.start()

    def call(self, user: str) -> int | str:
        """200, or the status and code the openai client raised (with its retries on)."""
        client = openai.OpenAI(base_url=self.proxy.base_url, api_key=MASTER_KEY, max_retries=2)
        try:
            got = client.chat.completions.with_raw_response.create(
                model="clean", messages=MESSAGES, user=user, max_tokens=MAX_TOKENS
            )
            assert got.headers.get("x-billing-request-id", "").startswith("req_litellm_")
            return 200
        except openai.APIStatusError as exc:
            body = exc.body if isinstance(exc.body, dict) else {}
            assert body.get("type") == "budget_exceeded"  # as LiteLLM's own budget errors
            return f"{exc.status_code} {body['provider_specific_fields']['billing_code']}"
        finally:
            client.close()


@pytest.fixture(scope="module")
def stack(pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("litellm-auth")
    redis_server = PrivateRedis(workdir / "redis")
    redis_server.start()
    upstream = Upstream.start()
    book = workdir / "prices.toml"
    book.write_text(PRICE_TOML)
    config = workdir / "config.yaml"
    config.write_text(litellm_config([("clean", "gpt-4o-mini", upstream.scenario_url("clean"))]))
    prefix = f"gw-{uuid.uuid4().hex[:8]}"
    hold = int(
        reserve(
            load_price_book(str(book)),
            {"model": "gpt-4o-mini", "messages": MESSAGES, "max_tokens": MAX_TOKENS},
            datetime.now(UTC),
        )
    )
    env = {
        "REDIS_URL": redis_server.url(0),
        "CELERY_BROKER_URL": redis_server.url(1),
        "DATABASE_URL": pg_url,
        "BILLING_PREFIX": prefix,
        "BILLING_PRICE_BOOK": str(book),
        "BILLING_LITELLM_ACCOUNT": "end_user,team,user,key",
        "BILLING_SPOOL_DIR": str(workdir / "spool"),
        "BILLING_AUTHORIZE": "1",
        "BILLING_AUTH_SYNC_SECONDS": "1",
        "BILLING_AUTH_UNKNOWN_ACCOUNT": "default_budget",
        "BILLING_AUTH_DEFAULT_BUDGET_USD": str(Micros(3 * hold).usd()),
        "BILLING_DRAIN_MS": "1000",
        "BILLING_BLOCK_MS": "100",
    }
    proxy = LiteLLMProxy(config, env, workdir / "proxy")
    worker = BillingWorker(env, workdir / "worker")
    engine = make_engine(pg_url)
    client = redis.Redis.from_url(redis_server.url(0))
    store = AuthorizationStore(client, prefix)
    try:
        proxy.start()
        worker.start()
        proxy.wait_ready()
        deadline = time.monotonic() + 60
        while not store.is_ready():
            assert time.monotonic() < deadline, worker.log_tail()
            time.sleep(0.2)
        yield Stack(proxy, upstream, store, sessionmaker(engine), hold, worker)
    finally:
        proxy.stop()
        worker.stop()
        upstream.stop()
        client.close()
        redis_server.stop()
        engine.dispose()


def wait_installed(stack: Stack, account: str, funds: int) -> None:
    deadline = time.monotonic() + 30
    while stack.store.figures(account).get("funds") != str(funds):
        assert time.monotonic() < deadline, stack.store.figures(account)
        time.sleep(0.2)


def test_concurrent_calls_are_admitted_only_while_their_holds_fit(stack: Stack) -> None:
    account = f"acct-{uuid.uuid4().hex[:8]}"
    funds = 5 * stack.hold + stack.hold - 1
    with stack.sessions() as session, session.begin():
        credit(session, account, Micros(funds), key=f"{account}-k", note="test", who="t",
               now=datetime.now(UTC), new_account=True)  # fmt: skip
    wait_installed(stack, account, funds)
    before = len(stack.upstream.sent)
    with stack.nothing_settles(), ThreadPoolExecutor(20) as pool:
        got = list(pool.map(stack.call, [account] * 20))
    assert got.count(200) == 5, got
    assert got.count("402 insufficient_funds") == 15, got
    assert len(stack.upstream.sent) - before == 5  # refused before the upstream, never retried


def test_concurrent_first_calls_of_a_new_end_user_fit_the_default_budget(stack: Stack) -> None:
    """BerriAI/litellm#40095, through LiteLLM itself: only what fits the default budget."""
    user = f"new-{uuid.uuid4().hex[:8]}"
    with stack.nothing_settles(), ThreadPoolExecutor(12) as pool:
        got = list(pool.map(stack.call, [user] * 12))
    assert got.count(200) == 3, got
    assert got.count("402 budget_exceeded") == 9, got
