"""The authorization store's scripts on the real Redis: exact under concurrency, idempotent per
request id, budgets per period and model, releases, and the unknown-account settings."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
import redis

from worker.contract.authorization import (
    AuthorizationStore,
    Verdict,
    budget_field,
    day_scope,
    month_scope,
    spent_field,
)

pytestmark = pytest.mark.redis

AT = datetime(2026, 12, 7, 10, 30, tzinfo=UTC)
HOLD = 12_345


@pytest.fixture
def store(redis_client: redis.Redis, prefix: str) -> AuthorizationStore:
    made = AuthorizationStore(redis_client, prefix)
    made.mark_ready()
    return made


def spendable(store: AuthorizationStore, account: str) -> int:
    f = store.figures(account)
    return int(f["funds"]) - int(f.get("charged", 0)) - int(f.get("held", 0))


def test_nothing_is_admitted_before_the_store_is_built(redis_client, prefix) -> None:
    store = AuthorizationStore(redis_client, prefix)
    assert store.authorize("a", "r1", 1, AT, "gpt-4o").verdict is Verdict.NOT_READY
    store.install("a", funds=10, charged=0, fields={})
    assert store.authorize("a", "r1", 1, AT, "gpt-4o").verdict is Verdict.NOT_READY
    store.mark_ready()
    assert store.authorize("a", "r1", 1, AT, "gpt-4o").verdict is Verdict.ADMITTED


def test_200_concurrent_calls_against_funds_for_50_holds_admit_exactly_50(store) -> None:
    store.install("acct", funds=50 * HOLD + HOLD - 1, charged=0, fields={})

    def take(i: int) -> Verdict:
        client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
        try:
            own = AuthorizationStore(client, store.prefix)
            return own.authorize("acct", f"r{i}", HOLD, AT, "gpt-4o").verdict
        finally:
            client.close()

    with ThreadPoolExecutor(32) as pool:
        verdicts = list(pool.map(take, range(200)))
    assert verdicts.count(Verdict.ADMITTED) == 50
    assert verdicts.count(Verdict.INSUFFICIENT_FUNDS) == 150
    assert spendable(store, "acct") == HOLD - 1
    assert len(store.calls("acct")) == 50


def test_a_request_id_takes_its_hold_once(store) -> None:
    store.install("acct", funds=3 * HOLD, charged=0, fields={})
    assert store.authorize("acct", "r", HOLD, AT, "m").verdict is Verdict.ADMITTED
    for _ in range(5):
        assert store.authorize("acct", "r", HOLD, AT, "m").verdict is Verdict.DUPLICATE
    assert spendable(store, "acct") == 2 * HOLD


def test_the_refusal_says_what_could_still_be_spent(store) -> None:
    store.install("acct", funds=HOLD, charged=HOLD // 2, fields={})
    decision = store.authorize("acct", "r", HOLD, AT, "m")
    assert decision.verdict is Verdict.INSUFFICIENT_FUNDS
    assert decision.spendable == HOLD - HOLD // 2


def test_a_release_gives_back_what_was_not_charged_once(store) -> None:
    store.install("acct", funds=2 * HOLD, charged=0, fields={})
    assert store.authorize("acct", "r1", HOLD, AT, "m").admitted
    assert store.authorize("acct", "r2", HOLD, AT, "m").admitted
    assert store.authorize("acct", "r3", HOLD, AT, "m").verdict is Verdict.INSUFFICIENT_FUNDS
    assert store.release("acct", "r1", 1_000) is True
    assert store.release("acct", "r1", 1_000) is False  # redelivered: nothing moves again
    assert spendable(store, "acct") == HOLD - 1_000
    assert store.release("acct", "unknown", 5) is False
    # A true-up above the hold is charged: the account may end below zero, never refused money.
    assert store.release("acct", "r2", 2 * HOLD) is True
    assert spendable(store, "acct") == -1_000
    assert store.authorize("acct", "r4", 0, AT, "m").verdict is Verdict.INSUFFICIENT_FUNDS


def test_budgets_bound_the_day_the_month_and_one_model(store) -> None:
    day, month = day_scope(AT), month_scope(AT)
    store.install(
        "acct",
        funds=None,
        charged=0,
        fields={
            budget_field("day"): 5 * HOLD,
            budget_field("month"): 8 * HOLD,
            budget_field("day", "gpt-4o"): 2 * HOLD,
            spent_field(month): 2 * HOLD,  # charged earlier this month, another day
        },
    )
    got = [store.authorize("acct", f"g{i}", HOLD, AT, "gpt-4o") for i in range(3)]
    assert [d.verdict for d in got] == [Verdict.ADMITTED] * 2 + [Verdict.BUDGET_EXCEEDED]
    assert (got[2].budget, got[2].limit, got[2].used) == ("day for gpt-4o", 2 * HOLD, 2 * HOLD)
    others = [store.authorize("acct", f"o{i}", HOLD, AT, "o3").verdict for i in range(4)]
    assert others == [Verdict.ADMITTED] * 3 + [Verdict.BUDGET_EXCEEDED]
    refused = store.authorize("acct", "x", HOLD, AT, "o3")
    assert (refused.budget, refused.used) == ("day", 5 * HOLD)
    tomorrow = AT + timedelta(days=1)
    last = [store.authorize("acct", f"t{i}", HOLD, tomorrow, "o3") for i in range(2)]
    assert last[0].verdict is Verdict.ADMITTED
    assert (last[1].verdict, last[1].budget) == (Verdict.BUDGET_EXCEEDED, "month")
    assert store.figures("acct")["p|" + day] == str(5 * HOLD)


def test_unknown_accounts_are_refused_or_get_the_default_budget_exactly(store) -> None:
    assert store.authorize("new", "r", 1, AT, "m").verdict is Verdict.UNKNOWN_ACCOUNT
    assert store.figures("new") == {}

    # BerriAI/litellm#40095: concurrent first requests of a new end user under a default budget.
    store.mark_ready("default_budget", 3 * HOLD, "day")

    def first(i: int) -> Verdict:
        client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
        try:
            own = AuthorizationStore(client, store.prefix)
            return own.authorize(
                "user-1", f"f{i}", HOLD, AT, "m", unknown="default_budget",
                default_budget=3 * HOLD, default_period="day",
            ).verdict  # fmt: skip
        finally:
            client.close()

    with ThreadPoolExecutor(16) as pool:
        verdicts = list(pool.map(first, range(40)))
    assert verdicts.count(Verdict.ADMITTED) == 3
    assert verdicts.count(Verdict.BUDGET_EXCEEDED) == 37


def test_a_budget_only_account_is_unknown_for_calls_no_budget_bounds(store) -> None:
    store.install("acct", funds=None, charged=0, fields={budget_field("day", "gpt-4o"): HOLD})
    assert store.authorize("acct", "a", HOLD, AT, "gpt-4o").verdict is Verdict.ADMITTED
    assert store.authorize("acct", "b", 1, AT, "o3").verdict is Verdict.UNKNOWN_ACCOUNT


FAIL_OPEN = {"r": "fail-open", "a": str(HOLD), "s": "h", "d": day_scope(AT), "m": month_scope(AT),
             "o": "m", "t": "0"}  # fmt: skip


def test_install_removes_closed_calls_drops_stale_ones_and_adds_missing_holds(store) -> None:
    store.install("acct", funds=10 * HOLD, charged=0, fields={})
    for rid in ("closed", "released", "stale", "open"):
        assert store.authorize("acct", rid, HOLD, AT, "m").admitted
    assert store.release("acct", "released", 100)
    done = store.install(
        "acct",
        funds=10 * HOLD,
        charged=100 + 300,
        fields={},
        closed=["closed", "released"],
        dropped=["stale"],
        added=[
            {
                "r": "fail-open",
                "a": str(HOLD),
                "s": "h",
                "d": day_scope(AT),
                "m": month_scope(AT),
                "o": "m",
                "t": "0",
            }
        ],
    )
    assert (done.old_charged, done.missed, done.dropped, done.added) == (
        0, ["closed"], ["stale"], ["fail-open"]
    )  # fmt: skip
    assert sorted(store.calls("acct")) == ["fail-open", "open"]
    assert spendable(store, "acct") == 10 * HOLD - 400 - 2 * HOLD
    assert store.figures("acct")["p|" + day_scope(AT)] == str(2 * HOLD)
