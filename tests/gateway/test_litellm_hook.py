"""The LiteLLM hook without the proxy: it publishes through a tee built from the environment, prices
the hold with the middleware's rule, and flushes its tee at interpreter exit (``atexit``).

The proxy's own calls of these hooks are proven end to end in test_litellm_e2e.py; here the hooks
are called as the proxy calls them, with LiteLLM's own response types, against the real Redis.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from conftest import REDIS_URL
from litellm import ModelResponse

from worker.contract.keys import Keys
from worker.core.estimate import estimate_prompt
from worker.core.prices import load_price_book
from worker.gateway.litellm_hook import BillingHook, make_publisher
from worker.gateway.reservation import reserve
from worker.gateway.spool import spool_name
from worker.gateway.tee import Tee

from .test_tee import unreachable

pytestmark = pytest.mark.redis

REPO = Path(__file__).resolve().parents[2]
# A non-streamed body in OpenAI's chat.completion shape (the API reference's example, trimmed).
BODY = {
    "id": "chatcmpl-hook",
    "object": "chat.completion",
    "created": 1770000000,
    "model": "gpt-4o-mini",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "Hi."}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11},
}


class Key:
    team_id = "team-a"
    user_id = None
    token = "hashed-key"


def request(alias: str = "my-alias") -> dict[str, Any]:
    return {
        "model": alias,
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 50,
        "n": 2,
    }


def plain_call(hook: BillingHook, data: dict[str, Any]) -> str:
    """The proxy's hook sequence for a non-streamed call; its request id."""

    async def run() -> None:
        await hook.async_pre_call_hook(Key(), None, data, "acompletion")
        await hook.async_post_call_success_hook(data, Key(), ModelResponse(**BODY))

    asyncio.run(run())
    return data["metadata"]["billing_request_id"]


def entries(client: redis.Redis, key: str) -> list[dict[bytes, bytes]]:
    """The call's stream after its admission record (written before the upstream call)."""
    stored = [fields for _id, fields in client.xrange(key)]
    assert stored[0][b"kind"] == b"admission"
    return stored[1:]


def test_the_default_publisher_is_a_tee_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, redis_client: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    monkeypatch.setenv("REDIS_URL", REDIS_URL)
    monkeypatch.setenv("BILLING_PREFIX", prefix)
    monkeypatch.setenv("BILLING_PARTITIONS", "4")
    monkeypatch.setenv("BILLING_SPOOL_DIR", str(tmp_path / "spool"))
    hook = BillingHook()
    rid = plain_call(hook, request())
    assert isinstance(hook.publisher, Tee)
    # The spool is opened at the first spill (issue 35, leak 7): with Redis taking every write,
    # there is none.
    assert not list((tmp_path / "spool").glob("*.spool"))
    hook.stop()
    keys = Keys(prefix, 4)
    kinds = [fields[b"kind"] for fields in entries(redis_client, keys.request(rid))]
    assert kinds == [b"request", b"response"]
    notes = [
        f
        for _id, f in redis_client.xrange(keys.events_for(rid))
        if f[b"request_id"] == rid.encode()
    ]
    assert [n[b"kind"] for n in notes] == [b"open", b"close"]
    assert not (tmp_path / "spool" / spool_name()).exists()  # stopped with nothing left


def test_the_hold_is_the_middlewares_price_of_the_deployments_model(
    redis_client: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    """The client asks for an alias; the hold is ``reservation.reserve`` of the request for the
    model that answered (``gpt-4o-mini``, the one the worker prices), with ``n`` and ``max_tokens``."""
    keys = Keys(prefix)
    tee = Tee(redis_client, keys, spool_dir=tmp_path / "spool")
    book = load_price_book()
    hook = BillingHook(lambda: tee, book=book)
    data = request()
    before = datetime.now(UTC)
    rid = plain_call(hook, data)
    after = datetime.now(UTC)
    hook.stop()
    meta = orjson.loads(entries(redis_client, keys.request(rid))[0][b"body"])
    body = {**request(), "model": "gpt-4o-mini"}
    expected = {int(reserve(book, body, at, provider="openai")) for at in (before, after)}
    assert meta["reserved_micros"] in expected
    assert meta["reserved_micros"] > 0
    assert (meta["model"], meta["account_id"], meta["n"]) == ("gpt-4o-mini", "team-a", 2)


def test_a_client_cannot_set_the_hold_or_the_unchecked_flag_through_metadata(
    redis_client: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    """A hostile client sends the hook's own metadata keys: a hold of 0 and "admitted unchecked".
    The hook drops them; the published hold is the priced one, with spend control off and on."""
    from worker.contract.authorization import AuthorizationStore
    from worker.gateway.authorize import Authorizer

    keys = Keys(prefix)
    store = AuthorizationStore(redis_client, prefix)
    store.mark_ready()
    store.install("team-a", funds=10**9, charged=0, fields={})
    for authorizer in (None, Authorizer(store)):
        tee = Tee(redis_client, keys, spool_dir=tmp_path / "spool")
        hook = BillingHook(lambda t=tee: t, book=load_price_book(), authorizer=authorizer)
        data = {**request(), "model": "gpt-4o-mini"}  # priced: outside a proxy, no deployments
        data["metadata"] = {"billing_reserved_micros": 0, "billing_unchecked": True}
        rid = plain_call(hook, data)
        hook.stop()
        meta = orjson.loads(entries(redis_client, keys.request(rid))[0][b"body"])
        assert meta["reserved_micros"] > 0 and "authorization" not in meta, meta
    assert len(store.calls("team-a")) == 1  # the authorized call's hold, taken once


def test_an_unreachable_redis_never_fails_the_call_and_the_tee_spools(tmp_path: Path) -> None:
    tee = Tee(unreachable(), Keys("unused"), spool_dir=tmp_path / "spool", retry_seconds=0.05)
    hook = BillingHook(lambda: tee, book=load_price_book())
    plain_call(hook, request())
    assert not tee.flush(timeout=2)
    assert tee.spooling
    hook.stop()
    assert (tmp_path / "spool" / spool_name()).stat().st_size > 0  # kept for the next start


EXITING = textwrap.dedent(
    """
    import asyncio, json, sys
    from litellm import ModelResponse
    from worker.gateway.litellm_hook import billing_hook

    class Key:
        team_id, user_id, token = "team-exit", None, "k"

    data = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hi"}]}

    async def run():
        await billing_hook.async_pre_call_hook(Key(), None, data, "acompletion")
        await billing_hook.async_post_call_success_hook(data, Key(), ModelResponse(**json.loads(sys.argv[1])))

    asyncio.run(run())
    print(data["metadata"]["billing_request_id"])
    """
)


def test_a_proxy_process_that_exits_flushes_its_tee(
    redis_client: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    """The module's ``billing_hook``, in a process that publishes and exits at once: ``atexit``
    stops the tee, so the call is in Redis and the spool file is gone."""
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "REDIS_URL": REDIS_URL,
        "BILLING_PREFIX": prefix,
        "BILLING_SPOOL_DIR": str(tmp_path / "spool"),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    done = subprocess.run(
        [sys.executable, "-c", EXITING, orjson.dumps(BODY).decode()],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rid = done.stdout.strip().splitlines()[-1]
    keys = Keys(prefix)
    assert [f[b"kind"] for f in entries(redis_client, keys.request(rid))] == [
        b"request",
        b"response",
    ]
    assert list((tmp_path / "spool").iterdir()) == []


def test_make_publisher_reads_the_spool_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("REDIS_URL", REDIS_URL)
    monkeypatch.setenv("BILLING_SPOOL_DIR", str(tmp_path / "elsewhere"))
    tee = make_publisher()
    try:
        assert tee.spool_dir == tmp_path / "elsewhere"
    finally:
        tee.stop()


def test_make_publisher_reads_the_linger(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("REDIS_URL", REDIS_URL)
    monkeypatch.setenv("BILLING_SPOOL_DIR", str(tmp_path / "spool"))
    monkeypatch.delenv("BILLING_TEE_LINGER_MS", raising=False)
    tee = make_publisher()
    try:
        assert tee.linger_seconds == 0.1  # the documented default, 100 ms
    finally:
        tee.stop()
    monkeypatch.setenv("BILLING_TEE_LINGER_MS", "250")
    tee = make_publisher()
    try:
        assert tee.linger_seconds == 0.25
    finally:
        tee.stop()
    monkeypatch.setenv("BILLING_TEE_LINGER_MS", "0")
    with pytest.raises(ValueError, match="BILLING_TEE_LINGER_MS"):
        make_publisher()


HOSTILE = {
    "billing_account_id": "victim",
    "billing_request_id": "req_victims_call",
    "billing_reserved_micros": 10**12,
    "billing_unchecked": True,
    "billing_account_fallback": "made up",
}


def test_a_refused_call_type_strips_the_clients_billing_keys_and_publishes_nothing(
    redis_client: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    """An image generation (no reader yet) carrying the hook's keys in both metadata dicts:
    refused with 403 ``route_not_billed`` as a ``ProxyException``; every ``billing_`` key is gone
    before that, so the success and failure hooks the proxy might still call find no request id
    to publish."""
    from litellm.proxy._types import ProxyException
    from litellm.types.utils import ImageResponse

    keys = Keys(prefix)
    tee = Tee(redis_client, keys, spool_dir=tmp_path / "spool")
    hook = BillingHook(lambda: tee, book=load_price_book())
    data = {
        "model": "img",
        "prompt": "a cat",
        "metadata": {**HOSTILE, "tag": "kept"},
        "litellm_metadata": dict(HOSTILE),
    }

    async def run() -> None:
        with pytest.raises(ProxyException) as refused:
            await hook.async_pre_call_hook(Key(), None, data, "aimage_generation")
        assert refused.value.code == "403"
        assert refused.value.openai_code == "route_not_billed"
        assert "call type aimage_generation is not billed by this gateway" in refused.value.message
        await hook.async_post_call_success_hook(data, Key(), ImageResponse(data=[]))
        await hook.async_post_call_failure_hook(data, RuntimeError("x"), Key())

    asyncio.run(run())
    hook.stop()
    assert data["metadata"] == {"tag": "kept"} and data["litellm_metadata"] == {}
    assert redis_client.xlen(keys.events()) == 0
    assert not redis_client.exists(keys.request("req_victims_call"))


def test_a_chat_call_ignores_the_clients_billing_keys(
    redis_client: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    keys = Keys(prefix)
    tee = Tee(redis_client, keys, spool_dir=tmp_path / "spool")
    hook = BillingHook(lambda: tee, book=load_price_book())
    data = {**request(), "metadata": dict(HOSTILE)}
    rid = plain_call(hook, data)
    hook.stop()
    assert rid != "req_victims_call" and rid.startswith("req_litellm_")
    meta = orjson.loads(entries(redis_client, keys.request(rid))[0][b"body"])
    assert meta["account_id"] == "team-a"
    assert 0 < meta["reserved_micros"] < 10**6
    assert "authorization" not in meta and "account_fallback" not in meta
    assert not redis_client.exists(keys.request("req_victims_call"))


def test_with_pass_a_refused_call_type_is_served_and_published_unbilled(
    monkeypatch: pytest.MonkeyPatch, redis_client: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    monkeypatch.setenv("BILLING_UNBILLED_ROUTES", "pass")
    keys = Keys(prefix)
    tee = Tee(redis_client, keys, spool_dir=tmp_path / "spool")
    hook = BillingHook(lambda: tee, book=load_price_book())
    data = {"model": "img", "prompt": "a cat", "metadata": dict(HOSTILE)}
    asyncio.run(hook.async_pre_call_hook(Key(), None, data, "aimage_generation"))
    hook.stop()
    (note,) = [fields for _id, fields in redis_client.xrange(keys.events())]
    # The client's keys gone; only the id the call was recorded under (X-Billing-Request-Id).
    assert data["metadata"] == {"billing_unbilled_id": note[b"request_id"].decode()}
    assert (note[b"kind"], note[b"route"], note[b"account_id"]) == (
        b"unbilled",
        b"call type aimage_generation",
        b"team-a",
    )
    assert note[b"request_id"].startswith(b"req_litellm_")


def test_the_clients_x_request_id_is_its_reference_and_a_bad_one_is_refused(
    redis_client: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    from litellm.proxy._types import ProxyException

    keys = Keys(prefix)
    tee = Tee(redis_client, keys, spool_dir=tmp_path / "spool")
    hook = BillingHook(lambda: tee, book=load_price_book())
    rids = []
    for _ in range(2):
        data = {**request(), "proxy_server_request": {"headers": {"x-request-id": "mine-1"}}}
        rids.append(plain_call(hook, data))
    bad = {**request(), "proxy_server_request": {"headers": {"X-Request-Id": " x"}}}
    with pytest.raises(ProxyException) as refused:
        asyncio.run(hook.async_pre_call_hook(Key(), None, bad, "acompletion"))
    hook.stop()
    assert refused.value.code == "400" and "X-Request-Id" in refused.value.message
    assert len(set(rids)) == 2 and "mine-1" not in rids
    for rid in rids:
        meta = orjson.loads(entries(redis_client, keys.request(rid))[0][b"body"])
        assert meta["client_request_id"] == "mine-1"


def test_the_admission_counts_the_prompt_never_its_text(
    redis_client: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    """A call finalized from its admission alone (the proxy killed before its request entry) is
    exposed, and charged at the grace, for its prompt: the admission carries the prompt's count
    as the hold estimated it, and no word of it."""
    keys = Keys(prefix)
    tee = Tee(redis_client, keys, spool_dir=tmp_path / "spool")
    hook = BillingHook(lambda: tee, book=load_price_book())
    rid = plain_call(hook, request("gpt-4o-mini"))  # a model the book prices (no router here)
    hook.stop()
    head = redis_client.xrange(keys.request(rid), count=1)
    admission = orjson.loads(head[0][1][b"body"])
    words = request()["messages"]
    assert admission["prompt_estimate"] == estimate_prompt("gpt-4o-mini", words)
    assert admission["messages"] == [] and admission["omitted_messages"] is True
    for message in words:
        assert str(message["content"]).encode() not in head[0][1][b"body"]
