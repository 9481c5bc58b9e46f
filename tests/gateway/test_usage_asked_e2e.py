"""Usage is always asked, and a response's Content-Encoding is read: the real openai client calls the
example ASGI gateway, which proxies to the recorded upstream (it sends a stream's usage chunk only
when the request asks, as OpenAI does: ``devtools.recorded_upstream``); a real ``billing worker``
settles every call from the ledger's point of view.

The oracles are the upstream's own record of what it was asked and what it sent (``Upstream.sent``)
and the charge computed here from the book's rates, apart from the worker's pricing code.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import time
import uuid
import zlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import openai
import pytest
from chaos.fleet import Worker, worker_env
from sqlalchemy.orm import sessionmaker
from starlette.applications import Starlette
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from devtools.example_app import account_from_key, proxy_app
from worker.contract.keys import Keys
from worker.gateway.middleware import BillingMiddleware
from worker.gateway.tee import Tee
from worker.ledger.database import make_engine

from .harness import wait_decided
from .serving import served
from .test_e2e import expected_charge, sent_usage, served_model
from .upstream import SCENARIO_HEADER, Upstream, load

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]

MODEL = "gpt-4o-mini"
REDIS = "redis://127.0.0.1:6379/0"


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with Upstream.start() as up:
        yield up


@pytest.fixture
def billing(pg_url: str, prefix: str, tmp_path: Path) -> Iterator[tuple[Tee, sessionmaker]]:
    env = worker_env(REDIS, "redis://127.0.0.1:6379/11", pg_url, prefix)
    worker = Worker(env, tmp_path / "worker", "usage-e2e", concurrency=1)
    tee = Tee.from_url(REDIS, Keys(prefix), spool_dir=tmp_path / "spool")
    engine = make_engine(pg_url)
    try:
        worker.start()
        yield tee, sessionmaker(engine)
    finally:
        tee.stop()
        worker.stop()
        engine.dispose()


def _client(url: str, account: str, scenario: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=url + "/v1", api_key=account, max_retries=0,
        default_headers={SCENARIO_HEADER: scenario},
    )  # fmt: skip


def _stream(url: str, account: str, scenario: str, **options: object) -> list:
    client = _client(url, account, scenario)
    messages = [{"role": "user", "content": f"Tell me about {scenario}."}]
    return list(
        client.chat.completions.create(model=MODEL, messages=messages, stream=True, **options)
    )


def test_every_stream_asks_usage_upstream_and_only_an_asking_client_gets_it(
    upstream: Upstream, billing: tuple[Tee, sessionmaker], tmp_path: Path
) -> None:
    tee, sessions = billing
    account = f"acct-{uuid.uuid4().hex[:8]}"
    with served(proxy_app(upstream.base_url)) as plain_url:  # the same app, unbilled
        unbilled = _stream(plain_url, account, "clean")
    app = BillingMiddleware(proxy_app(upstream.base_url), publisher=tee, hook=account_from_key)
    with served(app) as url:
        silent = _stream(url, account, "clean")
        asked = _stream(url, account, "clean", stream_options={"include_usage": True})
        refused = _stream(url, account, "clean", stream_options={"include_usage": False})
        raw = httpx.post(
            url + "/v1/chat/completions",
            headers={"Authorization": f"Bearer {account}", SCENARIO_HEADER: "clean"},
            json={"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stream": True},
        )
        usage_less = _stream(url, account, "usage_less")
        time.sleep(0.2)  # the last close is published after the client's last byte
    assert tee.flush(timeout=10)

    sent = upstream.sent
    # The unbilled gateway forwarded the client's request as it was: no usage asked, none sent.
    assert not sent[0].include_usage and all(c.usage is None for c in unbilled)
    # Through the billing gateway, the upstream was asked for usage every time.
    assert [s.include_usage for s in sent[1:]] == [True] * 5
    # Only the client that asked got the usage chunk; the others got every other chunk.
    assert [c.choices for c in asked][-1] == [] and asked[-1].usage is not None
    for chunks in (silent, refused):
        assert all(c.choices for c in chunks), "a usage-only chunk reached a client"
        assert [c.model_dump(exclude={"usage"}) for c in chunks] == [
            c.model_dump(exclude={"usage"}) for c in asked[:-1]
        ]
    # The raw bytes: the upstream's events as sent, less the usage-only one, byte for byte.
    wire = [_wire(f) for f in sent[4].frames if not (isinstance(f, dict) and f["choices"] == [])]
    assert raw.content == b"".join(b"data: %s\n\n" % data for data in wire)
    assert usage_less and all(c.usage is None for c in usage_less)

    calls = wait_decided(sessions, [account], 5, timeout=90)
    assert len(calls) == 5
    settled = [c for c in calls if c.status == "settled"]
    # The four clean streams are billed at the upstream's usage, whether the client asked or not.
    charge = expected_charge(sent_usage(sent[1]), served_model(sent[1]))
    assert sorted(c.charge_micros for c in settled) == [charge] * 4
    assert {c.usage_source for c in settled} == {"reported"}
    # The stream that never carried usage, though asked: missing, not a legitimate estimate.
    (missing,) = [c for c in calls if c.status != "settled"]
    assert (missing.status, missing.reason) == ("unsettled", "missing_usage")


def _wire(frame: object) -> bytes:
    """A frame as the recorded upstream writes it."""
    return (
        frame.encode()
        if isinstance(frame, str)
        else json.dumps(frame, separators=(",", ":")).encode()
    )


def test_a_gzipped_answer_is_read_and_the_client_gets_it_gzipped(
    upstream: Upstream, billing: tuple[Tee, sessionmaker]
) -> None:
    tee, sessions = billing
    account = f"acct-{uuid.uuid4().hex[:8]}"
    inner = GZipMiddleware(proxy_app(upstream.base_url), minimum_size=1)
    app = BillingMiddleware(inner, publisher=tee, hook=account_from_key)
    with served(app) as url:
        reply = httpx.post(
            url + "/v1/chat/completions",
            headers={
                "Authorization": f"Bearer {account}", SCENARIO_HEADER: "clean_body",
                "Accept-Encoding": "gzip",
            },
            json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]},
        )  # fmt: skip
        client = _client(url, account, "clean_body")
        body = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "y"}]
        )
        time.sleep(0.2)
    assert tee.flush(timeout=10)
    assert reply.headers["content-encoding"] == "gzip"  # the client got the encoded bytes
    assert reply.json()["usage"] == upstream.sent[0].body["usage"]
    assert body.usage is not None
    calls = wait_decided(sessions, [account], 2, timeout=90)
    charge = expected_charge(sent_usage(upstream.sent[0]), served_model(upstream.sent[0]))
    assert [(c.status, c.usage_source, c.charge_micros) for c in calls] == [
        ("settled", "reported", charge)
    ] * 2


def test_a_coding_the_gateway_cannot_undo_is_recorded_unreadable_at_its_hold(
    billing: tuple[Tee, sessionmaker],
) -> None:
    """``br`` without its library here (``zstd`` likewise): the client gets the bytes as they came,
    the worker records the call unsettled ``unreadable`` with its hold as exposure, never nothing."""
    if importlib.util.find_spec("brotli") or importlib.util.find_spec("brotlicffi"):
        pytest.skip("brotli is installed here: br is decoded")
    tee, sessions = billing
    account = f"acct-{uuid.uuid4().hex[:8]}"
    coded = b"\x1b\x00\xf8\xa5@\x02\xb2\x9e\x9c\x00"  # not decodable without brotli

    async def chat(request: Request) -> Response:
        media = "text/event-stream" if (await request.json()).get("stream") else "application/json"
        return Response(coded, media_type=media, headers={"content-encoding": "br"})

    app = BillingMiddleware(
        Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]),
        publisher=tee,
        hook=account_from_key,
        authorizer=None,
    )
    with served(app) as url:
        for stream in (False, True):
            reply = httpx.post(
                url + "/v1/chat/completions",
                headers={"Authorization": f"Bearer {account}", "Accept-Encoding": "identity"},
                json={"model": MODEL, "messages": [{"role": "user", "content": "x"}],
                      "stream": stream, "max_tokens": 10},
            )  # fmt: skip
            assert reply.headers["content-encoding"] == "br"
            assert reply.read() == coded
        time.sleep(0.2)
    assert tee.flush(timeout=10)
    calls = wait_decided(sessions, [account], 2, timeout=90)
    assert [(c.status, c.reason) for c in calls] == [("unsettled", "unreadable")] * 2


def test_a_gzipped_stream_is_read_and_stripped_for_a_client_that_did_not_ask(
    billing: tuple[Tee, sessionmaker],
) -> None:
    """An app that gzips its SSE body (as an upstream's gzip passed through would be): the worker
    bills the usage under the coding; a client that asked gets the gzip bytes as they came, one
    that did not gets the events decoded, less the usage chunk (it cannot be cut out coded)."""
    tee, sessions = billing
    account = f"acct-{uuid.uuid4().hex[:8]}"
    frames = load("clean").frames
    assert frames is not None
    events = [b"data: %s\n\n" % _wire(frame) for frame in frames]
    asked_upstream: list[bool] = []

    async def chat(request: Request) -> StreamingResponse:
        options = (await request.json()).get("stream_options") or {}
        asked_upstream.append(options.get("include_usage") is True)

        async def body() -> AsyncIterator[bytes]:
            packer = zlib.compressobj(wbits=31)
            for event in events:
                yield packer.compress(event) + packer.flush(zlib.Z_SYNC_FLUSH)
            yield packer.flush()

        return StreamingResponse(
            body(), media_type="text/event-stream", headers={"content-encoding": "gzip"}
        )

    app = BillingMiddleware(
        Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]),
        publisher=tee,
        hook=account_from_key,
    )
    request = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stream": True}
    headers = {"Authorization": f"Bearer {account}"}
    with served(app) as url, httpx.Client() as client:
        with client.stream(
            "POST", url + "/v1/chat/completions", headers=headers,
            json={**request, "stream_options": {"include_usage": True}},
        ) as asked:  # fmt: skip
            coded = b"".join(asked.iter_raw())
            assert asked.headers["content-encoding"] == "gzip"
        with client.stream(
            "POST", url + "/v1/chat/completions", headers=headers, json=request
        ) as silent:
            plain = b"".join(silent.iter_raw())
            assert "content-encoding" not in silent.headers
        time.sleep(0.2)
    assert tee.flush(timeout=10)
    assert asked_upstream == [True, True]
    assert gzip.decompress(coded) == b"".join(events)
    usage_chunk = [
        e for e, f in zip(events, frames, strict=True) if f != "[DONE]" and f["choices"] == []
    ]
    assert len(usage_chunk) == 1
    assert plain == b"".join(e for e in events if e not in usage_chunk)
    calls = wait_decided(sessions, [account], 2, timeout=90)
    usage = next(f["usage"] for f in frames if isinstance(f, dict) and f.get("usage"))
    charge = expected_charge(usage, next(f["model"] for f in frames if isinstance(f, dict)))
    assert [(c.status, c.usage_source, c.charge_micros) for c in calls] == [
        ("settled", "reported", charge)
    ] * 2
