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
from typing import Any

import openai
import orjson
import pytest
import redis
from gateway.harness import MASTER_KEY, BillingWorker, LiteLLMProxy
from gateway.upstream import Upstream
from sqlalchemy.orm import sessionmaker

from devtools.demo_gateway import litellm_config
from devtools.localservers.redis_server import PrivateRedis
from worker.contract.authorization import AuthorizationStore
from worker.contract.keys import Keys
from worker.core.money import Micros
from worker.core.prices import load_price_book
from worker.gateway.reservation import Hold, hold_for, reserve
from worker.ledger.budgets import set_budget
from worker.ledger.credits import credit
from worker.ledger.database import make_engine

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]

PRICE_TOML = (
    '[[price]]\nmodel = "gpt-4o-mini"\ninput = "0.15"\noutput = "0.60"\n'
    "max_input_tokens = 128000\nmax_output_tokens = 16384\n"
)
MESSAGES = [{"role": "user", "content": "Say hello."}]
MAX_TOKENS = 1000


class Stack:
    def __init__(self, proxy: LiteLLMProxy, upstream: Upstream, store: AuthorizationStore,
                 sessions: sessionmaker, hold: int, worker: BillingWorker) -> None:  # fmt: skip
        self.proxy, self.upstream, self.store, self.sessions = proxy, upstream, store, sessions
        self.hold, self.worker = hold, worker
        self.book_path = proxy.env["BILLING_PRICE_BOOK"]

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
    config.write_text(
        litellm_config([
            ("clean", "gpt-4o-mini", upstream.scenario_url("clean")),
            ("mystery", "mystery-model-9", upstream.scenario_url("clean")),
        ])
    )  # fmt: skip
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


def raw_call(stack: Stack, user: str, **request: Any) -> int | str:
    """200, or the status and billing code the openai client raised."""
    client = openai.OpenAI(base_url=stack.proxy.base_url, api_key=MASTER_KEY, max_retries=0)
    try:
        client.chat.completions.create(**{"model": "clean", "messages": MESSAGES, **request},
                                       user=user)  # fmt: skip
        return 200
    except openai.APIStatusError as exc:
        body = exc.body if isinstance(exc.body, dict) else {}
        fields = body.get("provider_specific_fields") or {}
        return f"{exc.status_code} {fields.get('billing_code')}"
    finally:
        client.close()


def fund(stack: Stack, account: str, funds: int) -> None:
    with stack.sessions() as session, session.begin():
        credit(session, account, Micros(funds), key=f"{account}-k", note="test", who="t",
               now=datetime.now(UTC), new_account=True)  # fmt: skip
    wait_installed(stack, account, funds)


def test_without_a_limit_the_models_max_output_is_held_and_written(stack: Stack) -> None:
    """Was: 4,096 output tokens held and nothing written (3.4x overspend). The hold is the
    model's max output, and the request LiteLLM sends carries it as ``max_completion_tokens``."""
    account = f"nolimit-{uuid.uuid4().hex[:8]}"
    found = hold_for(load_price_book(str(stack.book_path)), {"model": "gpt-4o-mini",
                     "messages": MESSAGES}, datetime.now(UTC))  # fmt: skip
    assert isinstance(found, Hold) and found.output_tokens == 16_384
    fund(stack, account, int(found.micros) * 2 - 1)
    with stack.nothing_settles():
        client = openai.OpenAI(base_url=stack.proxy.base_url, api_key=MASTER_KEY, max_retries=0)
        try:
            first = client.chat.completions.with_raw_response.create(
                model="clean", messages=MESSAGES, user=account
            )
        finally:
            client.close()
        got = [raw_call(stack, account) for _ in range(2)]
        assert got == ["402 insufficient_funds", "402 insufficient_funds"], got
        # The request entry records the limit the call was sent upstream with.
        key = Keys(stack.store.prefix).request(first.headers["x-billing-request-id"])
        deadline = time.monotonic() + 10
        while not stack.store.client.exists(key):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        entry = orjson.loads(stack.store.client.xrange(key, count=1)[0][1][b"body"])
        assert entry["max_tokens"] == 16_384


def test_a_deployment_without_a_price_is_refused_before_the_upstream(stack: Stack) -> None:
    """Was: held at 0, every call admitted on funds for one."""
    account = f"unpriced-{uuid.uuid4().hex[:8]}"
    fund(stack, account, 10 * stack.hold)
    before = len(stack.upstream.sent)
    got = [raw_call(stack, account, model="mystery", max_tokens=MAX_TOKENS) for _ in range(5)]
    assert got == ["400 model_not_priced"] * 5, got
    assert len(stack.upstream.sent) == before


def test_a_model_budget_binds_the_alias_and_does_not_refill_at_the_sync(stack: Stack) -> None:
    """Was: the hook authorized the alias (``clean``) while the ledger recorded the deployment,
    so a budget for ``gpt-4o-mini`` never bound and refilled at every sync."""
    account = f"budget-{uuid.uuid4().hex[:8]}"
    fund(stack, account, 100 * stack.hold)
    with stack.sessions() as session, session.begin():
        set_budget(session, account, "day", Micros(stack.hold), model="gpt-4o-mini", note="t",
                   who="t", now=datetime.now(UTC))  # fmt: skip
    deadline = time.monotonic() + 30
    while "b|d|gpt-4o-mini" not in stack.store.figures(account):
        assert time.monotonic() < deadline, stack.store.figures(account)
        time.sleep(0.2)
    assert raw_call(stack, account, max_tokens=MAX_TOKENS) == 200
    # The worker settles the call (its charge, above 0, is now the budget's use) and the sync
    # (every second) removes it from the store and installs the ledger's figures, several times.
    deadline = time.monotonic() + 30
    while stack.store.calls(account):
        dead = stack.store.client.xrange(Keys(stack.store.prefix).dead)
        assert time.monotonic() < deadline, [e[1].get(b"reason") for e in dead]
        time.sleep(0.3)
    time.sleep(2.5)
    got = [raw_call(stack, account, max_tokens=MAX_TOKENS) for _ in range(2)]
    assert got == ["402 budget_exceeded"] * 2, got


def test_a_response_format_schema_is_held(stack: Stack) -> None:
    """Was: prompt fields beyond messages and tools not held (13x overspend with a schema)."""
    account = f"schema-{uuid.uuid4().hex[:8]}"
    schema = {"type": "object", "properties": {f"f{i}": {"type": "string",
              "description": "what this field holds, said at length " * 8} for i in range(80)}}  # fmt: skip
    shaped = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
    book = load_price_book(str(stack.book_path))
    body = {"model": "gpt-4o-mini", "messages": MESSAGES, "max_tokens": MAX_TOKENS}
    full = hold_for(book, {**body, "response_format": shaped}, datetime.now(UTC))
    assert isinstance(full, Hold) and int(full.micros) > 2 * stack.hold
    fund(stack, account, int(full.micros) - 1)
    with stack.nothing_settles():
        assert raw_call(stack, account, max_tokens=MAX_TOKENS, response_format=shaped) == (
            "402 insufficient_funds"
        )
        assert raw_call(stack, account, max_tokens=MAX_TOKENS) == 200


def test_a_zero_budget_refuses_every_call(stack: Stack) -> None:
    account = f"zero-{uuid.uuid4().hex[:8]}"
    fund(stack, account, 100 * stack.hold)
    with stack.sessions() as session, session.begin():
        set_budget(session, account, "day", Micros(0), note="kill switch", who="t",
                   now=datetime.now(UTC))  # fmt: skip
    deadline = time.monotonic() + 30
    while "b|d" not in stack.store.figures(account):
        assert time.monotonic() < deadline, stack.store.figures(account)
        time.sleep(0.2)
    assert raw_call(stack, account, max_tokens=MAX_TOKENS) == "402 budget_exceeded"
    assert raw_call(stack, account, max_tokens=0) == "402 budget_exceeded"
