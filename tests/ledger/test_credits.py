"""Credits, reversals and credit limits on both engines: balanced ``fund`` transactions, the
idempotency rules, and the balances they leave (``worker.ledger.funds``)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models import AccountCredit, Entry, Kind, Transaction
from worker.core.errors import LedgerError
from worker.core.money import Micros
from worker.ledger.balances import ledger_is_balanced
from worker.ledger.credits import Recorded, credit, reverse, set_limit
from worker.ledger.funds import account_funds, funds_of
from worker.ledger.operations import apply_result, hold

from .factories import T0, make_meta, settled

GRACE = timedelta(hours=1)


@pytest.fixture
def account() -> str:
    return f"acct-{uuid.uuid4().hex[:8]}"


def _credit(session: Session, account: str, amount: int, key: str, note: str = "top-up", **kw):
    kw.setdefault("new_account", True)
    return credit(session, account, Micros(amount), key=key, note=note, who="t", now=T0, **kw)


def test_a_credit_funds_the_available_balance(session: Session, account: str) -> None:
    done = _credit(session, account, 25_000_000, f"{account}-k1")
    assert done.outcome is Recorded.RECORDED
    funds = funds_of(session, account)
    assert (funds.funded, funds.available, funds.held, funds.charged) == (
        25_000_000,
        25_000_000,
        0,
        0,
    )
    assert funds.limit is None and funds.spendable == 25_000_000
    kinds = session.execute(
        select(Transaction.kind, func.count(Entry.id))
        .join(Entry, Entry.transaction_id == Transaction.id)
        .join(AccountCredit, AccountCredit.transaction_id == Transaction.id)
        .where(AccountCredit.id == done.credit_id)
        .group_by(Transaction.kind)
    ).all()
    assert kinds == [(str(Kind.FUND), 2)]
    assert ledger_is_balanced(session)


def test_the_same_key_and_content_is_a_no_op(session: Session, account: str) -> None:
    first = _credit(session, account, 5_000_000, f"{account}-k")
    again = _credit(session, account, 5_000_000, f"{account}-k")
    assert again.outcome is Recorded.DUPLICATE and again.credit_id == first.credit_id
    assert funds_of(session, account).funded == 5_000_000


@pytest.mark.parametrize(
    "change", [{"amount": 5_000_001}, {"note": "other"}, {"account": "elsewhere"}]
)
def test_the_same_key_with_other_content_is_refused(
    session: Session, account: str, change: dict
) -> None:
    _credit(session, account, 5_000_000, f"{account}-k")
    target = f"{account}-{change['account']}" if "account" in change else account
    with pytest.raises(LedgerError, match="already recorded a credit"):
        _credit(session, target, change.get("amount", 5_000_000), f"{account}-k",
                note=change.get("note", "top-up"))  # fmt: skip
    assert funds_of(session, account).funded == 5_000_000
    assert funds_of(session, target).funded == (5_000_000 if target == account else 0)


@pytest.mark.parametrize("amount", [0, -1, 100_000_000 * 1_000_000 + 1])
def test_refused_amounts(session: Session, account: str, amount: int) -> None:
    with pytest.raises(LedgerError, match="refusing an amount"):
        _credit(session, account, amount, f"{account}-k")


def test_refused_without_a_note_or_a_key(session: Session, account: str) -> None:
    with pytest.raises(LedgerError, match="note"):
        _credit(session, account, 1, f"{account}-k", note=" ")
    with pytest.raises(LedgerError, match="idempotency key"):
        _credit(session, account, 1, "")


def test_a_reversal_is_a_new_transaction_once(session: Session, account: str) -> None:
    key = f"{account}-k"
    _credit(session, account, 7_000_000, key)
    before = session.scalar(select(func.count()).select_from(Transaction))
    done = reverse(session, key, note="sent by mistake", who="t", now=T0 + timedelta(days=1))
    assert done.outcome is Recorded.RECORDED and done.amount == 7_000_000
    assert session.scalar(select(func.count()).select_from(Transaction)) == before + 1
    again = reverse(session, key, note="sent by mistake", who="t", now=T0 + timedelta(days=2))
    assert again.outcome is Recorded.DUPLICATE and again.credit_id == done.credit_id
    with pytest.raises(LedgerError, match="reversed once"):
        reverse(session, key, note="another reason", who="t", now=T0)
    funds = funds_of(session, account)
    assert (funds.funded, funds.available) == (0, 0)
    # The balance before the reversal is still there, read at that moment.
    assert funds_of(session, account, as_of=T0 + timedelta(hours=1)).funded == 7_000_000
    assert ledger_is_balanced(session)


def test_reversing_an_unknown_key_is_refused(session: Session, account: str) -> None:
    with pytest.raises(LedgerError, match="no credit was recorded"):
        reverse(session, f"{account}-nothing", note="x", who="t", now=T0)


def test_calls_spend_the_funds_and_the_figures_tie_out(session: Session, account: str) -> None:
    _credit(session, account, 1_000_000, f"{account}-k")
    meta = make_meta(f"{account}-r1", account_id=account, reserved=10_000)
    hold(session, meta, now=T0)
    held = funds_of(session, account)
    assert (held.held, held.available) == (10_000, 990_000)
    apply_result(
        session, settled(f"{account}-r1", account_id=account, charge=12_500), now=T0, grace=GRACE
    )
    funds = funds_of(session, account)
    assert (funds.funded, funds.held, funds.charged, funds.available) == (
        1_000_000, 0, 12_500, 987_500,
    )  # fmt: skip
    assert funds.ties_out


def test_credit_limits_are_a_history(session: Session, account: str) -> None:
    assert set_limit(session, account, Micros(5_000_000), note="net 30", who="t", now=T0) is (
        Recorded.RECORDED
    )
    assert set_limit(session, account, Micros(5_000_000), note="net 30", who="t", now=T0) is (
        Recorded.DUPLICATE
    )
    later = T0 + timedelta(days=1)
    set_limit(session, account, Micros(0), note="closed", who="t", now=later)
    assert funds_of(session, account).limit == 0
    assert funds_of(session, account, as_of=later).limit == 5_000_000
    assert funds_of(session, account, as_of=T0).limit is None
    with pytest.raises(LedgerError, match="refusing an amount"):
        set_limit(session, account, Micros(-1), note="x", who="t", now=T0)


def test_every_account_is_listed(session: Session, account: str) -> None:
    _credit(session, account, 3, f"{account}-k")
    hold(session, make_meta(f"{account}-r", account_id=f"{account}-b", reserved=9), now=T0)
    found = account_funds(session)
    assert found[account].funded == 3
    assert (found[f"{account}-b"].held, found[f"{account}-b"].available) == (9, -9)
    assert all(funds.ties_out for funds in found.values())
