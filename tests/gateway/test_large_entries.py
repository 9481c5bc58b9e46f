"""Answers larger than the worker's 1 MiB entry limit are billed, not lost (issue 35, leaks 2, 3).

End to end: the middleware in a real uvicorn-served app, publishing through the tee (or the
synchronous ``Publisher``) into the real Redis, and the consumer settling from the real Redis into
PostgreSQL: a non-streamed answer of 1.5 MiB, a stream whose one ``send`` is 1.5 MiB of events, and
a stream with one SSE event of 1.5 MiB each settle at the usage they reported. Then the tee alone:
a write that stopped between two pieces is replayed without writing one twice, and whatever the
sizes and the cut of a body, its entries stay within the limits and decode to the bytes as sent.
"""

from __future__ import annotations

import itertools
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any
from unittest.mock import patch

import httpx
import msgspec
import orjson
import pytest
import redis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY
from sqlalchemy import Engine, select
from sqlalchemy.orm import sessionmaker
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from models.reservations import Reservation
from models.usage import UsageRecord
from worker.config import Settings
from worker.consumer.consumer import Consumer
from worker.contract import entries as entries_module
from worker.contract import publisher as publisher_module
from worker.contract.entries import MAX_ENTRY_BYTES, decode_call
from worker.contract.keys import Keys
from worker.contract.publisher import Command, Publisher, XAdd, frame_commands
from worker.core.prices import load_price_book
from worker.gateway import tee as tee_module
from worker.gateway.events import events_of
from worker.gateway.metadata import CallInfo
from worker.gateway.middleware import BillingMiddleware
from worker.gateway.records import HEADER_BYTES, header
from worker.gateway.spool import spool_name
from worker.gateway.tee import Tee, coalesce

from .serving import served
from .test_tee import meta, unreachable

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

MODEL = "gpt-4o"
PROMPT_TOKENS = 12
BIG = 3 << 19  # 1.5 MiB: over the worker's entry limit
KEY = "test-fingerprint-key"  # the fingerprint key (worker.fingerprint_key)


# ------------------------------------------------------------------ answers over 1 MiB


def logprob(i: int) -> dict[str, Any]:
    """A token's logprobs with five alternatives: what makes answers with logprobs large."""
    alternatives = [
        {"token": f" t{i}-{j}", "logprob": -1.5 - j, "bytes": [32, 116, 48 + j]} for j in range(5)
    ]
    return {"token": f" w{i}", "logprob": -0.25, "bytes": [32, 119], "top_logprobs": alternatives}


def chunk(choice: dict[str, Any], **extra: Any) -> bytes:
    body = {"id": "chatcmpl-big", "object": "chat.completion.chunk", "created": 1764504000,
            "model": MODEL, "choices": [choice], **extra}  # fmt: skip
    return b"data: " + orjson.dumps(body) + b"\n\n"


def usage(tokens: int) -> dict[str, int]:
    return {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": tokens,
            "total_tokens": PROMPT_TOKENS + tokens}  # fmt: skip


def usage_chunk(tokens: int) -> bytes:
    body = {"id": "chatcmpl-big", "object": "chat.completion.chunk", "created": 1764504000,
            "model": MODEL, "choices": [], "usage": usage(tokens)}  # fmt: skip
    return b"data: " + orjson.dumps(body) + b"\n\n"


TOKENS = BIG // len(orjson.dumps(logprob(0))) + 1  # enough logprobs for 1.5 MiB (the shortest)


def non_streamed() -> tuple[list[bytes], int]:
    """One JSON body of more than 1.5 MiB (logprobs), with usage."""
    body = {
        "id": "chatcmpl-big", "object": "chat.completion", "created": 1764504000, "model": MODEL,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "".join(f" w{i}" for i in range(TOKENS))},
                     "logprobs": {"content": [logprob(i) for i in range(TOKENS)]}}],
        "usage": usage(TOKENS),
    }  # fmt: skip
    raw = orjson.dumps(body)
    assert len(raw) > BIG
    return [raw], TOKENS


def one_send_of_many_events() -> tuple[list[bytes], int]:
    """A whole stream of small events (a token and its logprobs each) sent at once: 1.5 MiB."""
    events = [chunk({"index": 0, "delta": {"role": "assistant", "content": ""}})]
    events += [
        chunk({"index": 0, "delta": {"content": f" w{i}"}, "logprobs": {"content": [logprob(i)]}})
        for i in range(TOKENS)
    ]
    events += [
        chunk({"index": 0, "delta": {}, "finish_reason": "stop"}),
        usage_chunk(TOKENS),
        b"data: [DONE]\n\n",
    ]
    send = b"".join(events)
    assert len(send) > BIG and max(map(len, events)) < 1024
    return [send], TOKENS


def one_event_of_the_whole_answer() -> tuple[list[bytes], int]:
    """The whole answer in one SSE event of 1.5 MiB (LiteLLM's fake streaming), then usage."""
    content = "".join(f" w{i}" for i in range(TOKENS))
    logprobs = {"content": [logprob(i) for i in range(TOKENS)]}
    event = chunk({"index": 0, "delta": {"role": "assistant", "content": content},
                   "logprobs": logprobs, "finish_reason": "stop"})  # fmt: skip
    assert len(event) > BIG
    return [event, usage_chunk(TOKENS) + b"data: [DONE]\n\n"], TOKENS


ANSWERS = {
    "non_streamed": non_streamed,
    "one_send_of_many_events": one_send_of_many_events,
    "one_event_of_the_whole_answer": one_event_of_the_whole_answer,
}
REPLIES: dict[str, tuple[bool, list[bytes]]] = {}  # request id -> (streamed, sends)


async def chat(request: Request) -> Response:
    body = orjson.loads(await request.body())
    streamed, sends = REPLIES[body["user"]]
    if not streamed:
        return Response(sends[0], media_type="application/json")

    async def stream() -> AsyncIterator[bytes]:
        for send in sends:  # one ASGI send each
            yield send

    return StreamingResponse(stream(), media_type="text/event-stream")


def hook(scope: dict[str, Any], body: dict[str, Any]) -> CallInfo | None:
    return CallInfo(account_id=body["user"].split(":")[0], request_id=body["user"],
                    provider="openai")  # fmt: skip


@pytest.fixture(params=["tee", "publisher"])
def gateway(
    request: pytest.FixtureRequest, redis_client: redis.Redis, prefix: str, tmp_path: Path
) -> Iterator[tuple[str, Tee | None]]:
    """The middleware publishing through the tee (its ``chunk``), or through the synchronous
    ``Publisher`` (the middleware cuts the events itself and calls ``frames``)."""
    keys = Keys(prefix)
    tee = Tee(redis_client, keys, spool_dir=tmp_path / "spool") if request.param == "tee" else None
    app = BillingMiddleware(
        Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]),
        publisher=tee or Publisher(redis.Redis.from_url("redis://127.0.0.1:6379/0"), keys),
        hook=hook,
    )
    with served(app) as url:
        yield url, tee
    if tee is not None:
        tee.stop()


def closed(redis_client: redis.Redis, keys: Keys, rid: str, tee: Tee | None) -> None:
    """Until the middleware published the call's close (after the client got the last byte)."""
    for _ in range(500):
        if tee is not None:
            assert tee.flush(timeout=10)
        if any(
            f[b"kind"] == b"close" and f[b"request_id"] == rid.encode()
            for _id, f in redis_client.xrange(keys.events())
        ):
            return
        threading.Event().wait(0.02)
    raise AssertionError(f"no close for {rid}")


def expected_charge(tokens: int) -> int:
    """The book's price of the reported usage, computed here from the row's decimal prices."""
    price = load_price_book().price_for(MODEL, datetime.now(UTC), provider="openai")
    assert price is not None
    exact = price.input * PROMPT_TOKENS + price.output * tokens
    return int(Decimal(exact).to_integral_value(rounding=ROUND_HALF_UP))


@pytest.mark.parametrize("answer", list(ANSWERS))
def test_an_answer_over_the_entry_limit_settles_at_its_reported_usage(
    gateway: tuple[str, Tee | None],
    answer: str,
    redis_client: redis.Redis,
    prefix: str,
    pg_engine: Engine,
) -> None:
    url, tee = gateway
    keys = Keys(prefix)
    sends, tokens = ANSWERS[answer]()
    streamed = answer != "non_streamed"
    rid = f"acct-{prefix}:{answer}"
    REPLIES[rid] = (streamed, sends)
    request = {"model": MODEL, "messages": [{"role": "user", "content": "Say a lot."}],
               "stream": streamed, "user": rid, "logprobs": True, "top_logprobs": 5}  # fmt: skip
    if streamed:
        request["stream_options"] = {"include_usage": True}
    with httpx.Client(base_url=url, timeout=30) as client:
        reply = client.post("/v1/chat/completions", json=request)
    assert reply.content == b"".join(sends)
    rid = reply.headers["x-billing-request-id"]  # the gateway's id; the user is the reference
    closed(redis_client, keys, rid, tee)
    stored = redis_client.xrange(keys.request(rid))  # before the worker deletes it

    sessions = sessionmaker(pg_engine, expire_on_commit=False)
    settings_ = Settings(prefix=prefix, batch_size=50, claim_idle_ms=60_000, sweep_idle_ms=0,
                         grace_seconds=3600, hash_salt=KEY)  # fmt: skip
    consumer = Consumer(redis_client, sessions, settings_, name="c1", recheck_seconds=0)
    for _ in range(5):
        if not consumer.poll(block_ms=None).read:
            break
    with sessions() as s:
        row = s.execute(
            select(Reservation.status, UsageRecord.usage_source, UsageRecord.prompt_tokens,
                   UsageRecord.completion_tokens, UsageRecord.charge_micros)
            .outerjoin(UsageRecord, UsageRecord.reservation_id == Reservation.id)
            .where(Reservation.request_id == rid)
        ).one_or_none()  # fmt: skip
    dead = [f[b"reason"] for _id, f in redis_client.xrange(keys.dead)]
    assert row is not None, f"the call was never held; dead letters: {dead}"
    assert tuple(row) == ("settled", "reported", PROMPT_TOKENS, tokens, expected_charge(tokens))
    assert dead == []
    assert not redis_client.exists(keys.request(rid))  # settled: its stream deleted
    assert all(len(fields[b"body"]) <= MAX_ENTRY_BYTES for _id, fields in stored)
    if answer != "one_send_of_many_events":  # one body over the limit: written in parts
        assert any(fields[b"kind"] == b"part" for _id, fields in stored)


# ------------------------------------------------------------------ the tee's writes and replays


def metric(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def test_a_write_that_stopped_between_two_pieces_is_replayed_without_writing_one_twice(
    redis_client: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    """Redis took a batch's writes up to its first ``more=1`` entry, then the connection dropped
    before the replies: the tee spools the batch and replays it. Every piece was made once (a
    chunk run's cut, a big event's or response's commands), so the spool holds the same entries
    under the same ids: Redis refuses those it has, and the streams decode to the bytes as sent
    (a piece under another id would be appended twice)."""
    keys = Keys(prefix)
    tee = Tee(redis_client, keys, spool_dir=tmp_path / "spool", retry_seconds=0.05)
    real = tee._execute
    dropped: list[int] = []

    def drop_after_first_piece(commands: list[Command]) -> None:
        at = next((i for i, c in enumerate(commands) if "more" in getattr(c, "fields", {})), None)
        if dropped or at is None:
            real(commands)
            return
        written = commands[: at + 1]
        real(written)
        # The call-stream entries Redis now holds (explicit ids): refused when replayed.
        dropped.append(sum(1 for c in written if isinstance(c, XAdd) and c.entry_id != "*"))
        raise redis.ConnectionError("the connection dropped before the replies")

    tee._execute = drop_after_first_piece  # type: ignore[method-assign]
    _sends, _tokens = one_send_of_many_events()
    body = _sends[0] + one_event_of_the_whole_answer()[0][0] + b"no blank line at the end"
    response = non_streamed()[0][0]
    big_event = b"data: " + b"e" * (MAX_ENTRY_BYTES + 10) + b"\n\n"
    duplicates = metric("billing_gateway_duplicate_entries_total")
    try:
        tee.open(meta("c"))
        tee.chunk("c", body)
        tee.close("c", "done")
        tee.open(meta("r", stream=False))
        tee.response("r", 200, response)
        tee.close("r", "done")
        tee.open(meta("f"))
        tee.frames("f", [b"data: 1\n\n", big_event, b"data: [DONE]\n\n"])
        tee.close("f", "done")
        assert tee.flush(timeout=20)
    finally:
        tee.stop()
    assert dropped  # the drop happened, after some of a batch was written
    assert metric("billing_gateway_duplicate_entries_total") - duplicates >= dropped[0]
    record = decode_call(redis_client.xrange(keys.request("c")), "c")
    assert b"".join(record.frames) == body
    assert decode_call(redis_client.xrange(keys.request("r")), "r").response_body == response
    frames = decode_call(redis_client.xrange(keys.request("f")), "f").frames
    assert frames == [b"data: 1\n\n", big_event, b"data: [DONE]\n\n"]
    for rid in "crf":
        stored = redis_client.xrange(keys.request(rid))
        assert all(len(fields[b"body"]) <= MAX_ENTRY_BYTES for _id, fields in stored)


def spooled(path: Path) -> list[Command]:
    """Every command in a spool file, in order."""
    data, at, out = path.read_bytes(), 0, []
    decode = msgspec.msgpack.Decoder(list[Command]).decode
    while at < len(data):
        found = header(data[at : at + HEADER_BYTES])
        assert found is not None
        length = found[0]
        out += decode(data[at + HEADER_BYTES : at + HEADER_BYTES + length])
        at += HEADER_BYTES + length
    return out


def test_a_spooled_body_over_the_limit_is_spooled_in_pieces_and_replayed(
    redis_client: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    """Redis away: the pieces go to the spool as they would have gone to Redis, each within the
    limit under its own id; the next start replays them into a stream that decodes whole."""
    keys, spool_dir = Keys(prefix), tmp_path / "spool"
    body = one_event_of_the_whole_answer()[0][0] + b"data: [DONE]\n\n"
    down = Tee(unreachable(), keys, spool_dir=spool_dir, retry_seconds=0.05)
    down.open(meta("s"))
    down.chunk("s", body)
    down.close("s", "done")
    assert not down.stop(timeout=1)
    commands = [c for c in spooled(spool_dir / spool_name()) if isinstance(c, XAdd)]
    pieces = [c for c in commands if c.key == keys.request("s")][1:]  # after the request entry
    assert [c.fields["kind"] for c in pieces] == [b"frame", b"part", b"frame"]
    assert [c.fields.get("more") for c in pieces] == [b"1", None, None]
    assert all(len(c.fields["body"]) <= MAX_ENTRY_BYTES for c in pieces)
    assert len({c.entry_id for c in pieces}) == 3
    back = Tee(redis_client, keys, spool_dir=spool_dir)
    assert back.flush(timeout=20)
    back.stop()
    assert b"".join(decode_call(redis_client.xrange(keys.request("s")), "s").frames) == body


def test_coalesce_never_merges_a_piece() -> None:
    """Whatever the sizes: pieces far smaller than ``MAX_MERGED_BYTES`` (the entry limit lowered
    to 10 bytes) are still written as they are, and end the small frames' runs around them."""
    keys = Keys("k")
    counter = itertools.count(1)
    small = [b"data: %d\n\n" % i for i in range(3)]
    big = b"x" * 25
    with patch.multiple(publisher_module, MAX_ENTRY_BYTES=10):
        commands = frame_commands(keys, "r", [*small, big, *small], lambda: f"1-{next(counter)}")
    merged = coalesce(commands)
    assert [c.fields for c in merged if isinstance(c, XAdd)] == [
        {"kind": b"frame", "body": b"".join(small)},  # the small frames before it: merged
        {"kind": b"frame", "body": b"x" * 10, "more": b"1"},  # its pieces as they were
        {"kind": b"part", "body": b"x" * 10, "more": b"1"},
        {"kind": b"part", "body": b"x" * 5},
        {"kind": b"frame", "body": b"".join(small)},  # the small frames after it
    ]
    assert merged[1:4] == commands[3:6]


# Lowered limits for the property below: entries of at most 100 bytes, merged up to 60.
LOW_ENTRY, LOW_MERGED = 100, 60

# Lines of any size (to 3.5 entries), each ended by a blank line (an event) or a line end or not.
sse_lines = st.tuples(
    st.one_of(
        st.sampled_from([b'data: {"a":1}', b"data: [DONE]", b": ping", b""]),
        st.integers(0, 350).map(lambda n: b"data: " + b"y" * n),
    ),
    st.sampled_from([b"\n\n", b"\n\n", b"\r\n\r\n", b"\r\r", b"\n\r\n", b"\n", b"\r", b""]),
).map(b"".join)
sse_bodies = st.lists(sse_lines, min_size=1, max_size=16).map(b"".join)
body_calls = iter(range(10**9))


def cut(body: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(c % (len(body) + 1) for c in cuts), len(body)]
    return [body[a:b] for a, b in itertools.pairwise(bounds) if b > a]


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sse_bodies, st.lists(st.integers(0, 2000), max_size=6), st.sets(st.integers(0, 6)),
       st.booleans())  # fmt: skip
@example(b'data: {"a":1}\n\n' * 6, [], set(), False)  # one frames call of 90 bytes
@example(b'data: {"a":1}\n\n' * 6 + b"data: " + b"y" * 250 + b"\r\n\r\nrest", [], set(), True)
def test_whatever_the_sizes_and_cut_entries_stay_within_the_limits_and_decode_to_the_body(
    redis_client: redis.Redis, body: bytes, cuts: list[int], flushes: set[int], chunked: bool
) -> None:
    """With the limits lowered (an entry 100 bytes, merged 60): through ``chunk`` (the body's
    chunks) or ``frames`` (its events, several a call), each entry holds at most 100 bytes, a frame
    entry (not in pieces) holds whole events, merged past 60 bytes only when it is one event, and
    the call's frames decode to the body byte for byte."""
    keys = Keys(f"t-large-{next(body_calls)}")
    spool = tempfile.TemporaryDirectory()
    limits = [
        patch.multiple(tee_module, MAX_ENTRY_BYTES=LOW_ENTRY, MAX_MERGED_BYTES=LOW_MERGED),
        patch.multiple(publisher_module, MAX_ENTRY_BYTES=LOW_ENTRY),
        patch.multiple(entries_module, MAX_ENTRY_BYTES=LOW_ENTRY * 4),  # the request entry's
    ]
    for limit in limits:
        limit.start()
    tee = Tee(redis_client, keys, spool_dir=spool.name)
    try:
        tee.open({**meta("c"), "messages": []})
        events = events_of(body)
        parts = cut(body, cuts) if chunked else [list(g) for g in _grouped(events, cuts)]
        for i, part in enumerate(parts):
            if chunked:
                tee.chunk("c", part)  # type: ignore[arg-type]
            else:
                tee.frames("c", part)  # type: ignore[arg-type]
            if i in flushes:
                assert tee.flush(timeout=10)
        tee.close("c", "done")
        assert tee.flush(timeout=10)
        stored = redis_client.xrange(keys.request("c"))
        for _id, fields in stored[1:]:
            assert len(fields[b"body"]) <= LOW_ENTRY
            if fields[b"kind"] == b"frame" and b"more" not in fields:
                held = events_of(fields[b"body"])
                assert len(fields[b"body"]) <= LOW_MERGED or len(held) == 1
        record = decode_call(stored, "c")
        assert b"".join(record.frames) == body
        # Each frame holds whole events: the body's events are the frames' events, in order.
        assert [e for frame in record.frames for e in events_of(frame)] == events
        ids = [tuple(map(int, entry_id.split(b"-"))) for entry_id, _ in stored]
        assert ids == sorted(set(ids))
    finally:
        tee.stop()
        for limit in limits:
            limit.stop()
        spool.cleanup()
        for key in redis_client.scan_iter(match=f"{keys.prefix}:*"):
            redis_client.delete(key)


def _grouped(events: list[bytes], cuts: list[int]) -> list[list[bytes]]:
    """``events`` in ``frames`` calls of one or more events each, cut at ``cuts``."""
    bounds = sorted({0, len(events), *(c % (len(events) + 1) for c in cuts)})
    return [events[a:b] for a, b in itertools.pairwise(bounds) if b > a]
