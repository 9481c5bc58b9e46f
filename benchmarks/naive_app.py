"""The naive design row 3 compares against: one Celery task per frame, a final task per call.

The gateway enqueues ``naive.open`` when a call starts (the hold), ``naive.frame`` for every frame
entry (appended to a per-call accumulation in Redis, keyed by its sequence number so the two pool
processes may run them in any order), ``naive.response`` for a non-streamed body, and ``naive.settle``
when the call ends, with the number of entries it sent. ``naive.settle`` reads the accumulation (and
retries shortly if entries are still in flight), reconciles it with the same pure code the worker
uses, applies the result to the same ledger in its own transaction, then deletes the accumulation.
Run by a real ``celery worker`` subprocess (``bench_naive``); configured through the environment:

* ``BENCH_NAIVE_BROKER`` — the broker, a Redis URL on a database index of its own;
* ``BENCH_NAIVE_REDIS`` — where the accumulations live;
* ``BENCH_NAIVE_PREFIX`` — their key prefix, also the queue name;
* ``BENCH_NAIVE_DATABASE_URL`` — the ledger.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from celery import Celery
from sqlalchemy.orm import Session, sessionmaker

from worker.core.prices import PriceBook, load_price_book
from worker.core.reconcile import reconcile_response, reconcile_stream
from worker.core.request import parse_request
from worker.ledger.database import make_engine, session_factory
from worker.ledger.operations import apply_result, hold

PREFIX = os.environ.get("BENCH_NAIVE_PREFIX", "bench-naive")
GRACE = timedelta(hours=1)

app = Celery("naive", broker=os.environ.get("BENCH_NAIVE_BROKER", "redis://127.0.0.1:6379/13"))
app.conf.update(
    task_ignore_result=True,
    task_default_queue=PREFIX,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


class _Resources:
    """Per pool process: a Redis client, a session factory, the price book (rebuilt after fork)."""

    pid = -1
    client: redis.Redis
    sessions: sessionmaker[Session]
    book: PriceBook


_r = _Resources()


def resources() -> _Resources:
    if _r.pid != os.getpid():
        _r.client = redis.Redis.from_url(
            os.environ.get("BENCH_NAIVE_REDIS", "redis://127.0.0.1:6379/13")
        )
        _r.sessions = session_factory(make_engine(os.environ["BENCH_NAIVE_DATABASE_URL"]))
        _r.book = load_price_book()
        _r.pid = os.getpid()
    return _r


def accumulation(request_id: str) -> str:
    return f"{PREFIX}:acc:{request_id}"


@app.task(name="naive.ping")
def ping() -> None:
    resources().client.incr(f"{PREFIX}:ping")


@app.task(name="naive.open")
def open_call(meta: str) -> None:
    r = resources()
    with r.sessions() as session, session.begin():
        hold(session, parse_request(meta), now=datetime.now(UTC))


@app.task(name="naive.frame")
def frame(request_id: str, seq: int, body: str) -> None:
    resources().client.hset(accumulation(request_id), str(seq), body)


@app.task(name="naive.response")
def response(request_id: str, status: int, body: str) -> None:
    resources().client.hset(accumulation(request_id), "response", f"{status} {body}")


@app.task(name="naive.settle", bind=True, max_retries=200)
def settle(self: Any, request_id: str, meta: str, entries: int) -> None:
    r = resources()
    key = accumulation(request_id)
    stored = r.client.hgetall(key)
    if len(stored) < entries:
        raise self.retry(countdown=0.02)
    parsed = parse_request(meta)
    if b"response" in stored:
        status, _, body = stored[b"response"].partition(b" ")
        result = reconcile_response(parsed, int(status), body, r.book)
    else:
        frames = [stored[k] for k in sorted(stored, key=int)]
        result = reconcile_stream(parsed, frames, r.book)
    with r.sessions() as session, session.begin():
        apply_result(session, result, now=datetime.now(UTC), grace=GRACE)
    pipe = r.client.pipeline(transaction=False)
    pipe.delete(key)
    pipe.incr(f"{PREFIX}:settled")
    pipe.execute()
