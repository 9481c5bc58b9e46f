"""What the gateway served, it bills (issue 35, leaks 1, 5, 6 and 12): requests at the edges, sent
through the real example gateway (the ASGI middleware and the tee) and the real LiteLLM proxy (the
billing hook) to the recorded upstream, and settled by a real ``billing worker``.

* a vision call whose base64 image makes the prompt MBs (the worker refuses an entry over 1 MiB);
* bodies Python's ``json`` reads and orjson refuses (a lone surrogate escape, a UTF-8 byte order
  mark, UTF-16, UTF-32), which the example gateway's upstream serves;
* ``"stream": "true"`` or ``1``, which the upstream streams;
* an account id the worker refuses (a control character, more than 200 characters, spaces at
  either end): billed to the fallback account;
* and what LiteLLM 1.108.7 itself refuses before any hook (nothing served, nothing to bill).

Each call is checked in the ledger against what the upstream sent (``harness.oracle_charge``, from
this module's own price table, which the worker also reads).
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import Iterator
from pathlib import Path

import openai
import orjson
import pytest
import redis
from consumer.waiting import wait_for

from worker.contract.keys import Keys
from worker.gateway.tee import Tee

from .edges import (
    ALIAS,
    BIG_IMAGE,
    MODEL,
    Edges,
    account,
    assert_settled_as_sent,
    body,
    open_edges,
    vision,
)
from .harness import (
    MASTER_KEY,
    Call,
    ledger,
)

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]


@pytest.fixture(scope="module")
def edges(pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edges]:
    with open_edges(pg_url, tmp_path_factory.mktemp("request-edges")) as stack:
        yield stack


# -------------------------------------------------------------------------------- the ASGI gateway


def test_asgi_a_vision_call_with_an_image_of_mbs_is_billed(edges: Edges) -> None:
    """Leak 1: the request entry was the whole prompt, image and all (2.7 MB), and the worker
    refused it: served, never billed. Now the image goes as its placeholder."""
    payer = account()
    request = {**vision(payer), "stream": True, "stream_options": {"include_usage": True}}
    raw = orjson.dumps(request)
    assert len(raw) > 2 << 20
    answer, served_calls = edges.post(edges.gateway, raw, payer)
    assert (answer.status_code, served_calls) == (200, 1)
    calls = edges.decided([payer], 1)
    assert_settled_as_sent(calls, edges.last_sent(1))
    assert calls[0].stream is True


def test_asgi_bodies_only_pythons_json_reads_are_billed(edges: Edges) -> None:
    """Leak 5: orjson refuses these; the upstream (Python's ``json``) served them all. Each is
    billed at what the upstream sent."""
    payer = account()
    text = json.dumps(body(payer))  # ensure_ascii: "\\u…" escapes, the lone surrogate's too
    raws = [
        text.replace("Say hello.", "Say \\ud800 hello.").encode(),  # a lone surrogate escape
        b"\xef\xbb\xbf" + text.encode(),  # a UTF-8 byte order mark
        text.encode("utf-16"),  # UTF-16 with its byte order mark
        text.encode("utf-32-be"),  # UTF-32 without one
    ]
    for raw in raws:
        answer, served_calls = edges.post(edges.gateway, raw, payer)
        assert (answer.status_code, served_calls) == (200, 1), answer.text
    calls = edges.decided([payer], len(raws))
    assert_settled_as_sent(calls, edges.last_sent(len(raws)))


def test_asgi_a_compressed_body_is_billed_and_an_unknown_encoding_refused(edges: Edges) -> None:
    """A gzip-compressed request (``Content-Encoding: gzip``) the app serves is billed: the
    middleware reads it inflated. An encoding it cannot undo is refused before the app (it could
    not be billed), never served unbilled."""
    payer = account()
    raw = gzip.compress(json.dumps(body(payer)).encode())
    answer, served_calls = edges.post(edges.gateway, raw, payer, **{"Content-Encoding": "gzip"})
    assert (answer.status_code, served_calls) == (200, 1), answer.text
    assert_settled_as_sent(edges.decided([payer], 1), edges.last_sent(1))
    answer, served_calls = edges.post(edges.gateway, raw, payer, **{"Content-Encoding": "br"})
    assert (answer.status_code, served_calls) == (400, 0)


def test_asgi_a_body_that_is_not_json_is_refused_before_the_app(edges: Edges) -> None:
    """What the middleware cannot read, it cannot bill: answered 400 before the app, so nothing
    is served from it."""
    answer, served_calls = edges.post(edges.gateway, b"model=gpt-4o-mini&stream=1", account())
    assert (answer.status_code, served_calls) == (400, 0)
    assert answer.json()["error"]["code"] == "invalid_json"


def test_asgi_stream_flags_the_app_streams(edges: Edges) -> None:
    """Leak 12: ``"stream": "true"`` and ``1`` stream (the upstream reads the flag as truthy), so
    the refusals apply to them; served, they are billed as the streams they were."""
    payer = account()
    keyed = orjson.dumps(body(payer, stream="true"))
    answer, served_calls = edges.post(edges.gateway, keyed, payer, **{"Idempotency-Key": "k-1"})
    assert (answer.status_code, served_calls) == (400, 0)
    assert answer.json()["error"]["code"] == "idempotency_key_on_stream"
    pro = orjson.dumps({**body(payer, stream=1), "model": "o1-pro-2025"})
    answer, served_calls = edges.post(edges.gateway, pro, payer)
    assert (answer.status_code, served_calls) == (400, 0)
    assert answer.json()["error"]["code"] == "model_not_streamable"

    asked = body(payer, stream="true", stream_options={"include_usage": "true"})
    answer, served_calls = edges.post(edges.gateway, orjson.dumps(asked), payer)
    assert served_calls == 1
    assert answer.headers["content-type"].startswith("text/event-stream")
    # Not asked for usage by the client: the gateway asks the upstream all the same, bills its
    # usage, and the client gets no usage chunk.
    answer, served_calls = edges.post(edges.gateway, orjson.dumps(body(payer, stream=1)), payer)
    assert served_calls == 1
    assert answer.headers["content-type"].startswith("text/event-stream")
    assert b'"choices":[]' not in answer.content
    with_usage, without = edges.decided([payer], 2)
    assert_settled_as_sent([with_usage, without], edges.last_sent(2))
    assert (with_usage.stream, without.stream) == (True, True)


def test_asgi_an_account_the_worker_refuses_is_billed_to_the_fallback(edges: Edges) -> None:
    """Leak 6, the middleware's half: the hook names an account the worker would refuse; the call
    is served and billed to the middleware's ``fallback_account`` (it was answered 400)."""
    users = ["bad\u0007id", "x" * 201, " spaced "]
    for user in users:
        answer, served_calls = edges.post(edges.gateway, orjson.dumps(body(user)), "key-edge")
        assert (answer.status_code, served_calls) == (200, 1), answer.text
    calls = edges.decided([edges.asgi_fallback], len(users))
    assert_settled_as_sent(calls, edges.last_sent(len(users)))


# -------------------------------------------------------------------------------- the LiteLLM proxy


def test_litellm_a_vision_call_with_an_image_of_mbs_is_billed(edges: Edges) -> None:
    """Leak 1 through the proxy: the hook publishes the image as its placeholder."""
    payer = account()
    client = openai.OpenAI(base_url=edges.proxy.base_url, api_key=MASTER_KEY, max_retries=0)
    before = len(edges.upstream.sent)
    request = vision(payer, ALIAS)
    client.chat.completions.create(**request)
    chunks = list(
        client.chat.completions.create(
            **request, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[-1].usage is not None
    assert len(edges.upstream.sent) - before == 2
    calls = edges.decided([payer], 2)
    assert [c.stream for c in calls] == [False, True]
    assert_settled_as_sent(calls, edges.last_sent(2))


def test_litellm_an_unusable_user_is_billed_to_the_fallback(edges: Edges) -> None:
    """Leak 6: ``BILLING_LITELLM_ACCOUNT=end_user`` and a ``user`` the worker refuses as an account
    id (it was dead-lettered, or cut to 200 characters: another account): billed to the hook's
    fallback account."""

    def settled() -> list[Call]:
        return [
            c for c in ledger(edges.sessions, [edges.litellm_fallback]) if c.status == "settled"
        ]

    before = len(settled())
    users = ["bad\u0007id", "x" * 201, " spaced "]
    for user in users:
        answer, served_calls = edges.post(
            edges.proxy.base_url, orjson.dumps(body(user, ALIAS)), MASTER_KEY
        )
        assert (answer.status_code, served_calls) == (200, 1), answer.text
    sents = edges.last_sent(len(users))
    wait_for(
        lambda: len(settled()) >= before + len(users),
        60, "the fallback account's calls settled", edges.worker.log_tail,
    )  # fmt: skip
    assert_settled_as_sent(settled()[before:], sents)


def test_litellm_refuses_bodies_only_pythons_json_reads_before_any_hook(edges: Edges) -> None:
    """Leak 5 does not arise with LiteLLM 1.108.7: it answers these with a 400 before the upstream
    (a lone surrogate, a byte order mark: "Invalid JSON payload"; UTF-16: read as no body, so
    "Missing required parameter: 'messages'"). Nothing is served, so nothing is owed."""
    text = json.dumps(body(account(), ALIAS))
    for raw in (
        text.replace("Say hello.", "Say \\ud800 hello.").encode(),
        b"\xef\xbb\xbf" + text.encode(),
        text.encode("utf-16"),
    ):
        answer, served_calls = edges.post(edges.proxy.base_url, raw, MASTER_KEY)
        assert (answer.status_code, served_calls) == (400, 0)


def test_litellm_answers_a_string_stream_flag_non_streamed_and_it_is_billed_so(
    edges: Edges,
) -> None:
    """Leak 12 through the proxy: LiteLLM 1.108.7 streams only ``"stream": true`` itself (it
    reads the flag with ``is True``) and answers ``"true"`` with one JSON body; the hook publishes
    the call as the non-streamed call it was."""
    payer = account()
    answer, served_calls = edges.post(
        edges.proxy.base_url, orjson.dumps(body(payer, ALIAS, stream="true")), MASTER_KEY
    )
    assert (answer.status_code, served_calls) == (200, 1)
    assert answer.headers["content-type"].startswith("application/json")
    (call,) = edges.decided([payer], 1)
    assert (call.stream, call.status) == (False, "settled")


# -------------------------------------------------------------------------------- the entries


def test_the_hooks_entry_says_why_the_fallback_and_holds_the_image_as_its_placeholder(
    redis_client: redis.Redis, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request entry the LiteLLM hook publishes (no proxy: the hooks called as the proxy
    calls them): the fallback's reason, never the id; a reason the client put in its metadata is
    not taken; the image as detail, width and height."""
    from litellm import ModelResponse

    from worker.core.prices import load_price_book
    from worker.gateway.litellm_hook import BillingHook

    monkeypatch.setenv("BILLING_LITELLM_ACCOUNT", "end_user,team")
    keys = Keys(prefix)
    tee = Tee(redis_client, keys, spool_dir=tmp_path / "spool")
    hook_ = BillingHook(lambda: tee, book=load_price_book(), fallback_account="acct-fallback")
    data = vision("bad\u0007id")
    data["metadata"] = {"billing_account_fallback": "forged"}
    reply = {
        "id": "chatcmpl-edge",
        "object": "chat.completion",
        "created": 1770000000,
        "model": MODEL,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "A square."},
             "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 300, "completion_tokens": 3, "total_tokens": 303},
    }  # fmt: skip

    class Key:
        team_id, user_id, token = "team-a", None, "hashed"

    async def run() -> None:
        await hook_.async_pre_call_hook(Key(), None, data, "acompletion")
        await hook_.async_post_call_success_hook(data, Key(), ModelResponse(**reply))

    asyncio.run(run())
    hook_.stop()
    rid = data["metadata"]["billing_request_id"]
    head = redis_client.xrange(keys.request(rid))
    assert head[0][1][b"kind"] == b"admission"  # written before the upstream call
    fields = head[1][1]
    meta = orjson.loads(fields[b"body"])
    assert (meta["account_id"], meta["account_fallback"]) == (
        "acct-fallback",
        "user: holds a control character or an unpaired surrogate",
    )
    assert b"bad\\u0007id" not in fields[b"body"]
    assert meta["messages"][0]["content"][1] == {
        "type": "image_url",
        "image_url": {"detail": "high", "width": 37, "height": 21},
    }
    assert len(fields[b"body"]) < 2_000
    assert data["messages"][0]["content"][1]["image_url"]["url"] == BIG_IMAGE  # sent on as it came

    data = {**body("good-user"), "metadata": {"billing_account_fallback": "forged"}}
    asyncio.run(hook_.async_pre_call_hook(Key(), None, data, "acompletion"))
    assert data["metadata"]["billing_account_id"] == "good-user"
    assert "billing_account_fallback" not in data["metadata"]
