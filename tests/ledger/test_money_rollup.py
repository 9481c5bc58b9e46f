"""``money_daily`` always equals the ledger's sums, whatever sequence of operations wrote them.

Each example runs random calls — over a few days, accounts and models, with random holds (zero
included) — through the per-call operations (hold, settle with charges below and above the hold,
void, mark unsettled, unpriced, settle late within grace, resolve by release or by charging the
estimate, duplicates of each) and through the batched path (``apply_common``, with whatever it
hands back applied per call, as the consumer does); then the rollup per (day, account, model) must
equal the ledger join, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.orm import Session

from worker.core.errors import LedgerError
from worker.core.result import Outcome, Reason
from worker.ledger.batch import apply_common
from worker.ledger.operations import apply_result, hold, resolve
from worker.ledger.rollup import flush_money
from worker.reports.query import (
    FULL_KEYS,
    _money_rows,
    ledger_money_statement,
    rollup_money_statement,
)

from .factories import make_meta, make_result

GRACE = timedelta(hours=1)
BASE = datetime(2031, 7, 1, tzinfo=UTC)

FATES = (
    "pending",
    "settle",
    "settle_over",
    "void",
    "unsettled",
    "unpriced",
    "late",
    "release",
    "charge_estimate",
    "charge_estimate_over",
    "release_then_late",  # resolved, then its data came: charged late (``charged_late``)
    "estimate_then_late",
)

call = st.fixed_dictionaries(
    {
        "account": st.integers(0, 2),
        "model": st.sampled_from(["m-a", "m-b"]),
        # Minutes from BASE over three days: calls on both sides of midnight.
        "minute": st.integers(0, 3 * 24 * 60 - 1),
        "reserved": st.sampled_from([0, 1, 999, 10_000]),
        "charge": st.integers(0, 20_000),
        "fate": st.sampled_from(FATES),
        "batched": st.booleans(),
        "repeat": st.booleans(),  # the outcome delivered twice
    }
)


def money_by_key(session: Session, statement, accounts: set[str]) -> dict:
    rows = _money_rows(session.connection(), statement, FULL_KEYS)
    return {key: money for key, money in rows.items() if key[1] in accounts}


def rollup_equals_ledger(session: Session, accounts: set[str]) -> dict:
    dialect = session.get_bind().dialect.name
    flush_money(session)  # the rollup is written at COMMIT; this transaction never commits
    rollup = money_by_key(session, rollup_money_statement(FULL_KEYS), accounts)
    ledger = money_by_key(session, ledger_money_statement(FULL_KEYS, dialect), accounts)
    assert rollup == ledger
    return rollup


def _results(prefix: str, i: int, spec: dict):
    rid = f"{prefix}-{i}"
    created = BASE + timedelta(minutes=spec["minute"])
    common = {
        "account_id": f"{prefix}-acct{spec['account']}",
        "reserved": spec["reserved"],
        "model": spec["model"],
        "created_at": created,
    }
    meta = make_meta(rid, stream=True, **{k: v for k, v in common.items()})
    fate, charge = spec["fate"], spec["charge"]
    if fate in ("settle", "settle_over"):
        amount = charge if fate == "settle" else spec["reserved"] + 1 + charge
        return meta, [make_result(rid, charge=amount, **common)]
    if fate == "void":
        return meta, [make_result(rid, outcome=Outcome.VOID, usage=None, **common)]
    if fate == "unpriced":
        return meta, [make_result(rid, charge=None, **common)]
    if fate == "pending":
        return meta, []
    exposure = charge if fate != "charge_estimate_over" else spec["reserved"] + 1 + charge
    failed = make_result(
        rid, outcome=Outcome.UNSETTLED, reason=Reason.MISSING_USAGE, exposure=exposure, **common
    )
    if fate == "late":
        return meta, [failed, make_result(rid, charge=charge, **common)]
    return meta, [failed]


def _common(spec: dict, meta) -> dict:
    return {"account_id": meta.account_id, "reserved": spec["reserved"], "model": spec["model"],
            "created_at": meta.created_at}  # fmt: skip


def apply_calls(session: Session, prefix: str, calls: list[dict]) -> None:
    now = BASE + timedelta(days=3)
    planned = [(i, spec, *_results(prefix, i, spec)) for i, spec in enumerate(calls)]
    # The batched path first, with its hand-backs per call, as Consumer.process applies a batch.
    batch = [(spec, meta, results) for _, spec, meta, results in planned if spec["batched"]]
    holds = [meta for _, meta, _ in batch]
    firsts = [results[0] for _, _, results in batch if results]
    with session.begin_nested():
        applied = apply_common(session, holds, firsts, now=now)
    for meta in holds:
        if meta.request_id not in applied.held:
            hold(session, meta, now=now)
    for result in firsts:
        if result.request_id not in applied.settled:
            apply_result(session, result, now=now, grace=GRACE)
    for _, spec, meta, results in planned:
        done = spec["batched"]
        for n, result in enumerate(results):
            if done and n == 0:
                continue
            if n == 0:
                hold(session, meta, now=now)
            apply_result(session, result, now=now + timedelta(minutes=n), grace=GRACE)
        if not spec["batched"] and not results:
            hold(session, meta, now=now)
        if spec["repeat"]:
            hold(session, meta, now=now)
            for result in results:
                apply_result(session, result, now=now + timedelta(minutes=5), grace=GRACE)
        if spec["fate"] in (
            "release", "charge_estimate", "charge_estimate_over", "release_then_late",
            "estimate_then_late",
        ):  # fmt: skip
            action = "release" if spec["fate"].startswith("release") else "charge_estimate"
            resolve(session, meta.request_id, action, who="t", note="t", now=now)
            if spec["fate"].endswith("_late"):
                late = make_result(
                    meta.request_id, charge=spec["charge"] // 2 + 1, **_common(spec, meta)
                )
                apply_result(session, late, now=now + timedelta(hours=2), grace=GRACE)
            if spec["repeat"]:
                try:
                    resolve(session, meta.request_id, action, who="t", note="t", now=now)
                except LedgerError:
                    pass  # a second resolution is refused and changes nothing
                else:
                    raise AssertionError("a second resolution was accepted")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(calls=st.lists(call, min_size=1, max_size=10))
def test_rollup_equals_the_ledger_after_any_operations(session: Session, calls) -> None:
    prefix = f"mr{uuid.uuid4().hex[:8]}"
    apply_calls(session, prefix, calls)
    found = rollup_equals_ledger(session, {f"{prefix}-acct{n}" for n in range(3)})
    # Every call with a positive hold has money on its key; the keys are (day, account, model).
    for spec in calls:
        if spec["reserved"] > 0:
            day = (BASE + timedelta(minutes=spec["minute"])).date().isoformat()
            key = (day, f"{prefix}-acct{spec['account']}", spec["model"])
            assert found[key]["held"] > 0


def test_rollup_sums_a_known_ledger(session: Session) -> None:
    """Pinned figures: a hold of 10,000 charged 12,500 (true-up 2,500) and one voided hold."""
    prefix = f"mk{uuid.uuid4().hex[:8]}"
    account = f"{prefix}-acct0"
    calls = [
        {"account": 0, "model": "m-a", "minute": 60, "reserved": 10_000, "charge": 2_499,
         "fate": "settle_over", "batched": True, "repeat": True},
        {"account": 0, "model": "m-a", "minute": 120, "reserved": 999, "charge": 0,
         "fate": "void", "batched": False, "repeat": False},
    ]  # fmt: skip
    apply_calls(session, prefix, calls)
    found = rollup_equals_ledger(session, {account})
    assert found == {
        ("2031-07-01", account, "m-a"): {
            "held": 10_999, "charged": 12_500, "true_ups": 2_500, "released": 999,
        }
    }  # fmt: skip


def test_a_late_charge_ties_out_in_the_report(session: Session) -> None:
    """A call charged late after its hold was released, and one after its estimate was charged
    (refunding part of it): the late charges are money beyond the hold (true-ups), their refund no
    hold released, so held = (charged - true-ups) + released + still held, in the ledger join and
    in the rollup alike."""
    prefix = f"lt{uuid.uuid4().hex[:8]}"
    account, now = f"{prefix}-acct", BASE + timedelta(days=1)
    common = {"account_id": account, "reserved": 10_000, "model": "m-a", "created_at": BASE}
    for rid, action, exposure, charge in (("a", "release", 3_000, 4_000),
                                          ("b", "charge_estimate", 3_000, 1_000)):  # fmt: skip
        rid = f"{prefix}-{rid}"
        hold(session, make_meta(rid, stream=True, **common), now=now)
        failed = make_result(rid, outcome=Outcome.UNSETTLED, reason=Reason.MISSING_USAGE,
                             exposure=exposure, **common)  # fmt: skip
        apply_result(session, failed, now=now, grace=GRACE)
        resolve(session, rid, action, who="t", note="t", now=now + GRACE * 2)
        late = make_result(rid, charge=charge, **common)
        assert apply_result(session, late, now=now + GRACE * 3, grace=GRACE) == "charged_late"
    [money] = rollup_equals_ledger(session, {account}).values()
    assert (money["held"], money["charged"], money["true_ups"], money["released"]) == (
        20_000, 5_000, 4_000 - 2_000, 10_000 + 7_000,
    )  # fmt: skip
    assert money["held"] == (money["charged"] - money["true_ups"]) + money["released"]
