"""The middleware in a real uvicorn-served Starlette app, called by real httpx and openai clients,
publishing through the tee into the real Redis."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import httpx
import openai
import orjson
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from worker.contract.entries import read_head
from worker.contract.keys import Keys
from worker.contract.publisher import Publisher
from worker.core.estimate import estimate_prompt
from worker.core.prices import load_price_book
from worker.core.reconcile import reconcile_stream
from worker.gateway.metadata import CallInfo
from worker.gateway.middleware import HOLD_BYTES, HOLD_SECONDS, BillingMiddleware
from worker.gateway.reservation import SHORT_PROMPT_BYTES
from worker.gateway.tee import Tee

from .serving import served

pytestmark = pytest.mark.redis

# What the test app answers, by the request's ``user`` field: (status, content type, chunks).
REPLIES: dict[str, tuple[int, str, list[bytes]]] = {}
CALLS: list[str] = []
RELEASE = threading.Event()


async def chat(request: Request) -> Response:
    body = orjson.loads(await request.body())
    CALLS.append(body.get("user", ""))
    status, content_type, chunks = REPLIES[body["user"]]

    async def stream() -> AsyncIterator[bytes]:
        for chunk in chunks:
            if chunk == b"<hang>":
                while not RELEASE.is_set():
                    await asyncio.sleep(0.01)
                continue
            if chunk == b"<pause>":  # longer than the middleware holds a chunk
                await asyncio.sleep(3 * HOLD_SECONDS)
                continue
            yield chunk

    return StreamingResponse(stream(), status_code=status, media_type=content_type)


def hook(scope: dict[str, Any], body: dict[str, Any]) -> CallInfo | None:
    return CallInfo(account_id="acct_t", request_id=body.get("user"), provider="openai")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Tee, Keys]]:
    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    keys = Keys(f"t-gw-{threading.get_ident()}-{id(client)}")
    tee = Tee(client, keys, spool_dir=tmp_path_factory.mktemp("spool"))
    app = BillingMiddleware(
        Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]),
        publisher=tee,
        hook=hook,
        non_streamable=("o1-pro",),
    )
    with served(app) as url:
        yield url, tee, keys
    tee.stop()
    for key in client.scan_iter(match=f"{keys.prefix}:*"):
        client.delete(key)


def billing_id(keys: Keys, rid: str) -> str | None:
    """The billing id the middleware made for the call whose client reference is ``rid`` (the
    test hook's ``request_id``, published as ``client_request_id``), once its ``open`` is out."""
    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    for _id, f in client.xrange(keys.events()):
        if f[b"kind"] != b"open":
            continue
        first = client.xrange(keys.request(f[b"request_id"].decode()), count=1)
        if first and orjson.loads(first[0][1][b"body"]).get("client_request_id") == rid:
            return f[b"request_id"].decode()
    return None


def entries(gateway: tuple[str, Tee, Keys], rid: str) -> list[dict[bytes, bytes]]:
    """The call's stream once it is closed (the middleware closes after the client got the end)."""
    _url, _tee, keys = gateway
    for _ in range(500):
        if closes(gateway, rid):
            break
        threading.Event().wait(0.02)
    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    stored = [fields for _id, fields in client.xrange(keys.request(billing_id(keys, rid) or rid))]
    # The admission record heads every stream: written before the app ran (issue 48).
    assert stored[0][b"kind"] == b"admission"
    return stored[1:]


def closes(gateway: tuple[str, Tee, Keys], rid: str) -> list[bytes]:
    _url, tee, keys = gateway
    assert tee.flush(timeout=10)
    found = billing_id(keys, rid)
    if found is None:
        return []
    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    return [
        f[b"reason"]
        for _id, f in client.xrange(keys.events())
        if f[b"request_id"] == found.encode() and f[b"kind"] == b"close"
    ]


def request(rid: str, stream: bool = True, **extra: Any) -> dict[str, Any]:
    return {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "Say hello."}],
        "stream": stream,
        "user": rid,
        **extra,
    }


counter = iter(range(10**9))

sse_bodies = st.lists(
    st.sampled_from(
        [b'data: {"choices":[]}', b"data: [DONE]", b": ping", b"\n", b"\r\n", b"\r", b"\n\n"]
    ),
    min_size=1,
    max_size=20,
).map(b"".join)


@pytest.fixture(scope="module")
def sync_gateway() -> Iterator[tuple[str, Keys]]:
    """The middleware with the synchronous ``Publisher``, which has no ``chunk``: the middleware
    cuts the body into its events itself and publishes them with ``frames``."""
    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    keys = Keys(f"t-gw-sync-{threading.get_ident()}-{id(client)}")
    app = BillingMiddleware(
        Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]),
        publisher=Publisher(client, keys),
        hook=hook,
    )
    with served(app) as url:
        yield url, keys
    for key in client.scan_iter(match=f"{keys.prefix}:*"):
        client.delete(key)


def assert_frames_are_the_body(stored: list[dict[bytes, bytes]], body: bytes) -> None:
    assert stored[0][b"kind"] == b"request"
    frames = [e[b"body"] for e in stored[1:]]
    assert all(e[b"kind"] == b"frame" for e in stored[1:])
    assert b"".join(frames) == body
    # Each frame but the last ends with a blank line, and holds no blank line before its end.
    for frame in frames[:-1]:
        assert frame.endswith(
            (b"\n\n", b"\r\r", b"\r\n\r\n", b"\n\r\n", b"\r\n\n", b"\n\r", b"\r\r\n")
        )


def chunked(body: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(c % (len(body) + 1) for c in cuts), len(body)]
    return [body[a:b] for a, b in itertools.pairwise(bounds) if b > a]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sse_bodies, st.lists(st.integers(0, 400), max_size=8))
def test_frames_are_the_bytes_the_client_got_without_chunk(
    sync_gateway: tuple[str, Keys], body: bytes, cuts: list[int]
) -> None:
    url, keys = sync_gateway
    rid = f"sync-{next(counter)}"
    REPLIES[rid] = (200, "text/event-stream", chunked(body, cuts))
    with httpx.Client(base_url=url) as client:
        got = client.post("/v1/chat/completions", json=request(rid)).content
    assert got == body
    redis_client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    for _ in range(500):  # the middleware closes after the client got the end
        found = billing_id(keys, rid)
        if found is not None and any(
            f[b"request_id"] == found.encode() and f[b"kind"] == b"close"
            for _id, f in redis_client.xrange(keys.events())
        ):
            break
        threading.Event().wait(0.02)
    stored = [f for _id, f in redis_client.xrange(keys.request(billing_id(keys, rid) or rid))]
    assert stored[0][b"kind"] == b"admission"  # the write-ahead record, before the app ran
    assert_frames_are_the_body(stored[1:], body)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sse_bodies, st.lists(st.integers(0, 400), max_size=8))
def test_frames_are_the_bytes_the_client_got_whatever_the_chunking(
    gateway: tuple[str, Tee, Keys], body: bytes, cuts: list[int]
) -> None:
    """Through the tee's ``chunk``: the tee's thread cuts the events."""
    rid = f"sse-{next(counter)}"
    REPLIES[rid] = (200, "text/event-stream", chunked(body, cuts))
    with httpx.Client(base_url=gateway[0]) as client:
        got = client.post("/v1/chat/completions", json=request(rid)).content
    assert got == body
    assert_frames_are_the_body(entries(gateway, rid), body)


def test_the_real_openai_client_streams_and_the_call_is_published(
    gateway: tuple[str, Tee, Keys],
) -> None:
    rid = "openai-stream"
    events = [
        b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}\n\n',
        b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
        b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}\n\n',
        b"data: [DONE]\n\n",
    ]
    REPLIES[rid] = (200, "text/event-stream", events)
    client = openai.OpenAI(base_url=gateway[0] + "/v1", api_key="k", max_retries=0)
    chunks = list(
        client.chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "Say hello."}],
            stream=True,
            stream_options={"include_usage": True},
            user=rid,
        )
    )
    assert chunks[-1].usage.total_tokens == 10
    stored = entries(gateway, rid)
    meta = orjson.loads(stored[0][b"body"])
    assert meta["stream"] is True and meta["include_usage"] is True
    assert meta["account_id"] == "acct_t" and meta["provider"] == "openai"
    assert b"".join(e[b"body"] for e in stored[1:]) == b"".join(events)
    assert closes(gateway, rid) == [b"done"]


def test_a_non_streamed_call_is_its_status_and_body(gateway: tuple[str, Tee, Keys]) -> None:
    rid = "plain"
    body = b'{"id":"c2","object":"chat.completion","choices":[]}'
    REPLIES[rid] = (200, "application/json", [body[:10], body[10:]])
    client = openai.OpenAI(base_url=gateway[0] + "/v1", api_key="k", max_retries=0)
    client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "x"}], user=rid
    )
    stored = entries(gateway, rid)
    assert orjson.loads(stored[0][b"body"])["stream"] is False
    assert stored[1] == {b"kind": b"response", b"status": b"200", b"body": body}
    assert closes(gateway, rid) == [b"done"]


def test_a_streamed_request_answered_with_a_json_error_is_recorded_non_streamed(
    gateway: tuple[str, Tee, Keys],
) -> None:
    rid = "refused-upstream"
    error = b'{"error":{"message":"Rate limit","type":"requests","code":"rate_limit_exceeded"}}'
    REPLIES[rid] = (429, "application/json", [error])
    with httpx.Client(base_url=gateway[0]) as client:
        assert client.post("/v1/chat/completions", json=request(rid)).status_code == 429
    stored = entries(gateway, rid)
    assert orjson.loads(stored[0][b"body"])["stream"] is False
    assert stored[1] == {b"kind": b"response", b"status": b"429", b"body": error}
    assert closes(gateway, rid) == [b"done"]


@pytest.mark.parametrize(
    ("body", "headers", "code"),
    [
        (request("refuse-key"), {"Idempotency-Key": "k1"}, "idempotency_key_on_stream"),
        ({**request("refuse-model"), "model": "o1-pro-2025"}, {}, "model_not_streamable"),
        (request("refuse-n", n=500), {}, "invalid"),
    ],
)
def test_refusals_come_before_the_app_and_before_any_write(
    gateway: tuple[str, Tee, Keys], body: dict[str, Any], headers: dict[str, str], code: str
) -> None:
    calls = len(CALLS)
    with httpx.Client(base_url=gateway[0]) as client:
        answer = client.post("/v1/chat/completions", json=body, headers=headers)
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == code
    assert answer.json()["error"]["type"] == "invalid_request_error"
    assert len(CALLS) == calls
    _url, tee, keys = gateway
    assert tee.flush(timeout=10)
    assert billing_id(keys, body["user"]) is None  # nothing published for it
    assert closes(gateway, body["user"]) == []


def test_the_openai_client_raises_bad_request_for_a_refusal(gateway: tuple[str, Tee, Keys]) -> None:
    client = openai.OpenAI(base_url=gateway[0] + "/v1", api_key="k", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="Idempotency-Key"):
        client.chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "x"}],
            stream=True,
            extra_headers={"Idempotency-Key": "abc"},
        )


def test_a_client_disconnect_closes_with_client_disconnect(gateway: tuple[str, Tee, Keys]) -> None:
    rid = "leaves"
    first = b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
    REPLIES[rid] = (200, "text/event-stream", [first, b"<hang>", b"data: [DONE]\n\n"])
    RELEASE.clear()
    with (
        httpx.Client(base_url=gateway[0]) as client,
        client.stream("POST", "/v1/chat/completions", json=request(rid)) as reply,
    ):
        for chunk in reply.iter_raw():
            assert chunk == first
            break
    # The client is gone; the app notices when it next sends.
    for _ in range(500):
        if closes(gateway, rid):
            break
        threading.Event().wait(0.02)
        RELEASE.set()
    assert closes(gateway, rid) == [b"client_disconnect"]
    assert [e[b"body"] for e in entries(gateway, rid)[1:]] == [first]


class Recorder:
    """A publisher with the tee's methods that records what the middleware hands it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.lock = threading.Lock()
        # Where the middleware writes each call's admission record (its Redis and keys).
        self.client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
        self.keys = Keys(f"t-gw-rec-{id(self)}")
        self.references: dict[str, str] = {}  # billing id → the client's reference

    def _record(self, method: str, request_id: str, value: Any = None) -> None:
        with self.lock:
            self.calls.append((method, request_id, value))

    def open(self, meta: bytes, request_id: str, **_admission: Any) -> None:
        self.references[request_id] = orjson.loads(meta).get("client_request_id")
        self._record("open", request_id)

    def chunk(self, request_id: str, data: bytes) -> None:
        self._record("chunk", request_id, data)

    def response(self, request_id: str, status: int, body: bytes) -> None:
        self._record("response", request_id, body)

    def close(self, request_id: str, reason: str = "done") -> None:
        self._record("close", request_id, reason)

    def unbilled(self, request_id: str, route: str, account_id: str | None = None) -> None:
        self._record("unbilled", request_id, (route, account_id))

    def of(self, reference: str) -> list[tuple[str, Any]]:
        """What the call whose client reference is ``reference`` was handed."""
        with self.lock:
            return [
                (method, value)
                for method, rid, value in self.calls
                if self.references.get(rid) == reference
            ]

    def closed(self, request_id: str) -> list[tuple[str, Any]]:
        """``of(request_id)`` once its ``close`` came (the middleware closes after the end)."""
        for _ in range(200):
            calls = self.of(request_id)
            if calls and calls[-1][0] == "close":
                break
            threading.Event().wait(0.01)
        return self.of(request_id)


@pytest.fixture(scope="module")
def recorded() -> Iterator[tuple[str, Recorder]]:
    recorder = Recorder()
    app = BillingMiddleware(
        Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]),
        publisher=recorder,
        hook=hook,
    )
    with served(app) as url:
        yield url, recorder


def _event(i: int, size: int) -> bytes:
    text = f"{i:04d}".ljust(size, "x")
    return b'data: {"choices":[{"index":0,"delta":{"content":"' + text.encode() + b'"}}]}\n\n'


def test_body_chunks_reach_the_publisher_in_handfuls_of_at_most_hold_bytes(
    recorded: tuple[str, Recorder],
) -> None:
    url, recorder = recorded
    rid = "handfuls"
    chunks = [_event(i, 1000) for i in range(60)]  # ~62 KiB: several hand-offs by size
    REPLIES[rid] = (200, "text/event-stream", chunks)
    with httpx.Client(base_url=url) as client:
        got = client.post("/v1/chat/completions", json=request(rid)).content
    body = b"".join(chunks)
    assert got == body
    calls = recorder.closed(rid)
    assert calls[0] == ("open", None) and calls[-1] == ("close", "done")
    handed = [value for method, value in calls[1:-1]]
    assert all(method == "chunk" for method, _ in calls[1:-1])
    assert b"".join(handed) == body  # in order, every byte once
    assert all(len(data) < HOLD_BYTES + len(chunks[0]) for data in handed)
    assert 4 <= len(handed) <= len(chunks) // 2  # not a hand-off per chunk


def test_a_stalled_stream_hands_its_held_chunks_on_at_its_next_chunk(
    recorded: tuple[str, Recorder],
) -> None:
    """A chunk held when the stream stalls goes to the publisher with the next chunk, once it is
    older than ``HOLD_SECONDS``: not only at the end of the response."""
    url, recorder = recorded
    rid = "stalled"
    first, second, last = _event(1, 10), _event(2, 10), b"data: [DONE]\n\n"
    REPLIES[rid] = (200, "text/event-stream", [first, b"<pause>", second, b"<hang>", last])
    RELEASE.clear()
    with (
        httpx.Client(base_url=url) as client,
        client.stream("POST", "/v1/chat/completions", json=request(rid)) as reply,
    ):
        received = b""
        chunks = reply.iter_raw()
        while received != first + second:
            received += next(chunks)
        for _ in range(200):  # the response is still open: the app hangs
            if ("chunk", first + second) in recorder.of(rid):
                break
            threading.Event().wait(0.01)
        assert recorder.of(rid) == [("open", None), ("chunk", first + second)]
        RELEASE.set()
        assert b"".join(chunks) == last
    assert recorder.closed(rid)[1:] == [
        ("chunk", first + second),
        ("chunk", last),
        ("close", "done"),
    ]


class BrokenBook:
    """A price book that fails: the hold cannot be priced."""

    def price_for(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the price book is broken")


class MetaRecorder(Recorder):
    def open(self, meta: bytes, request_id: str, **_admission: Any) -> None:
        self.references[request_id] = orjson.loads(meta).get("client_request_id")
        self._record("open", request_id, orjson.loads(meta))


def test_a_hold_that_cannot_be_priced_is_held_at_0_and_the_call_still_published(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The hold is priced before the app is called (the admission records it): a failure then
    must not lose the call (a ``close`` without its entry would be a call the worker never saw)."""
    recorder = MetaRecorder()
    app = BillingMiddleware(
        Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]),
        publisher=recorder,
        hook=hook,
        prices=BrokenBook(),  # type: ignore[arg-type]
    )
    rid = "unpriceable"
    body = _event(1, 10) + b"data: [DONE]\n\n"
    REPLIES[rid] = (200, "text/event-stream", [body])
    with served(app) as url, httpx.Client(base_url=url) as client:
        assert client.post("/v1/chat/completions", json=request(rid)).content == body
        (method, meta), *rest = recorder.closed(rid)
    assert method == "open" and meta["client_request_id"] == rid and meta["reserved_micros"] == 0
    assert meta["request_id"] != rid  # the gateway's own id
    assert rest == [("chunk", body), ("close", "done")]
    assert any("not priced" in record.getMessage() for record in caplog.records)


def _half_up(value: Decimal) -> int:
    return int(value.to_integral_value(rounding=ROUND_HALF_UP))


LONG_PROMPT = "Tell me about rivers, their sources, their deltas and the towns on them. " * 5


@pytest.mark.parametrize(
    ("limits", "tokens", "content"),
    [
        ({"max_tokens": 100, "n": 2}, 200, "Say hello."),
        ({}, 16_384, "Say hello."),  # no limit: the model's max output (gpt-4o's, in the book)
        ({"max_tokens": 100}, 100, LONG_PROMPT),
    ],
)
def test_reserved_micros_is_the_prompt_estimate_and_max_tokens_at_the_book_price(
    gateway: tuple[str, Tee, Keys], limits: dict[str, int], tokens: int, content: str
) -> None:
    """A long prompt is held at its estimate; a short one at the bound of its estimate that
    ``short_prompt_bound`` gives without the tokenizer (its bytes and the per-message tokens)."""
    rid = f"reserve-{tokens}-{len(content)}"
    REPLIES[rid] = (200, "application/json", [b"{}"])
    body = request(rid, stream=False, **limits)
    body["messages"] = [{"role": "user", "content": content}]
    with httpx.Client(base_url=gateway[0]) as client:
        client.post("/v1/chat/completions", json=body)
    meta = orjson.loads(entries(gateway, rid)[0][b"body"])
    price = load_price_book().price_for("gpt-4o", datetime.now(UTC), provider="openai")
    assert price is not None
    estimate = estimate_prompt("gpt-4o", body["messages"])
    if len(content) > SHORT_PROMPT_BYTES:
        prompt = estimate
    else:
        prompt = 3 + 3 + 1 + len("user") + len(content)  # primer, message, name, the bytes
        assert prompt > estimate
    assert meta["reserved_micros"] == _half_up(price.input * prompt + price.output * tokens) > 0


def test_a_lifespan_scope_passes_through_untouched() -> None:
    seen: list[dict[str, Any]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(scope)
        assert (await receive())["type"] == "lifespan.startup"
        await send({"type": "lifespan.startup.complete"})

    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "lifespan.startup"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    middleware = BillingMiddleware(app, publisher=Recorder(), hook=hook)
    scope = {"type": "lifespan", "asgi": {"version": "3.0"}}
    asyncio.run(middleware(scope, receive, send))
    assert seen == [scope] and sent == [{"type": "lifespan.startup.complete"}]


def test_a_client_x_request_id_the_worker_would_refuse_is_a_400(
    gateway: tuple[str, Tee, Keys],
) -> None:
    calls = len(CALLS)
    with httpx.Client(base_url=gateway[0]) as client:
        answer = client.post(
            "/v1/chat/completions",
            json={**request("x-request-id"), "user": ""},  # the hook names no reference
            headers={"X-Request-Id": "x" * 201},
        )
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "client_request_id"
    assert len(CALLS) == calls


@pytest.mark.parametrize("mode", ["refuse", "pass"])
def test_a_chat_completion_whose_hook_names_no_account_is_never_served_unrecorded(
    mode: str,
) -> None:
    """The hook answers None (the example gateway: no bearer key). Refused with 403 before the
    app, or with ``pass`` served and published ``unbilled``; never served silently."""
    recorder = Recorder()
    app = BillingMiddleware(
        Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]),
        publisher=recorder,
        hook=lambda scope, body: None,
        unbilled_routes=mode,
    )
    rid = f"no-account-{mode}"
    REPLIES[rid] = (200, "application/json", [b"{}"])
    calls = len(CALLS)
    with served(app) as url, httpx.Client(base_url=url) as client:
        answer = client.post("/v1/chat/completions", json=request(rid, stream=False))
    if mode == "refuse":
        assert answer.status_code == 403
        error = answer.json()["error"]
        assert error["code"] == "route_not_billed"
        assert "names no account to bill" in error["message"]
        assert len(CALLS) == calls and recorder.calls == []
    else:
        assert answer.status_code == 200 and len(CALLS) == calls + 1
        ((method, billing_id, value),) = recorder.calls
        assert (method, value) == ("unbilled", ("POST /v1/chat/completions", None))
        assert answer.headers["x-billing-request-id"] == billing_id


def test_the_admission_counts_the_prompt_so_a_call_it_alone_finalizes_is_charged_for_it(
    gateway: tuple[str, Tee, Keys],
) -> None:
    """The admission record carries the prompt's count (never its text): a call whose gateway died
    before publishing its request entry is exposed, and charged at the grace, for its prompt."""
    rid = "counted"
    body = b'{"id":"c3","object":"chat.completion","choices":[]}'
    REPLIES[rid] = (200, "application/json", [body])
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Name three rivers of Europe, one per line."}]  # fmt: skip
    client = openai.OpenAI(base_url=gateway[0] + "/v1", api_key="k", max_retries=0)
    client.chat.completions.create(model="gpt-4o", messages=messages, user=rid)
    entries(gateway, rid)
    keys = gateway[2]
    head = redis.Redis.from_url("redis://127.0.0.1:6379/0").xrange(
        keys.request(billing_id(keys, rid) or rid), count=1
    )
    admission = orjson.loads(head[0][1][b"body"])
    assert admission["prompt_estimate"] == estimate_prompt("gpt-4o", messages)
    assert admission["messages"] == [] and b"rivers" not in head[0][1][b"body"]
    meta, _taken = read_head(head, billing_id(keys, rid))
    alone = reconcile_stream(meta, [], load_price_book())  # the admission, nothing else
    assert alone.estimate is not None
    assert alone.estimate.prompt_tokens == admission["prompt_estimate"]
    assert "prompt_uncounted" not in alone.anomalies
