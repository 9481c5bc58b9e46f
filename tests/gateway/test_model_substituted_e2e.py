"""End to end, the model served is the model billed: the real openai client asks the example ASGI
gateway (the middleware and the tee) for one model, the recorded upstream answers with another, and
a real worker process settles the call at the served model's price with the anomaly
``model_substituted`` (``worker.core.substitution``), on SQLite and on PostgreSQL.

The middleware records the model the request names; the upstream's ``tool_calls`` recording (an
OpenAI stream) answers ``gpt-4o-2024-08-06`` whatever was asked, and ``unpriced_fallback`` is the
``clean`` recording answered by a model no book prices.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chaos.fleet import Worker, worker_env
from consumer.waiting import wait_for
from sqlalchemy import Engine, select
from sqlalchemy.orm import sessionmaker

from devtools.example_app import create_app
from devtools.recorded_upstream import Scenario
from models import Anomaly, Failure, Reservation, UsageRecord
from worker.contract.keys import Keys
from worker.gateway.tee import Tee
from worker.ledger.balances import balance, ledger_is_balanced

from .harness import oracle_charge
from .serving import served
from .test_e2e import call, sent_usage, served_model
from .upstream import SCENARIOS, Upstream, load

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

UNPRICED = "o9-fallback-preview"  # not the requested name and a suffix: no price
# USD per 1M tokens, for the oracle and the worker's book alike (BILLING_PRICE_BOOK): gpt-4o and
# its dated snapshot at the same prices, as OpenAI lists them; UNPRICED in no book.
PRICES = {
    "gpt-4o-mini": {"input": "0.15", "cached_input": "0.075", "output": "0.60"},
    "gpt-4o": {"input": "2.50", "cached_input": "1.25", "output": "10.00"},
    "gpt-4o-2024-08-06": {"input": "2.50", "cached_input": "1.25", "output": "10.00"},
}
# requested model, scenario, streamed → (status, unsettled reason, billed model, substituted)
CALLS: list[tuple[str, str, bool, tuple[Any, ...]]] = [
    ("gpt-4o-mini", "tool_calls", True, ("settled", None, "gpt-4o-2024-08-06", True)),
    ("gpt-4o-mini", "tool_calls", False, ("settled", None, "gpt-4o-2024-08-06", True)),
    ("gpt-4o-mini", "clean", True, ("settled", None, "gpt-4o-mini", False)),
    ("gpt-4o", "tool_calls", True, ("settled", None, "gpt-4o", False)),
    ("gpt-4o-mini", "unpriced_fallback", True, ("unsettled", "unpriced", None, True)),
]


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[Upstream]:
    clean = load("clean")
    assert clean.frames is not None
    frames = [{**f, "model": UNPRICED} if isinstance(f, dict) else f for f in clean.frames]
    recording = tmp_path / "unpriced_fallback.json"
    recording.write_text(
        json.dumps(
            {
                "source": "providers/openai/n_ignored_stream.json (the clean scenario), its "
                "model renamed: a fallback to a model no book prices",
                "frames": frames,
            }
        )
    )
    with Upstream.start({**SCENARIOS, "unpriced_fallback": Scenario(recording)}) as up:
        yield up


def rows(sessions: sessionmaker, account: str) -> list[tuple[Any, ...]]:
    """(model requested, status, unsettled reason, model billed, charge, anomalies) per call."""
    with sessions() as s:
        found = s.execute(
            select(
                Reservation.id,
                Reservation.model,
                Reservation.status,
                Failure.reason,
                UsageRecord.model,
                UsageRecord.charge_micros,
            )
            .outerjoin(Failure, Failure.reservation_id == Reservation.id)
            .outerjoin(UsageRecord, UsageRecord.reservation_id == Reservation.id)
            .where(Reservation.account_id == account)
            .order_by(Reservation.created_at)  # the calls were made one by one
        ).all()
        kinds: dict[int, dict[str, str | None]] = {}
        for reservation_id, kind, detail in s.execute(
            select(Anomaly.reservation_id, Anomaly.kind, Anomaly.detail).where(
                Anomaly.reservation_id.in_([row[0] for row in found])
            )
        ):
            kinds.setdefault(reservation_id, {})[kind] = detail
    return [(*row[1:], kinds.get(row[0], {})) for row in found]


def test_the_upstreams_model_is_billed_through_the_gateway_and_a_worker(
    upstream: Upstream, engine: Engine, prefix: str, tmp_path: Path
) -> None:
    book = tmp_path / "prices.toml"
    book.write_text(
        "".join(
            f'[[price]]\nmodel = "{model}"\n'
            + "".join(f'{kind} = "{value}"\n' for kind, value in prices.items())
            for model, prices in PRICES.items()
        )
    )
    url = engine.url.render_as_string(hide_password=False)
    env = worker_env(
        "redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/11", url, prefix,
        BILLING_PRICE_BOOK=str(book),
    )  # fmt: skip
    worker = Worker(env, tmp_path / "worker", "gw-substituted", concurrency=1)
    tee = Tee.from_url("redis://127.0.0.1:6379/0", Keys(prefix), spool_dir=tmp_path / "spool")
    sessions = sessionmaker(engine)
    account = f"acct-{uuid.uuid4().hex[:8]}"
    try:
        worker.start()
        with served(create_app(upstream.base_url, tee)) as base:
            for model, scenario, stream, _ in CALLS:
                call(base + "/v1", account, scenario, stream, model=model)
            time.sleep(0.2)  # the last close is published after the client's last byte
        assert tee.flush(timeout=10)
        wait_for(
            lambda: len(found := rows(sessions, account)) == len(CALLS)
            and all(row[1] != "held" for row in found),
            90, "every call decided", lambda: worker.log_text()[-4000:],
        )  # fmt: skip
        decided = rows(sessions, account)
        sent = upstream.sent
        charges = []
        for (model, scenario, stream, want), got, reply in zip(CALLS, decided, sent, strict=True):
            assert (reply.scenario, reply.stream) == (scenario, stream)
            status, reason, billed, substituted = want
            requested, got_status, got_reason, got_billed, charge, kinds = got
            # the reservation keeps the model requested; the usage record names the model billed
            assert (requested, got_status, got_reason, got_billed) == (
                model, status, reason, billed,
            ), scenario  # fmt: skip
            served_as = served_model(reply)
            if status == "settled":
                # the served model's price of what the upstream sent: never the requested one's
                assert charge == oracle_charge(PRICES[served_as], sent_usage(reply)), scenario
                charges.append(charge)
            if substituted:
                assert kinds["model_substituted"] == (
                    f"requested {model}, served {served_as}"
                    + (", which has no price" if status == "unsettled" else "")
                )
            else:
                assert "model_substituted" not in kinds
        fallback, twin, _clean, same = charges
        assert fallback == twin == same  # streamed or not; gpt-4o and its snapshot cost the same
        assert fallback > oracle_charge(PRICES["gpt-4o-mini"], sent_usage(sent[0])) > 0
        with sessions() as s:
            assert ledger_is_balanced(s)
            money = balance(s, account)
        assert money.charged == sum(charges)
        assert money.held > 0  # the unpriced call keeps its hold, never charged at gpt-4o-mini
    finally:
        tee.stop()
        worker.stop()
