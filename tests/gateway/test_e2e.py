"""End to end: the real openai client calls the example ASGI gateway (the middleware and the tee),
which proxies to the recorded upstream; a real ``billing worker`` process settles every call.

The ledger must hold what the upstream sent: each settled call charged at the book's price of the
upstream's usage for the model the upstream served (computed here from the row's decimal prices;
the ``tool_calls`` and ``n2`` recordings answer ``gpt-4o-2024-08-06`` to a request for
``gpt-4o-mini``: ``worker.core.substitution``), a streamed call and its non-streamed twin charged the
same, the error finish and the dropped stream left unsettled.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import httpx
import openai
import pytest
import redis
from chaos.fleet import Worker, worker_env
from consumer.waiting import wait_for
from redis.backoff import NoBackoff
from redis.retry import Retry
from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from devtools.example_app import create_app
from devtools.localservers.redis_server import PrivateRedis
from models.reservations import Reservation
from models.usage import UsageRecord
from worker.contract.keys import Keys
from worker.core.prices import load_price_book
from worker.gateway.spool import spool_name
from worker.gateway.tee import Tee
from worker.ledger.balances import ledger_is_balanced
from worker.ledger.database import make_engine

from .harness import BillingWorker, oracle_charge, wait_decided
from .serving import served
from .test_tee import closed_port
from .upstream import SCENARIO_HEADER, Upstream

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]

MODEL = "gpt-4o-mini"
# scenario, stream → the reservation's status
CALLS = [
    ("clean", True, "settled"),
    ("clean", False, "settled"),
    ("tool_calls", True, "settled"),
    ("n2", True, "settled"),
    ("error_finish", True, "unsettled"),
    ("dropped", True, "unsettled"),
]


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with Upstream.start() as up:
        yield up


def call(base_url: str, account: str, scenario: str, stream: bool, model: str = MODEL) -> None:
    client = openai.OpenAI(
        base_url=base_url, api_key=account, max_retries=0,
        default_headers={SCENARIO_HEADER: scenario},
    )  # fmt: skip
    messages = [{"role": "user", "content": f"Tell me about {scenario}."}]
    try:
        if stream:
            for _chunk in client.chat.completions.create(
                model=model, messages=messages, stream=True, n=2 if scenario == "n2" else 1,
                stream_options={"include_usage": True},
            ):  # fmt: skip
                pass
        else:
            client.chat.completions.create(model=model, messages=messages)
    except (openai.APIError, httpx.HTTPError):
        assert scenario == "dropped"  # the client sees the broken body


def sent_usage(reply) -> dict[str, int]:
    """The usage block the upstream sent for one call: its body's, or its stream's last one."""
    if reply.body is not None:
        return reply.body["usage"]
    return next(
        f["usage"] for f in reversed(reply.frames) if isinstance(f, dict) and f.get("usage")
    )


def served_model(reply) -> str:
    """The model the upstream's reply names: its body's, or its stream's first chunk's."""
    if reply.body is not None:
        return reply.body["model"]
    return next(f["model"] for f in reply.frames if isinstance(f, dict) and f.get("model"))


def expected_charge(usage: dict[str, int], model: str) -> int:
    price = load_price_book().price_for(model, datetime.now(UTC), provider="openai")
    assert price is not None
    exact = price.input * usage["prompt_tokens"] + price.output * usage["completion_tokens"]
    return int(Decimal(exact).to_integral_value(rounding=ROUND_HALF_UP))


def test_the_gateway_and_a_worker_settle_what_the_upstream_sent(
    upstream: Upstream, pg_url: str, prefix: str, tmp_path: Path
) -> None:
    env = worker_env("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/11", pg_url, prefix)
    worker = Worker(env, tmp_path / "worker", "gw-e2e", concurrency=1)
    tee = Tee.from_url("redis://127.0.0.1:6379/0", Keys(prefix), spool_dir=tmp_path / "spool")
    engine = make_engine(pg_url)
    sessions = sessionmaker(engine)
    account = f"acct-{uuid.uuid4().hex[:8]}"
    try:
        worker.start()
        with served(create_app(upstream.base_url, tee)) as url:
            for scenario, stream, _ in CALLS:
                call(url + "/v1", account, scenario, stream)
            time.sleep(0.2)  # the last close is published after the client's last byte
        assert tee.flush(timeout=10)

        def rows() -> list[tuple[str, str, int | None]]:
            with sessions() as s:
                return list(
                    s.execute(
                        select(
                            Reservation.request_id, Reservation.status, UsageRecord.charge_micros
                        )
                        .outerjoin(UsageRecord, UsageRecord.reservation_id == Reservation.id)
                        .where(Reservation.account_id == account)
                        .order_by(Reservation.created_at)  # the calls were made one by one
                    ).all()
                )

        wait_for(
            lambda: len(rows()) == len(CALLS) and all(r[1] != "held" for r in rows()),
            90, "every call decided", lambda: worker.log_text()[-4000:],
        )  # fmt: skip
        decided = rows()
        assert [status for _rid, status, _c in decided] == [c[2] for c in CALLS]
        sent = upstream.sent
        for (scenario, stream, status), (_rid, _s, charge), reply in zip(
            CALLS, decided, sent, strict=True
        ):
            assert (reply.scenario, reply.stream) == (scenario, stream)
            if status == "settled":
                assert charge == expected_charge(sent_usage(reply), served_model(reply)), scenario
        assert decided[0][2] == decided[1][2]  # the streamed call and its non-streamed twin
        with sessions() as s:
            assert ledger_is_balanced(s)
    finally:
        tee.stop()
        worker.stop()
        engine.dispose()


def test_calls_spooled_while_redis_was_away_settle_once_even_when_replayed_twice(
    upstream: Upstream, pg_url: str, prefix: str, tmp_path: Path, redis_client: redis.Redis
) -> None:
    keys = Keys(prefix)
    spool_dir = tmp_path / "spool"
    env = worker_env("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/11", pg_url, prefix)
    worker = Worker(env, tmp_path / "worker", "gw-e2e-spool", concurrency=1)
    engine = make_engine(pg_url)
    sessions = sessionmaker(engine)
    account = f"acct-{uuid.uuid4().hex[:8]}"
    down = redis.Redis(
        port=closed_port(),
        socket_connect_timeout=0.2,
        socket_timeout=0.2,
        retry=Retry(NoBackoff(), 0),
    )
    try:
        worker.start()
        away = Tee(down, keys, spool_dir=spool_dir, retry_seconds=0.05)
        with served(create_app(upstream.base_url, away)) as url:
            call(url + "/v1", account, "clean", True)
            call(url + "/v1", account, "clean", False)
            time.sleep(0.2)
        assert not away.stop(timeout=0.5)
        copy = (spool_dir / spool_name()).read_bytes()
        back = Tee(redis_client, keys, spool_dir=spool_dir)
        assert back.flush(timeout=10)
        back.stop()

        def rows() -> list[tuple[str, str, int | None]]:
            with sessions() as s:
                return list(
                    s.execute(
                        select(
                            Reservation.request_id, Reservation.status, UsageRecord.charge_micros
                        )
                        .outerjoin(UsageRecord, UsageRecord.reservation_id == Reservation.id)
                        .where(Reservation.account_id == account)
                        .order_by(Reservation.request_id)
                    ).all()
                )

        wait_for(
            lambda: len(rows()) == 2 and all(r[1] == "settled" for r in rows()),
            90, "both calls settled", lambda: worker.log_text()[-4000:],
        )  # fmt: skip
        first = rows()
        assert first[0][2] == first[1][2] is not None
        # The same batches again, from a file a gone process left (a write whose reply was lost).
        (spool_dir / "tee-gone-1.spool").write_bytes(copy)
        again = Tee(redis_client, keys, spool_dir=spool_dir, adopt_seconds=0)
        wait_for(
            lambda: not (spool_dir / "tee-gone-1.spool").exists(),
            20, "the orphan spool replayed", lambda: "",
        )  # fmt: skip
        again.stop()
        # The worker reads the replayed notifications as duplicates and deletes the streams the
        # replay re-created; nothing is charged twice, nothing is dead-lettered.
        wait_for(
            lambda: not any(redis_client.exists(keys.request(rid)) for rid, _s, _c in first),
            60, "the re-created streams deleted", lambda: worker.log_text()[-4000:],
        )  # fmt: skip
        assert rows() == first
        assert redis_client.xlen(keys.dead) == 0
        with sessions() as s:
            assert ledger_is_balanced(s)
    finally:
        worker.stop()
        engine.dispose()


# USD per 1M tokens for the oracle and the worker's book alike (BILLING_PRICE_BOOK), per model the
# upstream serves: ``tool_calls`` answers gpt-4o-2024-08-06 to a request for gpt-4o-mini.
PRICES = {
    MODEL: {"input": "0.15", "cached_input": "0.075", "output": "0.60"},
    "gpt-4o-2024-08-06": {"input": "2.50", "cached_input": "1.25", "output": "10.00"},
}


def test_calls_made_while_redis_is_stopped_are_spooled_and_settle_once(
    upstream: Upstream, pg_url: str, prefix: str, tmp_path: Path
) -> None:
    """The private Redis stops mid-run: the calls made through the ASGI gateway meanwhile go to the
    tee's spool; Redis comes back, the spool is replayed, and a real ``billing worker`` settles
    every call once, at the upstream's usage priced by the independent oracle."""
    server = PrivateRedis(tmp_path / "redis")
    server.start()
    book = tmp_path / "prices.toml"
    book.write_text(
        "".join(
            f'[[price]]\nmodel = "{model}"\n'
            + "".join(f'{kind} = "{value}"\n' for kind, value in prices.items())
            for model, prices in PRICES.items()
        )
    )
    env = {
        "REDIS_URL": server.url(0),
        "CELERY_BROKER_URL": server.url(1),
        "DATABASE_URL": pg_url,
        "BILLING_PREFIX": prefix,
        "BILLING_PRICE_BOOK": str(book),
        "BILLING_DRAIN_MS": "1000",
        "BILLING_BLOCK_MS": "100",
        "BILLING_SWEEP_IDLE_MS": "3000",
        "BILLING_SWEEP_INTERVAL_SECONDS": "1",
        "BILLING_CLAIM_IDLE_MS": "3000",
    }
    worker = BillingWorker(env, tmp_path / "worker")
    tee = Tee.from_url(server.url(0), Keys(prefix), spool_dir=tmp_path / "spool", retry_seconds=0.1)
    engine = make_engine(pg_url)
    sessions = sessionmaker(engine)
    account = f"acct-{uuid.uuid4().hex[:8]}"
    plays = [("clean", True), ("clean", False), ("tool_calls", True), ("clean", True)]
    try:
        worker.start()
        with served(create_app(upstream.base_url, tee)) as url:
            call(url + "/v1", account, *plays[0])
            wait_decided(sessions, [account], 1, processes=(worker,))
            server.stop()
            try:
                for scenario, stream in plays[1:]:
                    call(url + "/v1", account, scenario, stream)
                wait_for(lambda: tee.spooling, 20, "the tee spooled", lambda: "")
            finally:
                server.start()
            assert tee.flush(timeout=30)
        calls = wait_decided(sessions, [account], len(plays), timeout=90, processes=(worker,))
        sent = upstream.sent
        assert [(s.scenario, s.stream) for s in sent] == plays
        assert len({c.request_id for c in calls}) == len(plays)
        for ledger_call, reply in zip(calls, sent, strict=True):
            assert (ledger_call.status, ledger_call.usage_source) == ("settled", "reported")
            prices = PRICES[served_model(reply)]
            assert ledger_call.charge_micros == oracle_charge(prices, sent_usage(reply))
        with sessions() as s:
            assert ledger_is_balanced(s)
        assert server.client(0).xlen(Keys(prefix).dead) == 0
    finally:
        tee.stop()
        worker.stop()
        server.stop()
        engine.dispose()
