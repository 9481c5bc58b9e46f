"""Every endpoint the ASGI gateway bills, end to end: the real openai client (and Anthropic's own
client for the Messages API) calling the example gateway (``BillingMiddleware``) in front of the
recorded upstream, streamed and not, and a real ``billing worker`` settling each call at the
published price of its model.

The oracle is the providers' published prices per 1M tokens, written here (not read from the book)
and the usage each recording carries (tests/fixtures/endpoints, each naming its source).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import anthropic
import openai
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from devtools.example_app import create_app
from devtools.localservers.redis_server import PrivateRedis
from models.reservations import Reservation
from worker.contract.keys import Keys
from worker.gateway.tee import Tee
from worker.ledger.database import make_engine

from .harness import BillingWorker, Call, wait_decided
from .serving import served
from .upstream import SCENARIO_HEADER, Upstream

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]

RECORDINGS = Path(__file__).resolve().parent.parent / "fixtures" / "endpoints"
# USD per 1M tokens (input, output), from the providers' pricing pages: platform.openai.com/docs/pricing
# (gpt-4o-mini, gpt-3.5-turbo-instruct, text-embedding-3-small) and
# docs.anthropic.com/en/docs/about-claude/pricing (Claude Sonnet 4.5).
PUBLISHED = {
    "gpt-4o-mini": ("0.15", "0.60"),
    "gpt-3.5-turbo-instruct": ("1.50", "2.00"),
    "text-embedding-3-small": ("0.02", "0"),
    "claude-sonnet-4-5": ("3", "15"),
}


def published_charge(model: str, prompt: int, completion: int) -> int:
    """micro-USD at the published prices: USD per 1M tokens is micro-USD per token; rounded
    half-up once."""
    rate_in, rate_out = (Decimal(rate) for rate in PUBLISHED[model])
    total = prompt * rate_in + completion * rate_out
    return int(total.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def recording(name: str) -> dict:
    return json.loads((RECORDINGS / f"{name}.json").read_text())


@dataclass
class Stack:
    asgi: str
    sessions: sessionmaker[Session]
    worker: BillingWorker

    def openai(self, account: str, scenario: str) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=self.asgi + "/v1", api_key=account, max_retries=0,
            default_headers={SCENARIO_HEADER: f"endpoints/{scenario}"},
        )  # fmt: skip

    def decided(self, account: str, count: int) -> list[Call]:
        return wait_decided(self.sessions, [account], count, timeout=60, processes=(self.worker,))

    def endpoints(self, account: str) -> set[str | None]:
        """The endpoint the ledger recorded for each call of ``account``."""
        with self.sessions() as s:
            return set(
                s.scalars(select(Reservation.endpoint).where(Reservation.account_id == account))
            )


@pytest.fixture(scope="module")
def stack(pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("endpoints-e2e")
    redis_server = PrivateRedis(workdir / "redis")
    redis_server.start()
    upstream = Upstream.start()
    prefix = f"endpoints-{uuid.uuid4().hex[:8]}"
    env = {
        "REDIS_URL": redis_server.url(0),
        "CELERY_BROKER_URL": redis_server.url(1),
        "DATABASE_URL": pg_url,
        "BILLING_PREFIX": prefix,
        "BILLING_DRAIN_MS": "500",
        "BILLING_BLOCK_MS": "100",
    }
    worker = BillingWorker(env, workdir / "worker")
    tee = Tee.from_url(redis_server.url(0), Keys(prefix), spool_dir=workdir / "spool")
    engine = make_engine(pg_url)
    try:
        worker.start()
        with served(create_app(upstream.base_url, tee)) as asgi:
            yield Stack(asgi, sessionmaker(engine), worker)
    finally:
        tee.stop()
        worker.stop()
        upstream.stop()
        redis_server.stop()
        engine.dispose()


def new_account() -> str:
    return f"acct-endpoint-{uuid.uuid4().hex[:10]}"


def _settled_twice(
    stack: Stack, account: str, endpoint: str, model: str, prompt: int, completion: int
) -> None:
    """The account's two calls (streamed and not) both settled at the recording's usage, each at
    the published price: the same charge both ways; the ledger records their endpoint."""
    calls = stack.decided(account, 2)
    assert stack.endpoints(account) == {endpoint}
    assert sorted(call.stream for call in calls) == [False, True]
    expected = published_charge(model, prompt, completion)
    for call in calls:
        assert (call.status, call.reason, call.usage_source) == ("settled", None, "reported"), call
        assert (call.prompt_tokens, call.completion_tokens) == (prompt, completion)
        assert call.charge_micros == expected


def test_a_responses_call_is_billed_streamed_and_not(stack: Stack) -> None:
    account = new_account()
    client = stack.openai(account, "responses_text")
    answer = client.responses.create(model="gpt-4o-mini", input="Tell me a story.")
    assert answer.status == "completed" and answer.usage is not None
    with client.responses.stream(model="gpt-4o-mini", input="Tell me a story.") as events:
        final = events.get_final_response()
    assert final.output_text == answer.output_text
    usage = recording("responses_text")["body"]["usage"]
    _settled_twice(
        stack, account, "responses", "gpt-4o-mini", usage["input_tokens"], usage["output_tokens"]
    )


def test_a_legacy_completion_is_billed_streamed_and_not(stack: Stack) -> None:
    account = new_account()
    client = stack.openai(account, "completions_text")
    plain = client.completions.create(model="gpt-3.5-turbo-instruct", prompt="Say this is a test")
    streamed = client.completions.create(
        model="gpt-3.5-turbo-instruct", prompt="Say this is a test", stream=True
    )
    chunks = list(streamed)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == plain.choices[0].text
    # the client did not ask for usage: the gateway asked for it, and took its chunk out
    assert all(chunk.usage is None for chunk in chunks)
    usage = recording("completions_text")["body"]["usage"]
    _settled_twice(
        stack,
        account,
        "completions",
        "gpt-3.5-turbo-instruct",
        usage["prompt_tokens"],
        usage["completion_tokens"],
    )


def test_an_embeddings_call_is_billed_for_every_input(stack: Stack) -> None:
    account = new_account()
    answer = stack.openai(account, "embeddings_array").embeddings.create(
        model="text-embedding-3-small", input=["first", "second"]
    )
    assert [item.index for item in answer.data] == [0, 1]
    (call,) = stack.decided(account, 1)
    usage = recording("embeddings_array")["body"]["usage"]
    assert (call.status, call.usage_source) == ("settled", "reported")
    assert (call.prompt_tokens, call.completion_tokens) == (usage["prompt_tokens"], 0)
    expected = published_charge("text-embedding-3-small", usage["prompt_tokens"], 0)
    assert call.charge_micros == expected > 0
    assert stack.endpoints(account) == {"embeddings"}


def test_an_anthropic_messages_call_is_billed_streamed_and_not(stack: Stack) -> None:
    account = new_account()
    client = anthropic.Anthropic(
        base_url=stack.asgi, api_key=account, max_retries=0,
        default_headers={"Authorization": f"Bearer {account}",
                         SCENARIO_HEADER: "endpoints/messages_text"},
    )  # fmt: skip
    messages = [{"role": "user", "content": "Hello"}]
    plain = client.messages.create(model="claude-sonnet-4-5", max_tokens=1024, messages=messages)
    with client.messages.stream(
        model="claude-sonnet-4-5", max_tokens=1024, messages=messages
    ) as stream:
        final = stream.get_final_message()
    assert final.content[0].text == plain.content[0].text == "Hello!"
    usage = recording("messages_text")["body"]["usage"]
    _settled_twice(
        stack,
        account,
        "messages",
        "claude-sonnet-4-5",
        usage["input_tokens"],
        usage["output_tokens"],
    )


# USD per image (DALL·E 3, by size and quality) and per 1M tokens (gpt-image-1: text input, image
# input, image output), from platform.openai.com/docs/pricing ("Image generation", "Image tokens").
DALL_E_3_HD_PORTRAIT = Decimal("0.12")
GPT_IMAGE_1 = (Decimal(5), Decimal(10), Decimal(40))


def test_an_image_generation_is_billed_per_image_and_by_image_tokens(stack: Stack) -> None:
    account = new_account()
    dalle = stack.openai(account, "images_dall_e_3").images.generate(
        model="dall-e-3", prompt="A cute baby sea otter", size="1024x1792", quality="hd"
    )
    assert dalle.data[0].url is not None
    (call,) = stack.decided(account, 1)
    assert (call.status, call.reason, call.usage_source) == ("settled", None, "reported"), call
    assert call.charge_micros == int(DALL_E_3_HD_PORTRAIT * 1_000_000) == 120_000

    account = new_account()
    client = stack.openai(account, "images_gpt_image_1")
    plain = client.images.generate(model="gpt-image-1", prompt="A cute baby sea otter")
    streamed = client.images.generate(
        model="gpt-image-1", prompt="A cute baby sea otter", stream=True, partial_images=1
    )
    kinds = [event.type for event in streamed]
    assert kinds == ["image_generation.partial_image", "image_generation.completed"]
    assert plain.usage is not None
    usage = recording("images_gpt_image_1")["body"]["usage"]
    image_in = usage["input_tokens_details"]["image_tokens"]
    text_in = usage["input_tokens_details"]["text_tokens"]
    rate_text, rate_image, rate_out = GPT_IMAGE_1
    expected = int(
        (text_in * rate_text + image_in * rate_image + usage["output_tokens"] * rate_out).quantize(
            Decimal(1), rounding=ROUND_HALF_UP
        )
    )
    calls = stack.decided(account, 2)
    assert sorted(call.stream for call in calls) == [False, True]
    for call in calls:
        assert (call.status, call.reason, call.usage_source) == ("settled", None, "reported"), call
        assert (call.prompt_tokens, call.completion_tokens) == (50, 50)
        assert call.charge_micros == expected == 2_450
    assert stack.endpoints(account) == {"images"}
