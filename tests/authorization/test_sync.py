"""The sync task on both engines and the real Redis: the store rebuilt from the ledger, and each
kind of correction found, made and recorded with its amount."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
import redis
from ledger.factories import make_meta, settled
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from models import AuthorizationCorrection
from worker.contract.authorization import AuthorizationStore, Verdict
from worker.contract.keys import Keys
from worker.core.money import Micros
from worker.core.prices import load_price_book
from worker.ledger.budgets import set_budget
from worker.ledger.credits import credit, set_limit
from worker.ledger.operations import apply_result, hold
from worker.service.authorization import SyncPolicy, sync

pytestmark = pytest.mark.redis

NOW = datetime.now(UTC).replace(microsecond=0)
GRACE = timedelta(hours=1)
POLICY = SyncPolicy()


@pytest.fixture
def account() -> str:
    return f"acct-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def store(redis_client: redis.Redis, prefix: str) -> AuthorizationStore:
    return AuthorizationStore(redis_client, prefix)


def fund(sessions: sessionmaker[Session], account: str, usd_micros: int, limit: int = 0) -> None:
    with sessions() as session, session.begin():
        credit(session, account, Micros(usd_micros), key=f"{account}-{uuid.uuid4().hex[:6]}",
               note="top-up", who="t", now=NOW - timedelta(hours=2), new_account=True)  # fmt: skip
        if limit:
            set_limit(
                session, account, Micros(limit), note="n", who="t", now=NOW - timedelta(hours=2)
            )


def spendable(store: AuthorizationStore, account: str) -> int:
    f = store.figures(account)
    return int(f["funds"]) - int(f["charged"]) - int(f["held"])


def corrections(sessions: sessionmaker[Session], account: str) -> list[tuple[str, int]]:
    with sessions() as session:
        rows = session.execute(
            select(AuthorizationCorrection.kind, AuthorizationCorrection.amount_micros)
            .where(AuthorizationCorrection.account_id == account)
            .order_by(AuthorizationCorrection.id)
        )
        return [tuple(row) for row in rows]  # type: ignore[misc]


def test_a_lost_store_is_rebuilt_from_the_ledger_before_anything_is_admitted(
    sessions: sessionmaker[Session], store: AuthorizationStore, account: str
) -> None:
    fund(sessions, account, 1_000_000, limit=500_000)
    with sessions() as session, session.begin():
        hold(session, make_meta(f"{account}-open", account_id=account, reserved=300_000,
                                created_at=NOW - timedelta(minutes=5)), now=NOW)  # fmt: skip
        meta = make_meta(f"{account}-done", account_id=account, reserved=100_000,
                         created_at=NOW - timedelta(minutes=5))  # fmt: skip
        hold(session, meta, now=NOW)
        apply_result(session, settled(meta.request_id, account_id=account, reserved=100_000,
                     charge=40_000, created_at=meta.created_at), now=NOW, grace=GRACE)  # fmt: skip
    assert store.authorize(account, "r", 1, NOW, "m").verdict is Verdict.NOT_READY
    stats = sync(sessions, store, POLICY, now=NOW)
    assert stats.rebuilt and store.is_ready()
    assert stats.corrections == []  # building is not correcting
    # funded 1.0 + limit 0.5 - charged 0.04 - the open hold 0.3
    assert spendable(store, account) == 1_160_000
    assert store.authorize(account, "big", 1_160_001, NOW, "m").verdict is (
        Verdict.INSUFFICIENT_FUNDS
    )
    assert store.authorize(account, "fits", 1_160_000, NOW, "m").verdict is Verdict.ADMITTED


def test_a_missed_release_is_corrected_and_recorded_with_its_amount(
    sessions: sessionmaker[Session], store: AuthorizationStore, account: str
) -> None:
    fund(sessions, account, 1_000_000)
    sync(sessions, store, POLICY, now=NOW)  # built (every account)
    assert store.authorize(account, f"{account}-1", 200_000, NOW, "gpt-4o-mini").admitted
    with sessions() as session, session.begin():
        meta = make_meta(f"{account}-1", account_id=account, reserved=200_000, created_at=NOW)
        hold(session, meta, now=NOW)
        apply_result(session, settled(meta.request_id, account_id=account, reserved=200_000,
                     charge=70_000, created_at=NOW), now=NOW, grace=GRACE)  # fmt: skip
    # The worker's release never came; within ``missed_after`` that is not yet a correction.
    sync(sessions, store, POLICY, now=NOW + timedelta(seconds=5), accounts=[account])
    assert corrections(sessions, account) == []
    assert spendable(store, account) == 930_000
    assert store.calls(account) == {}


def test_late_releases_unrecorded_holds_and_unseen_charges_are_corrections(
    sessions: sessionmaker[Session], store: AuthorizationStore, account: str
) -> None:
    fund(sessions, account, 1_000_000)
    store.mark_ready()
    sync(sessions, store, POLICY, now=NOW, accounts=[account])
    later = NOW + timedelta(minutes=10)
    # 1. authorized, settled by the worker, never released in the store
    assert store.authorize(account, f"{account}-1", 200_000, NOW, "gpt-4o-mini").admitted
    # 2. authorized, never published: no reservation ever comes
    assert store.authorize(account, f"{account}-lost", 50_000, NOW, "gpt-4o-mini").admitted
    with sessions() as session, session.begin():
        meta = make_meta(f"{account}-1", account_id=account, reserved=200_000, created_at=NOW)
        hold(session, meta, now=NOW)
        apply_result(session, settled(meta.request_id, account_id=account, reserved=200_000,
                     charge=70_000, created_at=NOW), now=NOW, grace=GRACE)  # fmt: skip
        # 3. a call the store never authorized, still open, and 4. one settled past it
        hold(session, make_meta(f"{account}-2", account_id=account, reserved=30_000,
                                created_at=NOW), now=NOW)  # fmt: skip
        meta = make_meta(f"{account}-3", account_id=account, reserved=9_000, created_at=NOW)
        hold(session, meta, now=NOW)
        apply_result(session, settled(meta.request_id, account_id=account, reserved=9_000,
                     charge=4_000, created_at=NOW), now=NOW, grace=GRACE)  # fmt: skip
    policy = SyncPolicy(stale_after=timedelta(minutes=5))
    stats = sync(sessions, store, policy, now=later, accounts=[account])
    assert not stats.rebuilt
    assert sorted(corrections(sessions, account)) == sorted([
        ("missed_release", 70_000 - 200_000),
        ("never_recorded", -50_000),
        ("unauthorized_hold", 30_000),
        ("unseen_charge", 4_000),
    ])  # fmt: skip
    assert spendable(store, account) == 1_000_000 - 70_000 - 4_000 - 30_000
    assert sorted(store.calls(account)) == [f"{account}-2"]
    # Nothing left to correct: the next run records none.
    sync(sessions, store, policy, now=later, accounts=[account])
    assert len(corrections(sessions, account)) == 4


def test_a_stale_hold_whose_admission_is_in_redis_waits_for_a_lagging_worker(
    sessions: sessionmaker[Session], store: AuthorizationStore, account: str
) -> None:
    """The admission script takes the hold and writes the call's stream head in one step: a hold
    the ledger does not know yet, whose stream exists, is a call the worker has not reached (it
    lags), not one that never happened; it is kept. Once the stream is gone it is dropped."""
    fund(sessions, account, 1_000_000)
    store.mark_ready()
    sync(sessions, store, POLICY, now=NOW, accounts=[account])
    rid = f"{account}-lagging"
    assert store.authorize(account, rid, 50_000, NOW, "gpt-4o-mini").admitted
    stream = Keys(store.prefix).request(rid)
    store.client.xadd(stream, {"kind": "admission", "at": "1", "body": "{}"}, id="0-1")
    policy = SyncPolicy(stale_after=timedelta(minutes=5))
    later = NOW + timedelta(minutes=10)
    sync(sessions, store, policy, now=later, accounts=[account])
    assert corrections(sessions, account) == []
    assert sorted(store.calls(account)) == [rid]
    assert spendable(store, account) == 1_000_000 - 50_000
    store.client.delete(stream)
    sync(sessions, store, policy, now=later, accounts=[account])
    assert corrections(sessions, account) == [("never_recorded", -50_000)]
    assert spendable(store, account) == 1_000_000


def test_budgets_and_this_months_spend_come_from_the_ledger(
    sessions: sessionmaker[Session], store: AuthorizationStore, account: str
) -> None:
    fund(sessions, account, 10_000_000)
    with sessions() as session, session.begin():
        set_budget(session, account, "day", Micros(100_000), note="n", who="t", now=NOW)
        set_budget(session, account, "month", Micros(500_000), model="gpt-4o", note="n",
                   who="t", now=NOW)  # fmt: skip
        meta = make_meta(f"{account}-1", account_id=account, reserved=90_000, model="gpt-4o",
                         created_at=NOW)  # fmt: skip
        hold(session, meta, now=NOW)
        apply_result(session, settled(meta.request_id, account_id=account, reserved=90_000,
                     charge=60_000, model="gpt-4o", created_at=NOW), now=NOW, grace=GRACE)  # fmt: skip
    store.mark_ready()
    sync(sessions, store, POLICY, now=NOW, accounts=[account])
    refused = store.authorize(account, "r2", 40_001, NOW, "o3")
    assert (refused.verdict, refused.budget, refused.used) == (
        Verdict.BUDGET_EXCEEDED, "day", 60_000
    )  # fmt: skip
    assert store.authorize(account, "r3", 40_000, NOW, "o3").verdict is Verdict.ADMITTED
    with sessions() as session, session.begin():
        set_budget(session, account, "day", None, note="cleared", who="t", now=NOW)
    sync(sessions, store, POLICY, now=NOW, accounts=[account])
    assert store.authorize(account, "r4", 400_000, NOW, "o3").verdict is Verdict.ADMITTED
    refused = store.authorize(account, "r5", 440_001, NOW, "gpt-4o")
    assert (refused.verdict, refused.budget) == (Verdict.BUDGET_EXCEEDED, "month for gpt-4o")


def test_a_model_budget_counts_the_spend_of_every_name_of_the_model(
    sessions: sessionmaker[Session], store: AuthorizationStore, account: str
) -> None:
    """Was: the ledger recorded the dated deployment and the gateway authorized the alias, so the
    per-model budget refilled at every sync (7x). The sync names both as ``budget_model``."""
    fund(sessions, account, 10_000_000)
    with sessions() as session, session.begin():
        set_budget(session, account, "day", Micros(100_000), model="gpt-4o-mini-2024-07-18",
                   note="n", who="t", now=NOW)  # fmt: skip
        for i, model in enumerate(("gpt-4o-mini-2024-07-18", "openai/gpt-4o-mini")):
            meta = make_meta(f"{account}-{i}", account_id=account, reserved=40_000, model=model,
                             created_at=NOW)  # fmt: skip
            hold(session, meta, now=NOW)
            apply_result(session, settled(meta.request_id, account_id=account, reserved=40_000,
                         charge=40_000, model=model, created_at=NOW), now=NOW, grace=GRACE)  # fmt: skip
        hold(session, make_meta(f"{account}-open", account_id=account, reserved=10_000,
                                model="gpt-4o-mini-2024-07-18", created_at=NOW), now=NOW)  # fmt: skip
    store.mark_ready()
    sync(sessions, store, POLICY, now=NOW, accounts=[account], book=load_price_book())
    # 80,000 charged and 10,000 held under two spellings, all gpt-4o-mini's: 10,000 left.
    refused = store.authorize(account, "r1", 10_001, NOW, "gpt-4o-mini")
    assert (refused.verdict, refused.budget, refused.used) == (
        Verdict.BUDGET_EXCEEDED, "day for gpt-4o-mini", 90_000
    )  # fmt: skip
    assert store.authorize(account, "r2", 10_000, NOW, "gpt-4o-mini").verdict is Verdict.ADMITTED


def test_a_call_counts_in_its_own_period_whichever_side_of_midnight_the_sync_is(
    sessions: sessionmaker[Session], store: AuthorizationStore, account: str
) -> None:
    """Was: the sync installed only its own day's spend, so a gateway whose clock was still in
    the day before found that day's budget empty again."""
    midnight = NOW.replace(hour=0, minute=0, second=0) + timedelta(days=1)
    before, sync_at = midnight - timedelta(seconds=30), midnight + timedelta(seconds=30)
    fund(sessions, account, 10_000_000)
    with sessions() as session, session.begin():
        set_budget(session, account, "day", Micros(100_000), note="n", who="t", now=NOW)
        meta = make_meta(f"{account}-1", account_id=account, reserved=90_000, created_at=before)
        hold(session, meta, now=before)
        apply_result(session, settled(meta.request_id, account_id=account, reserved=90_000,
                     charge=90_000, created_at=before), now=before, grace=GRACE)  # fmt: skip
    store.mark_ready()
    sync(sessions, store, POLICY, now=sync_at, accounts=[account])
    refused = store.authorize(account, "late", 10_001, before + timedelta(seconds=1), "m")
    assert (refused.verdict, refused.used) == (Verdict.BUDGET_EXCEEDED, 90_000)
    assert store.authorize(account, "next", 100_000, sync_at, "m").verdict is Verdict.ADMITTED


def test_the_store_follows_the_workers_unknown_account_rule_not_the_gateways(
    sessions: sessionmaker[Session], store: AuthorizationStore, account: str
) -> None:
    """Was: a gateway set to ``default_budget`` beside a worker set to ``refuse`` admitted a new
    account without bound once the sync had cleared the budget the gateway gave it."""
    store.mark_ready()
    sync(sessions, store, POLICY, now=NOW, accounts=[account])  # the worker: refuse
    gateway = {"unknown": "default_budget", "default_budget": 50_000, "default_period": "day"}
    assert store.authorize(account, "a", 1, NOW, "m", **gateway).verdict is (
        Verdict.UNKNOWN_ACCOUNT
    )
    # An account hash without funds or budget (the old script's default budget, cleared by a
    # sync under ``refuse``) bounds nothing, so it is refused whatever the policy.
    store.install(account, funds=None, charged=0, fields={})
    store.mark_ready("default_budget", 50_000, "day")
    assert store.authorize(account, "b", 1, NOW, "m").verdict is Verdict.UNKNOWN_ACCOUNT
    sync(sessions, store, SyncPolicy(unknown="default_budget", default_budget=50_000),
         now=NOW, accounts=[account])  # fmt: skip
    assert store.authorize(account, "c", 50_000, NOW, "m").verdict is Verdict.ADMITTED
    assert store.authorize(account, "d", 1, NOW, "m").verdict is Verdict.BUDGET_EXCEEDED
