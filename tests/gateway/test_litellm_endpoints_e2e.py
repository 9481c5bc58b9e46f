"""Every endpoint the LiteLLM hook bills, end to end: the real openai client (and Anthropic's own
client for the Messages API) calling the real LiteLLM proxy (the billing hook named in its config)
in front of the recorded upstream, streamed and not, and a real ``billing worker`` settling each
call at the published price of its model.

Each deployment speaks its endpoint's own shape upstream (the recorded upstream replays
tests/fixtures/endpoints): an ``openai/`` deployment for Responses and Embeddings, a
``text-completion-openai/`` one for legacy Completions, an ``anthropic/`` one for the Messages API,
whose ``api_base`` LiteLLM ends with ``/v1/messages``. Two more cross the shapes as LiteLLM
translates them: the Messages API to an OpenAI deployment (LiteLLM asks the upstream's Responses
API and answers in Anthropic's shape), and the Responses API to a chat-only deployment (LiteLLM
bridges to chat completions and answers in the Responses shape). The client's shape is what the
hook publishes, and what the worker reads.

The oracle is test_endpoints_e2e's: the providers' published prices, written there, and the usage
each recording carries.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import anthropic
import openai
import pytest
from sqlalchemy.orm import Session, sessionmaker

from devtools.demo_gateway import litellm_config
from devtools.localservers.redis_server import PrivateRedis
from worker.ledger.database import make_engine

from .harness import MASTER_KEY, BillingWorker, Call, LiteLLMProxy, wait_decided
from .test_endpoints_e2e import published_charge, recording
from .upstream import Upstream

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]

# Proxy model name → (the deployment's model, the upstream scenario it replays, the end of the
# scenario's URL LiteLLM appends itself: the anthropic provider calls ``{api_base}/v1/messages``).
DEPLOYMENTS = {
    "responses": ("gpt-4o-mini", "endpoints/responses_text", ""),
    "instruct": ("text-completion-openai/gpt-3.5-turbo-instruct", "endpoints/completions_text", ""),
    "embed": ("text-embedding-3-small", "endpoints/embeddings_array", ""),
    "claude": ("anthropic/claude-sonnet-4-5", "endpoints/messages_text", "/v1"),
    # the Messages API to an OpenAI deployment: LiteLLM asks its Responses API
    "claude-via-openai": ("gpt-4o-mini", "endpoints/responses_text", ""),
    # the Responses API to a provider without one: LiteLLM bridges to chat completions (the
    # recording answers as DeepSeek does, naming deepseek-chat, its usage with cache hits)
    "bridged": ("deepseek/deepseek-chat", "deepseek/cache_hit_miss", ""),
}


@dataclass
class Stack:
    proxy: LiteLLMProxy
    worker: BillingWorker
    sessions: sessionmaker[Session]

    def openai(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.proxy.base_url, api_key=MASTER_KEY, max_retries=0)

    def anthropic(self) -> anthropic.Anthropic:
        base = self.proxy.base_url.removesuffix("/v1")
        return anthropic.Anthropic(base_url=base, api_key=MASTER_KEY, max_retries=0)

    def decided(self, account: str, count: int) -> list[Call]:
        return wait_decided(
            self.sessions, [account], count, timeout=60, processes=(self.worker, self.proxy)
        )


@pytest.fixture(scope="module")
def stack(pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("litellm-endpoints-e2e")
    redis_server = PrivateRedis(workdir / "redis")
    redis_server.start()
    upstream = Upstream.start()
    config = workdir / "config.yaml"
    config.write_text(
        litellm_config(
            (name, model, upstream.scenario_url(scenario).removesuffix(cut or "/none"))
            for name, (model, scenario, cut) in DEPLOYMENTS.items()
        )
    )
    env = {
        "REDIS_URL": redis_server.url(0),
        "CELERY_BROKER_URL": redis_server.url(1),
        "DATABASE_URL": pg_url,
        "BILLING_PREFIX": f"gwe-{uuid.uuid4().hex[:8]}",
        "BILLING_LITELLM_ACCOUNT": "end_user,team,user,key",
        "BILLING_DRAIN_MS": "500",
        "BILLING_BLOCK_MS": "100",
        "BILLING_SPOOL_DIR": str(workdir / "spool"),
    }
    proxy = LiteLLMProxy(config, env, workdir / "proxy")
    worker = BillingWorker(env, workdir / "worker")
    engine = make_engine(pg_url)
    try:
        proxy.start()
        worker.start()
        proxy.wait_ready()
        yield Stack(proxy, worker, sessionmaker(engine))
    finally:
        proxy.stop()
        worker.stop()
        upstream.stop()
        redis_server.stop()
        engine.dispose()


def new_account() -> str:
    return f"acct-lle-{uuid.uuid4().hex[:10]}"


def settled_twice(stack: Stack, account: str, model: str, prompt: int, completion: int) -> None:
    """The account's two calls (streamed and not) both settled at the recording's usage, each at
    the published price: the same charge both ways."""
    calls = stack.decided(account, 2)
    assert sorted(call.stream for call in calls) == [False, True], calls
    expected = published_charge(model, prompt, completion)
    for call in calls:
        assert (call.status, call.reason, call.usage_source) == ("settled", None, "reported"), call
        assert (call.prompt_tokens, call.completion_tokens) == (prompt, completion)
        assert call.charge_micros == expected > 0


def test_a_responses_call_is_billed_streamed_and_not(stack: Stack) -> None:
    account = new_account()
    client = stack.openai()
    answer = client.responses.create(model="responses", input="Tell me a story.", user=account)
    assert answer.status == "completed"
    with client.responses.stream(
        model="responses", input="Tell me a story.", user=account
    ) as events:
        final = events.get_final_response()
    assert final.output_text == answer.output_text
    usage = recording("responses_text")["body"]["usage"]
    settled_twice(stack, account, "gpt-4o-mini", usage["input_tokens"], usage["output_tokens"])


def test_a_legacy_completion_is_billed_streamed_and_not(stack: Stack) -> None:
    account = new_account()
    client = stack.openai()
    prompt = "Say this is a test"
    plain = client.completions.create(model="instruct", prompt=prompt, user=account)
    chunks = list(client.completions.create(model="instruct", prompt=prompt, stream=True,
                                            user=account))  # fmt: skip
    assert "".join(c.choices[0].text or "" for c in chunks if c.choices) == plain.choices[0].text
    # The hook asked the upstream for usage (LiteLLM does for chat only) and kept its chunk from
    # a client that did not ask: no usage reached it, not even LiteLLM's zeros.
    assert all(chunk.usage is None for chunk in chunks)
    usage = recording("completions_text")["body"]["usage"]
    settled_twice(
        stack, account, "gpt-3.5-turbo-instruct", usage["prompt_tokens"], usage["completion_tokens"]
    )


def test_a_legacy_completion_that_asks_for_usage_gets_it(stack: Stack) -> None:
    account = new_account()
    chunks = list(
        stack.openai().completions.create(
            model="instruct", prompt="Say this is a test", stream=True, user=account,
            stream_options={"include_usage": True},
        )
    )  # fmt: skip
    usage = recording("completions_text")["body"]["usage"]
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == usage["prompt_tokens"]
    (call,) = stack.decided(account, 1)
    assert (call.status, call.prompt_tokens) == ("settled", usage["prompt_tokens"])


def test_an_embeddings_call_is_billed_for_every_input(stack: Stack) -> None:
    account = new_account()
    answer = stack.openai().embeddings.create(
        model="embed", input=["first", "second"], user=account
    )
    assert [item.index for item in answer.data] == [0, 1]
    (call,) = stack.decided(account, 1)
    usage = recording("embeddings_array")["body"]["usage"]
    assert (call.status, call.reason, call.usage_source) == ("settled", None, "reported")
    assert (call.prompt_tokens, call.completion_tokens) == (usage["prompt_tokens"], 0)
    assert call.charge_micros == published_charge(
        "text-embedding-3-small", usage["prompt_tokens"], 0
    )


@pytest.mark.parametrize(
    ("alias", "name", "model", "text"),
    [
        ("claude", "messages_text", "claude-sonnet-4-5", "Hello!"),
        ("claude-via-openai", "responses_text", "gpt-4o-mini", None),
    ],
)
def test_an_anthropic_messages_call_is_billed_streamed_and_not(
    stack: Stack, alias: str, name: str, model: str, text: str | None
) -> None:
    """Passed through to Anthropic (raw events), or translated from an OpenAI deployment's
    Responses API into Anthropic's shape: each billed at its model's price from the usage the
    client was given."""
    account = new_account()
    client = stack.anthropic()
    messages = [{"role": "user", "content": "Hello"}]
    extra = {"extra_body": {"user": account}}
    plain = client.messages.create(model=alias, max_tokens=1024, messages=messages, **extra)
    with client.messages.stream(model=alias, max_tokens=1024, messages=messages, **extra) as s:
        final = s.get_final_message()
    assert final.content[0].text == plain.content[0].text == (text or plain.content[0].text)
    assert (final.usage.input_tokens, final.usage.output_tokens) == (
        plain.usage.input_tokens,
        plain.usage.output_tokens,
    )
    usage = recording(name)["body"]["usage"]
    settled_twice(stack, account, model, usage["input_tokens"], usage["output_tokens"])


def test_a_responses_call_bridged_to_chat_completions_is_billed_as_answered(stack: Stack) -> None:
    """A deployment without a Responses API: LiteLLM calls its chat completions and answers in
    the Responses shape; the hook publishes that answer, whose usage is the chat call's."""
    account = new_account()
    client = stack.openai()
    answer = client.responses.create(model="bridged", input="hi", user=account)
    with client.responses.stream(model="bridged", input="hi", user=account) as events:
        final = events.get_final_response()
    assert answer.usage is not None and final.usage is not None
    assert final.usage.input_tokens == answer.usage.input_tokens
    calls = stack.decided(account, 2)
    for call in calls:
        assert (call.status, call.reason, call.model) == ("settled", None, "deepseek-chat"), call
        assert (call.prompt_tokens, call.completion_tokens) == (
            answer.usage.input_tokens,
            answer.usage.output_tokens,
        )
    assert len({call.charge_micros for call in calls}) == 1, calls
