"""An independent auditor: random histories of holds and results, checked against a model.

Hypothesis drives holds, settlements (also before their hold, twice, late, unpriced), failures,
voids, the clock, resolutions by hand and by policy over a few requests of two accounts. After every
step the ledger must agree with a plain in-memory model: each account's available, held and charged
balances; held equals the sum of open holds; every transaction sums to zero (on PostgreSQL the deferred
constraint trigger is fired too); every status; and no failure is resolved twice.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from ledger.factories import T0, make_meta, settled, unsettled, voided
from models import Failure, Reservation
from worker.core.errors import LedgerError
from worker.core.result import Result
from worker.ledger.balances import balance, ledger_is_balanced, open_holds
from worker.ledger.operations import HoldOutcome, apply_result, hold, resolve, resolve_expired

GRACE = timedelta(hours=1)
REQUESTS = 4
index = st.integers(0, REQUESTS - 1)
amounts = st.sampled_from([0, 1, 999, 1_000, 5_000])
charges = st.sampled_from([0, 1, 500, 1_000, 7_500])
exposures = st.sampled_from([None, 0, 700, 1_000, 9_000])


@dataclass
class Model:
    account: str
    reserved: int
    status: str = "held"
    charged: int = 0
    detected_at: datetime | None = None
    exposure: int | None = None
    resolution: str | None = None


class LedgerMachine(RuleBasedStateMachine):
    engine: Engine

    def __init__(self) -> None:
        super().__init__()
        self.conn = self.engine.connect()
        self.outer = self.conn.begin()
        self.session = Session(bind=self.conn, join_transaction_mode="create_savepoint")
        prefix = uuid.uuid4().hex[:8]
        self.accounts = [f"{prefix}-a", f"{prefix}-b"]
        self.ids = [f"{prefix}-r{i}" for i in range(REQUESTS)]
        self.now = T0
        self.model: dict[str, Model] = {}

    def teardown(self) -> None:
        self.session.close()
        self.outer.rollback()
        self.conn.close()

    # -- helpers --

    def _account(self, i: int) -> str:
        return self.accounts[i % 2]

    def _reserved(self, i: int, amount: int) -> int:
        found = self.model.get(self.ids[i])
        return amount if found is None else found.reserved

    def _apply(self, result: Result) -> str:
        return apply_result(self.session, result, now=self.now, grace=GRACE)

    def _arrive(self, i: int, amount: int) -> Model:
        """The model of a request a result arrives for (recording the hold if it came first)."""
        rid = self.ids[i]
        if rid not in self.model:
            self.model[rid] = Model(self._account(i), amount)
        return self.model[rid]

    def _expected_settle(self, m: Model, charge: int) -> str:
        if m.status == "settled":
            return "duplicate"
        if m.status == "unsettled":
            # unresolved, within grace or past it: the hold is still there
            assert m.detected_at is not None
            m.status, m.charged, m.resolution = "settled", m.charged + charge, "settled_late"
            return "settled_late"
        if m.status in ("released", "settled_from_estimate"):
            # resolved before the data came: charged late, less what the resolution charged
            # (which is all this call was charged so far)
            m.status, m.charged = "settled", charge
            return "charged_late"
        if m.status != "held":
            return "final"
        m.status, m.charged = "settled", m.charged + charge
        return "settled"

    def _expected_unsettled(self, m: Model, exposure: int | None) -> str:
        if m.status == "unsettled":
            return "duplicate"
        if m.status != "held":
            return "final"
        m.status, m.detected_at, m.exposure = "unsettled", self.now, exposure
        return "unsettled"

    # -- rules --

    @rule(i=index, amount=amounts)
    def hold(self, i: int, amount: int) -> None:
        rid = self.ids[i]
        reserved = self._reserved(i, amount)
        outcome = hold(
            self.session,
            make_meta(rid, account_id=self._account(i), reserved=reserved),
            now=self.now,
        )
        if rid in self.model:
            assert outcome is HoldOutcome.DUPLICATE
        else:
            assert outcome is (HoldOutcome.HELD if reserved else HoldOutcome.RECORDED)
            self.model[rid] = Model(self._account(i), reserved)

    @rule(i=index)
    def hold_with_another_amount_is_refused(self, i: int) -> None:
        rid = self.ids[i]
        if rid not in self.model:
            return
        meta = make_meta(rid, account_id=self._account(i), reserved=self.model[rid].reserved + 1)
        with pytest.raises(LedgerError), self.session.begin_nested():
            hold(self.session, meta, now=self.now)

    @rule(i=index, amount=amounts, charge=charges, twice=st.booleans())
    def settle(self, i: int, amount: int, charge: int, twice: bool) -> None:
        reserved = self._reserved(i, amount)
        result = settled(self.ids[i], account_id=self._account(i), reserved=reserved, charge=charge)
        m = self._arrive(i, reserved)
        assert self._apply(result) == self._expected_settle(m, charge)
        if twice:
            assert self._apply(result) in ("duplicate", "final")

    @rule(i=index, amount=amounts)
    def settle_unpriced(self, i: int, amount: int) -> None:
        reserved = self._reserved(i, amount)
        result = settled(self.ids[i], account_id=self._account(i), reserved=reserved, charge=None)
        m = self._arrive(i, reserved)
        if m.status == "unsettled" and m.resolution is None:
            # a complete result now shows what blocks the call: the missing price
            m.exposure = None
            assert self._apply(result) == "duplicate"
            return
        assert self._apply(result) == self._expected_unsettled(m, None)

    @rule(i=index, amount=amounts, exposure=exposures)
    def fail(self, i: int, amount: int, exposure: int | None) -> None:
        reserved = self._reserved(i, amount)
        result = unsettled(
            self.ids[i], account_id=self._account(i), reserved=reserved, exposure=exposure
        )
        m = self._arrive(i, reserved)
        assert self._apply(result) == self._expected_unsettled(m, exposure)

    @rule(i=index, amount=amounts)
    def void(self, i: int, amount: int) -> None:
        reserved = self._reserved(i, amount)
        result = voided(self.ids[i], account_id=self._account(i), reserved=reserved)
        m = self._arrive(i, reserved)
        if m.status == "voided":
            expected = "duplicate"
        elif m.status == "held":
            m.status, expected = "voided", "voided"
        else:
            expected = "final"
        assert self._apply(result) == expected

    @rule(seconds=st.sampled_from([1, 3_600, 3_601, 7_200]))
    def tick(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)

    @rule(i=index, action=st.sampled_from(["release", "charge_estimate"]))
    def resolve(self, i: int, action: str) -> None:
        rid = self.ids[i]
        m = self.model.get(rid)
        refused = (
            m is None
            or m.detected_at is None
            or m.resolution is not None
            or (action == "charge_estimate" and m.exposure is None)
        )
        if refused:
            with pytest.raises(LedgerError), self.session.begin_nested():
                resolve(self.session, rid, action, who="auditor", note="", now=self.now)
            return
        assert m is not None
        status = resolve(self.session, rid, action, who="auditor", note="", now=self.now)
        self._resolved(m, action)
        assert status == m.status

    def _resolved(self, m: Model, action: str) -> None:
        m.resolution = action
        if action == "release":
            m.status = "released"
        else:
            assert m.exposure is not None
            m.status, m.charged = "settled_from_estimate", m.charged + m.exposure

    @rule(policy=st.sampled_from(["release", "charge_estimate", "none"]))
    def resolve_expired(self, policy: str) -> None:
        expired = [
            m
            for m in self.model.values()
            if m.status == "unsettled" and m.detected_at is not None
            and m.detected_at < self.now - GRACE
        ]  # fmt: skip
        count = resolve_expired(self.session, now=self.now, grace=GRACE, policy=policy)
        if policy == "none":
            assert count == 0
            return
        assert count == len(expired)
        for m in expired:
            action = policy if m.exposure is not None else "release"
            self._resolved(m, action)

    # -- the audit --

    @invariant()
    def balances_match_the_model(self) -> None:
        for account in self.accounts:
            mine = [m for m in self.model.values() if m.account == account]
            held = sum(m.reserved for m in mine if m.status in ("held", "unsettled"))
            charged = sum(m.charged for m in mine)
            found = balance(self.session, account)
            assert (found.available, found.held, found.charged) == (-held - charged, held, charged)
            assert open_holds(self.session, account) == held

    @invariant()
    def every_transaction_balances(self) -> None:
        assert ledger_is_balanced(self.session)
        if self.engine.dialect.name == "postgresql":
            self.session.execute(select(1))
            self.conn.exec_driver_sql("SET CONSTRAINTS ALL IMMEDIATE")
            self.conn.exec_driver_sql("SET CONSTRAINTS ALL DEFERRED")

    @invariant()
    def statuses_and_resolutions_match(self) -> None:
        rows = self.session.execute(
            select(Reservation.request_id, Reservation.status, Failure.action)
            .outerjoin(Failure, Failure.reservation_id == Reservation.id)
            .where(Reservation.request_id.in_(self.ids))
        ).all()
        assert {rid: (status, action) for rid, status, action in rows} == {
            rid: (m.status, m.resolution) for rid, m in self.model.items()
        }


def test_the_ledger_agrees_with_an_independent_model(engine: Engine) -> None:
    machine = type("LedgerAudit", (LedgerMachine,), {"engine": engine})
    sqlite = engine.dialect.name == "sqlite"
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=120 if sqlite else 50,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
