"""Admission is one write-ahead record (issue 48, point 3): whatever happens to the gateway, its tee,
the call's stream or the worker after a call was admitted, the call ends in the ledger.

Each fault against the real example gateway (the ASGI middleware and the tee, in a process of its
own where it is killed), the recorded upstream, the real openai client and a real ``billing
worker`` on PostgreSQL:

* the gateway killed (SIGKILL) while its calls stream, their first chunks sent and the tee's
  queue (the linger) lost with it: every call is unsettled ``incomplete``, its hold the exposure;
* the worker down for longer than the streams' TTL: every call settles as the upstream sent it
  (an admitted call's stream has no TTL: only the worker deletes it);
* Redis away and the spool refusing writes: every call is refused (503), none served unbilled;
  Redis away with a spool: every call is served, spooled, and settles once Redis is back;
* an ``Idempotency-Key`` reused while its call is in flight: 409, and served once.

Short in ``make test``; ``make chaos`` runs them at full size (``--chaos-full``).
"""

from __future__ import annotations

import gzip
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
from gateway.edges import usage_of
from gateway.harness import (
    MASTER_KEY,
    BillingWorker,
    Call,
    LiteLLMProxy,
    oracle_charge,
    wait_decided,
)
from gateway.serving import served
from gateway.upstream import Upstream
from sqlalchemy.orm import Session, sessionmaker
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from devtools.demo_gateway import litellm_config
from devtools.example_app import account_from_key, create_app
from devtools.localservers.ports import free_port
from devtools.localservers.processes import die_with_parent
from devtools.localservers.redis_server import PrivateRedis
from worker.contract.keys import Keys
from worker.gateway.middleware import BillingMiddleware
from worker.gateway.tee import Tee
from worker.ledger.balances import ledger_is_balanced
from worker.ledger.database import make_engine

from .conftest import Scale

pytestmark = [pytest.mark.chaos, pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]

MODEL = "gpt-4o-mini"  # what the ``clean`` scenario's recording names
PRICES = {"input": "0.15", "cached_input": "0.075", "output": "0.60"}  # USD per 1M tokens
REPO = Path(__file__).resolve().parents[2]


class Stack:
    def __init__(self, redis_server: PrivateRedis, upstream: Upstream, env: dict[str, str],
                 sessions: sessionmaker[Session], workdir: Path) -> None:  # fmt: skip
        self.redis = redis_server
        self.upstream = upstream
        self.env = env
        self.sessions = sessions
        self.workdir = workdir
        self.keys = Keys(env["BILLING_PREFIX"])

    def worker(self, name: str) -> BillingWorker:
        return BillingWorker(self.env, self.workdir / name)


@pytest.fixture(scope="module")
def stack(pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("admission")
    redis_server = PrivateRedis(workdir / "redis")
    redis_server.start()
    upstream = Upstream.start()
    book = workdir / "prices.toml"
    book.write_text(
        f'[[price]]\nmodel = "{MODEL}"\n' + "".join(f'{k} = "{v}"\n' for k, v in PRICES.items())
    )
    env = {
        "REDIS_URL": redis_server.url(0),
        "CELERY_BROKER_URL": redis_server.url(1),
        "DATABASE_URL": pg_url,
        "BILLING_PREFIX": f"adm-{uuid.uuid4().hex[:8]}",
        "BILLING_PRICE_BOOK": str(book),
        "BILLING_DRAIN_MS": "500",
        "BILLING_BLOCK_MS": "100",
        "BILLING_SWEEP_IDLE_MS": "2000",
        "BILLING_SWEEP_INTERVAL_SECONDS": "3",
        "BILLING_CLAIM_IDLE_MS": "3000",
    }
    engine = make_engine(pg_url)
    try:
        yield Stack(redis_server, upstream, env, sessionmaker(engine), workdir)
    finally:
        upstream.stop()
        redis_server.stop()
        engine.dispose()


def _accounts(count: int) -> list[str]:
    run = uuid.uuid4().hex[:8]
    return [f"acct-adm-{run}-{i}" for i in range(count)]


def _gateway_process(stack: Stack, upstream_url: str, port: int) -> subprocess.Popen[bytes]:
    log = open(stack.workdir / f"gateway-{port}.log", "ab")  # noqa: SIM115 - the process's
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [
        sys.executable, "-m", "devtools.example_app", "--upstream", upstream_url,
        "--port", str(port), "--redis", stack.env["REDIS_URL"],
        "--prefix", stack.env["BILLING_PREFIX"], "--spool-dir", str(stack.workdir / f"spool-{port}"),
    ]  # fmt: skip
    proc = subprocess.Popen(
        argv, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True, preexec_fn=die_with_parent,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=0.5)
            return proc
        except httpx.TransportError:
            if proc.poll() is not None:
                raise AssertionError((stack.workdir / f"gateway-{port}.log").read_text()) from None
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("the gateway did not start")


def _check_books(stack: Stack, calls: list[Call]) -> None:
    with stack.sessions() as session:
        assert ledger_is_balanced(session)


# Calls in flight at each kill: all must have had their first chunk within the upstream's 3 s
# pause, on a loaded machine too; ``make chaos`` runs more rounds, not more calls a round.
PER_KILL = 6


def _kill_mid_stream(url: str, headers: Callable[[str], dict[str, str]], body: dict[str, Any],
                     accounts: list[str], pid: int) -> None:  # fmt: skip
    """Stream one call per account through ``url`` (``headers`` name the account as the gateway
    reads it); once each had its first chunk, SIGKILL the process group ``pid``. Every call must
    have been served (its first chunk came)."""
    started = threading.Barrier(len(accounts) + 1, timeout=60)
    errors: list[BaseException] = []

    def stream(account: str) -> None:
        try:
            with (
                httpx.Client(timeout=30) as client,
                client.stream("POST", url, headers=headers(account),
                              json={**body, "user": account}) as answer,
            ):  # fmt: skip
                assert answer.status_code == 200
                chunks = answer.iter_raw()
                next(chunks)  # the first chunk came
                started.wait()
                for _ in chunks:
                    pass
        except (httpx.HTTPError, threading.BrokenBarrierError):
            pass  # the gateway died under it
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=stream, args=(a,)) for a in accounts]
    for thread in threads:
        thread.start()
    started.wait()
    os.killpg(pid, signal.SIGKILL)
    for thread in threads:
        thread.join(timeout=30)
    assert not errors, errors


MESSAGES = [{"role": "user", "content": "Say hello."}]


def test_a_gateway_killed_mid_stream_loses_no_admitted_call(stack: Stack, scale: Scale) -> None:
    """SIGKILL while every call has had its first chunk (and the rest is 3 s away): the request
    entries and frames waiting in the tee die with it; the admission records do not."""
    rounds = scale.pick(1, 16)
    worker = stack.worker("worker-kill")
    worker.start()
    accounts: list[str] = []
    try:
        for _ in range(rounds):
            port = free_port()
            proc = _gateway_process(stack, stack.upstream.scenario_url("slow"), port)
            batch = _accounts(PER_KILL)
            accounts += batch
            body = {"model": MODEL, "stream": True, "stream_options": {"include_usage": True},
                    "messages": MESSAGES}  # fmt: skip
            try:
                _kill_mid_stream(
                    f"http://127.0.0.1:{port}/v1/chat/completions",
                    lambda account: {"Authorization": f"Bearer {account}"},  # the payer
                    body,
                    batch,
                    proc.pid,
                )
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        calls = wait_decided(stack.sessions, accounts, len(accounts), timeout=120,
                             processes=(worker,))  # fmt: skip
    finally:
        worker.stop()
    assert sorted(c.account_id for c in calls) == sorted(accounts)  # every call, none twice
    assert {(c.status, c.reason) for c in calls} == {("unsettled", "incomplete")}
    _check_books(stack, calls)


def test_a_litellm_proxy_killed_mid_stream_loses_no_admitted_call(
    stack: Stack, scale: Scale
) -> None:
    """The same through the real LiteLLM proxy: its hook writes the admission in its pre-call
    hook, before the router calls the upstream; killed after every call's first chunk."""
    rounds = scale.pick(1, 16)
    worker = stack.worker(f"worker-litellm-{uuid.uuid4().hex[:6]}")
    worker.start()
    accounts: list[str] = []
    try:
        for _ in range(rounds):
            config = stack.workdir / f"litellm-{uuid.uuid4().hex[:6]}.yaml"
            config.write_text(
                litellm_config([("slow", MODEL, stack.upstream.scenario_url("slow"))])
            )
            env = {**stack.env, "BILLING_LITELLM_ACCOUNT": "end_user",
                   "BILLING_SPOOL_DIR": str(config.with_suffix(".spool"))}  # fmt: skip
            proxy = LiteLLMProxy(config, env, stack.workdir / config.stem)
            batch = _accounts(PER_KILL)
            accounts += batch
            try:
                proxy.start()
                proxy.wait_ready(90)
                assert proxy.proc is not None
                _kill_mid_stream(
                    f"{proxy.base_url}/chat/completions",
                    lambda _account: {"Authorization": f"Bearer {MASTER_KEY}"},
                    {"model": "slow", "stream": True, "messages": MESSAGES},
                    batch,
                    proxy.proc.pid,
                )
                proxy.proc.wait(timeout=10)
            finally:
                proxy.stop()
        calls = wait_decided(stack.sessions, accounts, len(accounts), timeout=120,
                             processes=(worker,))  # fmt: skip
    finally:
        worker.stop()
    assert sorted(c.account_id for c in calls) == sorted(accounts)
    assert {(c.status, c.reason) for c in calls} == {("unsettled", "incomplete")}
    _check_books(stack, calls)


def test_a_worker_down_past_the_stream_ttl_loses_nothing(stack: Stack, scale: Scale) -> None:
    """Calls made while no worker runs, with streams whose TTL is one second, read three
    seconds later: every one settles at the upstream's usage."""
    count = scale.pick(4, 200)
    keys = stack.keys
    tee = Tee.from_url(stack.env["REDIS_URL"], keys, ttl_seconds=1,
                       spool_dir=stack.workdir / "spool-ttl")  # fmt: skip
    accounts = _accounts(count)
    with served(create_app(stack.upstream.scenario_url("clean"), tee)) as url:
        for i, account in enumerate(accounts):
            client = openai.OpenAI(base_url=url + "/v1", api_key=account, max_retries=0)
            if i % 2:
                client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "Say hello."}]
                )
            else:
                for _ in client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "Say hello."}],
                    stream=True, stream_options={"include_usage": True},
                ):  # fmt: skip
                    pass
        assert tee.flush(10)
    tee.stop()
    time.sleep(3)  # past every TTL the tee set
    worker = stack.worker("worker-ttl")
    worker.start()
    try:
        calls = wait_decided(stack.sessions, accounts, count, timeout=90, processes=(worker,))
    finally:
        worker.stop()
    assert sorted(c.account_id for c in calls) == sorted(accounts)
    assert {(c.status, c.usage_source) for c in calls} == {("settled", "reported")}
    sent = stack.upstream.sent[-count:]
    for call in calls:
        assert call.charge_micros is not None and call.charge_micros > 0
    assert sum(c.charge_micros or 0 for c in calls) == sum(
        oracle_charge(PRICES, usage_of(s)) for s in sent
    )
    _check_books(stack, calls)


def test_no_redis_and_no_spool_serves_nothing(stack: Stack, tmp_path: Path) -> None:
    """The admission cannot be written anywhere: the call is refused with 503, never served."""
    dead = f"redis://127.0.0.1:{free_port()}/0"
    not_a_directory = tmp_path / "spool"
    not_a_directory.write_text("a file where the spool directory should be")
    tee = Tee.from_url(dead, stack.keys, spool_dir=not_a_directory, retry_seconds=0.1)
    before = len(stack.upstream.sent)
    try:
        with served(create_app(stack.upstream.scenario_url("clean"), tee)) as url:
            client = openai.OpenAI(base_url=url + "/v1", api_key="acct-nowhere", max_retries=0)
            for stream in (False, True):
                with pytest.raises(openai.InternalServerError) as refused:
                    client.chat.completions.create(
                        model=MODEL, messages=[{"role": "user", "content": "Say hello."}],
                        stream=stream,
                    )  # fmt: skip
                assert refused.value.status_code == 503
                assert refused.value.code == "billing_unavailable"
    finally:
        tee.stop(0.5)
    assert len(stack.upstream.sent) == before  # nothing reached the upstream


def test_redis_away_the_spool_keeps_every_admission(stack: Stack, scale: Scale) -> None:
    """Redis stopped: the admission records go to the spool before the calls are served; once
    Redis is back the tee replays them and the worker settles every call as sent."""
    count = scale.pick(4, 200)
    accounts = _accounts(count)
    tee = Tee.from_url(stack.env["REDIS_URL"], stack.keys, spool_dir=stack.workdir / "spool-away",
                       retry_seconds=0.2)  # fmt: skip
    worker = stack.worker("worker-away")
    try:
        with served(create_app(stack.upstream.scenario_url("clean"), tee)) as url:
            stack.redis.stop()
            try:
                for account in accounts:
                    client = openai.OpenAI(base_url=url + "/v1", api_key=account, max_retries=0)
                    client.chat.completions.create(
                        model=MODEL, messages=[{"role": "user", "content": "Say hello."}]
                    )
            finally:
                stack.redis.start()
            assert tee.flush(30)
        worker.start()
        calls = wait_decided(stack.sessions, accounts, count, timeout=90, processes=(worker,))
    finally:
        tee.stop()
        worker.stop()
    assert {(c.status, c.usage_source) for c in calls} == {("settled", "reported")}
    assert sorted(c.account_id for c in calls) == sorted(accounts)
    _check_books(stack, calls)


def test_an_idempotency_key_in_flight_is_refused_then_free_again(stack: Stack) -> None:
    """Two calls with one Idempotency-Key at once: one served, the other 409 (the openai client
    would retry it; here it does not). Once the first ended, the key serves a new call."""
    tee = Tee.from_url(stack.env["REDIS_URL"], stack.keys, spool_dir=stack.workdir / "spool-idem")
    account = _accounts(1)[0]
    key = f"idem-{uuid.uuid4().hex}"
    before = len(stack.upstream.sent)
    try:
        with served(create_app(stack.upstream.scenario_url("slow"), tee)) as url:
            body = {"model": MODEL, "messages": [{"role": "user", "content": "Say hello."}]}
            headers = {"Authorization": f"Bearer {account}", "Idempotency-Key": key}
            results: list[int] = []

            def call() -> None:
                answer = httpx.post(url + "/v1/chat/completions", json=body, headers=headers,
                                    timeout=30)  # fmt: skip
                results.append(answer.status_code)

            first = threading.Thread(target=call)
            first.start()
            time.sleep(1.0)  # the first is in flight (the slow scenario pauses 3 s)
            second = httpx.post(url + "/v1/chat/completions", json=body, headers=headers,
                                timeout=30)  # fmt: skip
            assert second.status_code == 409
            assert second.json()["error"]["code"] == "idempotency_key_in_use"
            first.join(30)
            assert results == [200]
            third = httpx.post(url + "/v1/chat/completions", json=body, headers=headers,
                               timeout=30)  # fmt: skip
            assert third.status_code == 200
    finally:
        tee.stop()
    assert len(stack.upstream.sent) == before + 2  # the refused call never went upstream


def test_an_idempotency_key_in_flight_through_litellm_is_refused(stack: Stack) -> None:
    """The hook reads the key from the request's headers as LiteLLM keeps them: a second call
    with it while the first runs is refused (409) before the upstream; once the first ended (its
    close clears the marker) the key serves a new call."""
    config = stack.workdir / f"litellm-idem-{uuid.uuid4().hex[:6]}.yaml"
    config.write_text(litellm_config([("slow", MODEL, stack.upstream.scenario_url("slow"))]))
    env = {**stack.env, "BILLING_LITELLM_ACCOUNT": "end_user",
           "BILLING_SPOOL_DIR": str(config.with_suffix(".spool"))}  # fmt: skip
    proxy = LiteLLMProxy(config, env, stack.workdir / config.stem)
    account = _accounts(1)[0]
    headers = {"Authorization": f"Bearer {MASTER_KEY}", "Idempotency-Key": uuid.uuid4().hex}
    body = {"model": "slow", "messages": MESSAGES, "user": account}
    results: list[int] = []
    try:
        proxy.start()
        proxy.wait_ready(90)
        before = len(stack.upstream.sent)
        url = f"{proxy.base_url}/chat/completions"

        def call() -> None:
            results.append(httpx.post(url, json=body, headers=headers, timeout=30).status_code)

        first = threading.Thread(target=call)
        first.start()
        time.sleep(1.5)  # the first is in flight (the slow scenario pauses 3 s before its body)
        second = httpx.post(url, json=body, headers=headers, timeout=30)
        first.join(30)
        assert second.status_code == 409, second.text
        assert "idempotency_key_in_use" in second.text
        assert results == [200]
        time.sleep(0.5)  # the close's clearing of the marker is not awaited by the call
        third = httpx.post(url, json=body, headers=headers, timeout=30)
        assert third.status_code == 200, third.text
        assert len(stack.upstream.sent) == before + 2  # the refused call never went upstream
    finally:
        proxy.stop()


def test_reused_client_request_ids_are_separate_calls(stack: Stack, scale: Scale) -> None:
    """Pairs of calls sharing one ``X-Request-Id``, at once and one after the other: each served
    call is its own record under an id the gateway made, settled at what the upstream sent; none
    settles onto the other, none is served free."""
    pairs = scale.pick(5, 200)
    tee = Tee.from_url(stack.env["REDIS_URL"], stack.keys, spool_dir=stack.workdir / "spool-reuse")
    accounts = _accounts(pairs)
    worker = stack.worker("worker-reuse")
    worker.start()
    before = len(stack.upstream.sent)
    try:
        with served(create_app(stack.upstream.scenario_url("clean"), tee)) as url:

            def call(account: str, reused: str) -> None:
                client = openai.OpenAI(base_url=url + "/v1", api_key=account, max_retries=0)
                client.chat.completions.create(
                    model=MODEL, messages=MESSAGES, extra_headers={"X-Request-Id": reused}
                )

            for i, account in enumerate(accounts):
                reused = f"client-{uuid.uuid4().hex[:8]}"
                if i % 2:  # at once
                    both = [threading.Thread(target=call, args=(account, reused)) for _ in "ab"]
                    for thread in both:
                        thread.start()
                    for thread in both:
                        thread.join(30)
                else:
                    call(account, reused)
                    call(account, reused)
            assert tee.flush(30)
        calls = wait_decided(stack.sessions, accounts, 2 * pairs, timeout=120,
                             processes=(worker,))  # fmt: skip
    finally:
        tee.stop()
        worker.stop()
    assert len(calls) == 2 * pairs and len({c.request_id for c in calls}) == 2 * pairs
    assert {(c.status, c.usage_source) for c in calls} == {("settled", "reported")}
    sent = stack.upstream.sent[before:]
    assert len(sent) == 2 * pairs
    assert sum(c.charge_micros or 0 for c in calls) == sum(
        oracle_charge(PRICES, usage_of(s)) for s in sent
    )
    _check_books(stack, calls)


def test_an_answer_too_large_to_read_is_still_in_the_ledger(stack: Stack) -> None:
    """A 51 MB answer, past what the worker reads: a dead letter says why, and the call is in
    the ledger under its payer, unsettled ``unreadable`` at its hold (never only the letter)."""
    huge = orjson.dumps(
        {
            "id": "chatcmpl-huge", "object": "chat.completion", "created": 1, "model": MODEL,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "x" * (51 << 20)}}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 13_000_000,
                      "total_tokens": 13_000_009},
        }
    )  # fmt: skip

    async def chat(request: Request) -> Response:
        await request.body()
        return Response(huge, media_type="application/json")

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    tee = Tee.from_url(stack.env["REDIS_URL"], stack.keys, spool_dir=stack.workdir / "spool-huge")
    account = _accounts(1)[0]
    worker = stack.worker("worker-huge")
    worker.start()
    try:
        gateway = BillingMiddleware(app, publisher=tee, hook=account_from_key)
        with served(gateway) as url:
            answer = httpx.post(
                url + "/v1/chat/completions", timeout=60,
                headers={"Authorization": f"Bearer {account}"},
                json={"model": MODEL, "messages": MESSAGES, "max_tokens": 100},
            )  # fmt: skip
            assert answer.status_code == 200 and len(answer.content) == len(huge)
            assert tee.flush(60)
        calls = wait_decided(stack.sessions, [account], 1, timeout=120, processes=(worker,))
    finally:
        tee.stop()
        worker.stop()
    assert [(c.account_id, c.status, c.reason) for c in calls] == [
        (account, "unsettled", "unreadable")
    ]
    dead = stack.redis.client().xrange(stack.keys.dead)
    assert any(b"larger" in fields.get(b"reason", b"") for _id, fields in dead)


def test_through_litellm_a_worker_outage_and_a_refused_spool(stack: Stack) -> None:
    """Through the real LiteLLM proxy: calls made while no worker runs, their streams' TTL one
    second, settle as sent when a worker starts three seconds later; then, with Redis stopped and
    the spool unwritable (its directory replaced by a file), a call is refused with 503 and
    never reaches the upstream."""
    config = stack.workdir / f"litellm-out-{uuid.uuid4().hex[:6]}.yaml"
    config.write_text(litellm_config([("clean", MODEL, stack.upstream.scenario_url("clean"))]))
    spool = config.with_suffix(".spool")
    env = {**stack.env, "BILLING_LITELLM_ACCOUNT": "end_user", "BILLING_SPOOL_DIR": str(spool),
           "BILLING_STREAM_TTL_SECONDS": "1"}  # fmt: skip
    proxy = LiteLLMProxy(config, env, stack.workdir / config.stem)
    accounts = _accounts(4)
    worker = stack.worker(f"worker-{config.stem}")
    try:
        proxy.start()
        proxy.wait_ready(90)
        client = openai.OpenAI(base_url=proxy.base_url, api_key=MASTER_KEY, max_retries=0)
        before = len(stack.upstream.sent)
        for i, account in enumerate(accounts):
            if i % 2:
                client.chat.completions.create(model="clean", messages=MESSAGES, user=account)
            else:
                for _ in client.chat.completions.create(
                    model="clean", messages=MESSAGES, user=account, stream=True
                ):
                    pass
        sent = stack.upstream.sent[before:]
        time.sleep(3)  # past every TTL the hook's tee set
        worker.start()
        calls = wait_decided(stack.sessions, accounts, 4, timeout=120, processes=(worker,))
        assert {(c.status, c.usage_source) for c in calls} == {("settled", "reported")}
        assert sum(c.charge_micros or 0 for c in calls) == sum(
            oracle_charge(PRICES, usage_of(s)) for s in sent
        )
        worker.stop()
        stack.redis.stop()
        try:
            shutil.rmtree(spool, ignore_errors=True)
            spool.write_text("a file where the spool directory was")
            served_before = len(stack.upstream.sent)
            with pytest.raises(openai.APIStatusError) as refused:
                client.chat.completions.create(model="clean", messages=MESSAGES, user="nobody")
            assert refused.value.status_code == 503
            assert "billing_unavailable" in str(refused.value.body)
            assert len(stack.upstream.sent) == served_before
        finally:
            stack.redis.start()
    finally:
        proxy.stop()
        worker.stop()


def test_through_litellm_a_huge_or_compressed_answer_is_still_in_the_ledger(stack: Stack) -> None:
    """Through the real LiteLLM proxy: an upstream answering gzip-coded bytes (httpx decodes them
    before the hook sees the answer) is settled at its usage; a 51 MB answer, past what the worker
    reads, is a dead letter and the call is in the ledger under its payer, unsettled
    ``unreadable`` at its hold."""
    usage = {"prompt_tokens": 9, "completion_tokens": 12, "total_tokens": 21}
    small = orjson.dumps({
        "id": "chatcmpl-gz", "object": "chat.completion", "created": 1, "model": MODEL,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "Hello there. " * 40}}],
        "usage": usage,
    })  # fmt: skip
    huge = orjson.dumps({
        "id": "chatcmpl-huge", "object": "chat.completion", "created": 1, "model": MODEL,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "x" * (51 << 20)}}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 13_000_000, "total_tokens": 13_000_009},
    })  # fmt: skip

    async def gzipped(request: Request) -> Response:
        await request.body()
        return Response(gzip.compress(small), media_type="application/json",
                        headers={"Content-Encoding": "gzip"})  # fmt: skip

    async def enormous(request: Request) -> Response:
        await request.body()
        return Response(huge, media_type="application/json")

    upstream = Starlette(routes=[
        Route("/gz/v1/chat/completions", gzipped, methods=["POST"]),
        Route("/huge/v1/chat/completions", enormous, methods=["POST"]),
    ])  # fmt: skip
    config = stack.workdir / f"litellm-big-{uuid.uuid4().hex[:6]}.yaml"
    accounts = _accounts(2)
    worker = stack.worker(f"worker-{config.stem}")
    with served(upstream) as base:
        config.write_text(litellm_config([("gz", MODEL, base + "/gz/v1"),
                                          ("huge", MODEL, base + "/huge/v1")]))  # fmt: skip
        env = {**stack.env, "BILLING_LITELLM_ACCOUNT": "end_user",
               "BILLING_SPOOL_DIR": str(config.with_suffix(".spool"))}  # fmt: skip
        proxy = LiteLLMProxy(config, env, stack.workdir / config.stem)
        try:
            proxy.start()
            proxy.wait_ready(90)
            worker.start()
            client = openai.OpenAI(base_url=proxy.base_url, api_key=MASTER_KEY, max_retries=0,
                                   timeout=120)  # fmt: skip
            answer = client.chat.completions.create(model="gz", messages=MESSAGES,
                                                    user=accounts[0])  # fmt: skip
            assert answer.usage is not None and answer.usage.total_tokens == 21
            client.chat.completions.create(model="huge", messages=MESSAGES, user=accounts[1])
            calls = wait_decided(stack.sessions, accounts, 2, timeout=180,
                                 processes=(worker, proxy))  # fmt: skip
        finally:
            proxy.stop()
            worker.stop()
    by_account = {c.account_id: c for c in calls}
    settled = by_account[accounts[0]]
    assert (settled.status, settled.usage_source) == ("settled", "reported")
    assert settled.charge_micros == oracle_charge(PRICES, usage)
    assert (by_account[accounts[1]].status, by_account[accounts[1]].reason) == (
        "unsettled", "unreadable"
    )  # fmt: skip
    dead = stack.redis.client().xrange(stack.keys.dead)
    assert any(b"larger" in fields.get(b"reason", b"") for _id, fields in dead)
    _check_books(stack, calls)


@contextmanager
def _small_disk(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path``: a disk that fills (ENOSPC). Needs the mount
    privilege the test machine gives (root); without it the test fails, it is never skipped."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, f"cannot mount a small tmpfs for the disk-full case: {done.stderr}"
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def test_the_spool_disk_filling_while_redis_is_away_serves_nothing_unrecorded(
    stack: Stack, scale: Scale
) -> None:
    """Redis stopped and the spool on a disk that fills (a 64 KiB tmpfs): calls are served while
    their admission fits, then refused with 503 before the upstream; once Redis is back every
    served call is in the ledger (settled at the upstream's usage, or unsettled with a reason when
    only its admission fitted), and no refused call reached the upstream."""
    limit = scale.pick(60, 400)
    served_accounts: list[str] = []
    refused = 0
    with _small_disk(stack.workdir / f"small-disk-{uuid.uuid4().hex[:6]}", "64k") as disk:
        tee = Tee.from_url(stack.env["REDIS_URL"], stack.keys, spool_dir=disk / "spool",
                           retry_seconds=0.2)  # fmt: skip
        worker = stack.worker("worker-full")
        try:
            with served(create_app(stack.upstream.scenario_url("clean"), tee)) as url:
                stack.redis.stop()
                try:
                    for account in _accounts(limit):
                        client = openai.OpenAI(base_url=url + "/v1", api_key=account,
                                               max_retries=0)  # fmt: skip
                        before = len(stack.upstream.sent)
                        try:
                            client.chat.completions.create(model=MODEL, messages=MESSAGES)
                        except openai.InternalServerError as exc:
                            assert exc.status_code == 503 and exc.code == "billing_unavailable"
                            assert len(stack.upstream.sent) == before  # never reached upstream
                            refused += 1
                            if refused >= 3:
                                break
                            continue
                        served_accounts.append(account)
                finally:
                    stack.redis.start()
                assert tee.flush(60)
            worker.start()
            assert served_accounts and refused, (len(served_accounts), refused)
            calls = wait_decided(stack.sessions, served_accounts, len(served_accounts),
                                 timeout=120, processes=(worker,))  # fmt: skip
        finally:
            tee.stop()
            worker.stop()
    assert sorted(c.account_id for c in calls) == sorted(served_accounts)  # none lost
    for call in calls:
        assert call.status == "settled" or (call.status == "unsettled" and call.reason), call
    settled = [c for c in calls if c.status == "settled"]
    assert settled and all(c.usage_source == "reported" and c.charge_micros for c in settled)
    _check_books(stack, calls)
