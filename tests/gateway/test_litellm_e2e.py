"""End to end through the real LiteLLM proxy: openai-python → ``litellm`` (the billing hook named in
its config) → the recorded upstream, and a real ``billing worker`` settling every call.

The ledger is checked against what the upstream sent (``Upstream.sent``), priced by
``harness.oracle_charge`` from this module's own price table, which the worker also reads
(``BILLING_PRICE_BOOK``): the worker's pricing code is not the oracle. Redis is a private server, so
the last test may stop it mid-run.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from consumer.waiting import wait_for
from sqlalchemy.orm import Session, sessionmaker

from devtools.demo_gateway import litellm_config
from devtools.localservers.redis_server import PrivateRedis
from worker.ledger.database import make_engine

from .harness import MASTER_KEY, BillingWorker, Call, LiteLLMProxy, oracle_charge, wait_decided
from .upstream import Sent, Upstream

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]

# USD per 1M tokens (= micro-USD per token); the models the scenarios' recordings name.
PRICES: dict[str, dict[str, str]] = {
    "gpt-4o-mini": {"input": "0.15", "cached_input": "0.075", "output": "0.60"},
    "gpt-4o-2024-08-06": {"input": "2.50", "cached_input": "1.25", "output": "10.00"},
    "gpt-3.5-turbo-0613": {"input": "1.50", "output": "2.00"},
    "deepseek-reasoner": {"input": "0.55", "cached_input": "0.14", "output": "2.19"},
}
# Proxy model name → (the deployment's model, the upstream scenario it replays).
DEPLOYMENTS = {
    "clean": ("gpt-4o-mini", "clean"),
    "clean_body": ("gpt-4o-2024-08-06", "clean_body"),
    "tool_calls": ("gpt-4o-2024-08-06", "tool_calls"),
    "n2": ("gpt-4o-2024-08-06", "n2"),
    "usage_less": ("gpt-3.5-turbo-0613", "usage_less"),
    "error_finish": ("deepseek-reasoner", "error_finish"),
    "dropped": ("gpt-4o-mini", "dropped"),
    "slow": ("gpt-4o-mini", "slow"),
}
MESSAGES = [{"role": "user", "content": "Say hello."}]


def price_toml() -> str:
    rows = []
    for model, price in PRICES.items():
        rows.append("[[price]]")
        rows.append(f'model = "{model}"')
        rows += [f'{kind} = "{value}"' for kind, value in price.items()]
    return "\n".join(rows) + "\n"


class Stack:
    def __init__(self, redis: PrivateRedis, upstream: Upstream, proxy: LiteLLMProxy,
                 worker: BillingWorker, sessions: sessionmaker[Session],
                 spool_dir: Path) -> None:  # fmt: skip
        self.redis = redis
        self.spool_dir = spool_dir
        self.upstream = upstream
        self.proxy = proxy
        self.worker = worker
        self.sessions = sessions
        self.client = openai.OpenAI(base_url=proxy.base_url, api_key=MASTER_KEY, max_retries=0)

    def call(self, model: str, *, stream: bool, account: str, **extra: Any) -> tuple[Any, Sent]:
        """One call through the proxy; what the client got and what the upstream sent for it."""
        before = len(self.upstream.sent)
        if stream:
            got: Any = list(
                self.client.chat.completions.create(
                    model=model, messages=MESSAGES, stream=True, user=account, **extra
                )
            )
        else:
            got = self.client.chat.completions.create(
                model=model, messages=MESSAGES, user=account, **extra
            )
        sent = self.upstream.sent[before:]
        assert len(sent) == 1, f"one upstream call expected, got {len(sent)}"
        return got, sent[0]

    def spooled(self) -> int:
        """Bytes in the proxy's spool files (its tee empties its file once replayed)."""
        return sum(path.stat().st_size for path in self.spool_dir.glob("*.spool"))

    def decided(self, accounts: list[str], count: int) -> list[Call]:
        return wait_decided(self.sessions, accounts, count, processes=(self.worker, self.proxy))


@pytest.fixture(scope="module")
def stack(pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("litellm-e2e")
    redis_server = PrivateRedis(workdir / "redis")
    redis_server.start()
    upstream = Upstream.start()
    book = workdir / "prices.toml"
    book.write_text(price_toml())
    config = workdir / "config.yaml"
    config.write_text(
        litellm_config(
            (name, model, upstream.scenario_url(scenario))
            for name, (model, scenario) in DEPLOYMENTS.items()
        )
    )
    env = {
        "REDIS_URL": redis_server.url(0),
        "CELERY_BROKER_URL": redis_server.url(1),
        "DATABASE_URL": pg_url,
        "BILLING_PREFIX": f"gw-{uuid.uuid4().hex[:8]}",
        "BILLING_PRICE_BOOK": str(book),
        "BILLING_LITELLM_ACCOUNT": "end_user,team,user,key",
        "BILLING_DRAIN_MS": "1000",
        "BILLING_BLOCK_MS": "100",
        "BILLING_SWEEP_IDLE_MS": "3000",
        "BILLING_SWEEP_INTERVAL_SECONDS": "1",
        "BILLING_RECHECK_SECONDS": "1",
        "BILLING_CLAIM_IDLE_MS": "3000",
        "BILLING_SPOOL_DIR": str(workdir / "spool"),
    }
    proxy = LiteLLMProxy(config, env, workdir / "proxy")
    worker = BillingWorker(env, workdir / "worker")
    engine = make_engine(pg_url)
    try:
        proxy.start()
        worker.start()
        proxy.wait_ready()
        yield Stack(redis_server, upstream, proxy, worker, sessionmaker(engine), workdir / "spool")
    finally:
        proxy.stop()
        worker.stop()
        upstream.stop()
        redis_server.stop()
        engine.dispose()


def new_account() -> str:
    return f"acct-gw-{uuid.uuid4().hex[:10]}"


def upstream_usage(sent: Sent) -> dict[str, Any]:
    """The last usage block the upstream sent for a call."""
    if sent.body is not None:
        return sent.body["usage"]
    blocks = [f["usage"] for f in sent.frames or [] if isinstance(f, dict) and f.get("usage")]
    return blocks[-1]


@pytest.mark.parametrize("scenario", ["clean", "clean_body", "tool_calls"])
def test_twins_settle_at_what_the_upstream_sent(stack: Stack, scenario: str) -> None:
    """A streamed call (usage asked for), a streamed call that did not ask (LiteLLM asks upstream
    anyway; the hook bills that block) and a non-streamed call: each settled at the upstream's
    usage, priced by the oracle, so the twins cost the same."""
    account = new_account()
    model = DEPLOYMENTS[scenario][0]
    sents = []
    chunks, sent = stack.call(
        scenario, stream=True, account=account, stream_options={"include_usage": True}
    )
    assert chunks[-1].usage is not None  # the client got the usage it asked for
    sents.append(sent)
    silent, sent = stack.call(scenario, stream=True, account=account)
    # LiteLLM asks the upstream for usage on every stream, as the ASGI middleware does
    # (``worker.gateway.usage_option``), and keeps the usage-only chunk from a client that did
    # not ask: it got every other chunk, and no usage.
    assert sent.include_usage
    assert silent and all(c.choices for c in silent) and all(c.usage is None for c in silent)
    sents.append(sent)
    body, sent = stack.call(scenario, stream=False, account=account)
    assert body.usage.prompt_tokens == upstream_usage(sent)["prompt_tokens"]
    sents.append(sent)

    calls = stack.decided([account], 3)
    assert [c.stream for c in calls] == [True, True, False]
    for call, sent in zip(calls, sents, strict=True):
        usage = upstream_usage(sent)
        assert (call.status, call.reason, call.usage_source, call.model) == (
            "settled",
            None,
            "reported",
            model,
        ), calls
        assert (call.prompt_tokens, call.completion_tokens) == (
            usage["prompt_tokens"],
            usage["completion_tokens"],
        )
        assert call.charge_micros == oracle_charge(PRICES[model], usage)
    assert len({c.charge_micros for c in calls}) == 1


def test_n2_stream_loses_a_finish_in_litellm(stack: Stack) -> None:
    """Two choices streamed: LiteLLM 1.108.7 forwards one finish chunk only (index 0), so choice 1
    never finishes on the client's wire and the worker keeps the hold (``incomplete``); the
    non-streamed twin settles at the upstream's usage."""
    account = new_account()
    chunks, _ = stack.call(
        "n2", stream=True, account=account, n=2, stream_options={"include_usage": True}
    )
    finished = {c.choices[0].index for c in chunks if c.choices and c.choices[0].finish_reason}
    assert finished == {0}
    _, sent = stack.call("n2", stream=False, account=account, n=2)
    streamed, plain = stack.decided([account], 2)
    assert (streamed.status, streamed.reason) == ("unsettled", "incomplete")
    assert (plain.status, plain.usage_source) == ("settled", "reported")
    usage = upstream_usage(sent)
    assert plain.charge_micros == oracle_charge(PRICES["gpt-4o-2024-08-06"], usage)


def test_upstream_failures_are_never_billed_as_clean(stack: Stack) -> None:
    """The connection dropped mid-stream: the proxy sends the client an error event, the call stays
    unsettled (hold kept). Dropped before a non-streamed body: an HTTP error, the hold released."""
    account = new_account()
    with pytest.raises(openai.APIError):
        stack.call("dropped", stream=True, account=account)
    with pytest.raises(openai.APIError):
        stack.call("dropped", stream=False, account=account)
    streamed, plain = stack.decided([account], 2)
    assert (streamed.stream, streamed.status, streamed.reason) == (
        True,
        "unsettled",
        "error_finish",
    )
    assert (plain.status, plain.charge_micros) == ("voided", None)


def test_error_finish_is_rewritten_by_litellm(stack: Stack) -> None:
    """DeepSeek's ``insufficient_system_resource`` finish reaches the client as ``stop`` (LiteLLM maps
    finish reasons), so what the hook publishes settles at the usage the upstream sent."""
    account = new_account()
    chunks, sent = stack.call(
        "error_finish", stream=True, account=account, stream_options={"include_usage": True}
    )
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert "stop" in finishes and "insufficient_system_resource" not in finishes
    (call,) = stack.decided([account], 1)
    usage = upstream_usage(sent)
    assert (call.status, call.completion_tokens) == ("settled", usage["completion_tokens"])
    assert call.charge_micros == oracle_charge(PRICES["deepseek-reasoner"], usage)


def test_usage_less_body_gets_zero_usage_from_litellm_and_stays_unsettled(stack: Stack) -> None:
    """Non-streamed, the usage-less upstream body reaches the client with LiteLLM's all-zero usage
    (tests/fixtures/providers/litellm/zero_usage_body.json was recorded here): the function call
    counted as 0 completion tokens is unsettled ``implausible_usage``, never settled at 0."""
    account = new_account()
    body, sent = stack.call("usage_less", stream=False, account=account)
    assert sent.body is not None and "usage" not in sent.body
    assert (body.usage.prompt_tokens, body.usage.completion_tokens) == (0, 0)
    assert body.choices[0].message.function_call is not None
    (call,) = stack.decided([account], 1)
    assert (call.status, call.reason, call.charge_micros) == (
        "unsettled",
        "implausible_usage",
        None,
    )


def test_usage_less_stream_is_billed_at_litellms_count(stack: Stack) -> None:
    """The upstream sent no usage; LiteLLM counts the tokens itself and sends that block, which is
    what the worker bills (``reported``): the counts the client saw, not a silent zero."""
    account = new_account()
    chunks, sent = stack.call(
        "usage_less", stream=True, account=account, stream_options={"include_usage": True}
    )
    assert not any(isinstance(f, dict) and f.get("usage") for f in sent.frames or [])
    usage = chunks[-1].usage
    (call,) = stack.decided([account], 1)
    assert (call.status, call.usage_source) == ("settled", "reported")
    assert (call.prompt_tokens, call.completion_tokens) == (
        usage.prompt_tokens,
        usage.completion_tokens,
    )
    expected = oracle_charge(PRICES["gpt-3.5-turbo-0613"], usage.model_dump())
    assert call.charge_micros == expected > 0


def test_client_disconnect_leaves_an_incomplete_call(stack: Stack) -> None:
    """The client reads the first chunk and hangs up while the upstream pauses: the hook closes the
    call as ``client_disconnect`` and the worker keeps it unsettled ``incomplete``."""
    account = new_account()
    with httpx.Client(timeout=10) as http:
        request = {"model": "slow", "messages": MESSAGES, "stream": True, "user": account}
        headers = {"Authorization": f"Bearer {MASTER_KEY}"}
        with http.stream(
            "POST", f"{stack.proxy.base_url}/chat/completions", json=request, headers=headers
        ) as answer:
            assert answer.status_code == 200
            first = next(answer.iter_lines())
            assert first.startswith("data: ")
    (call,) = stack.decided([account], 1)
    assert (call.status, call.reason) == ("unsettled", "incomplete")


def test_calls_made_while_redis_is_down_are_spooled_and_settle_once(stack: Stack) -> None:
    """Redis stopped mid-run: calls made through the proxy while it is down (streamed and not) go to
    the hook's spool; Redis comes back, the tee replays the spool, and the worker settles every
    call exactly once, at the upstream's usage priced by the oracle."""
    account = new_account()
    sents = []
    _, sent = stack.call("clean", stream=True, account=account)
    sents.append(sent)
    stack.decided([account], 1)  # the first call is settled before Redis goes away
    stack.redis.stop()
    try:
        for stream in (True, False, True, False):
            _, sent = stack.call("clean", stream=stream, account=account)
            sents.append(sent)
        wait_for(lambda: stack.spooled() > 0, 20, "the hook spooled", stack.proxy.log_tail)
    finally:
        stack.redis.start()
    calls = stack.decided([account], len(sents))
    assert len(calls) == len(sents) == len({c.request_id for c in calls})
    assert [c.stream for c in calls] == [True, True, False, True, False]
    for call, sent in zip(calls, sents, strict=True):
        assert (call.status, call.usage_source) == ("settled", "reported"), calls
        assert call.charge_micros == oracle_charge(PRICES["gpt-4o-mini"], upstream_usage(sent))
    wait_for(lambda: stack.spooled() == 0, 20, "the spool replayed", stack.proxy.log_tail)
