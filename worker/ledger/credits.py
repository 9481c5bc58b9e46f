"""Funding customer accounts: credits (top-ups), their reversals, and credit limits.

Contract. Every function takes a ``Session`` and never commits: the caller owns the transaction.
A credit moves its amount from the system ``credit`` account to the customer's ``available`` account
in one balanced ``fund`` ledger transaction and records an ``account_credits`` row naming it; a
reversal is a second ``fund`` transaction moving the same amount back, never an edit of the first.
Neither belongs to a reservation, so neither reaches ``money_daily`` (the report's money is the
money of calls).

Idempotency. A credit is known by its caller's key: the same key with the same account, amount and
note is a no-op (``DUPLICATE``); with anything else it is refused (``LedgerError``). A credit is
reversed at most once: reversing it again with the same note is a no-op, with another note refused.
Two processes recording the same key at once both try to insert it; the loser's transaction fails
on the unique key and, retried (``transient.is_transient``), finds the winner's row.

Setting a credit limit appends to ``credit_limits`` (the newest row is in force); the same limit
and note again is a no-op. The ledger never refuses a hold for want of funds: the gateway decides
credit before a call runs; the worker records what the call cost and alerts when a funded account
runs low (``worker.alerts.low_balance``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from sqlalchemy import bindparam, insert, select
from sqlalchemy.orm import Session

from models import AccountCredit, CreditKind, CreditLimit, Kind, LedgerKind
from worker.core.errors import LedgerError, RequestMetaError
from worker.core.money import MAX_AMOUNT, Micros
from worker.core.request import check_identifier
from worker.ledger import postings
from worker.ledger.rows import aware

account_credits = AccountCredit.__table__
credit_limits = CreditLimit.__table__

MAX_TEXT = 200  # account ids, keys and names: the width of their columns
MAX_NOTE = 10_000


class Recorded(StrEnum):
    RECORDED = "recorded"  # written now
    DUPLICATE = "duplicate"  # the same request was recorded before: nothing changed


@dataclass(frozen=True, slots=True)
class Credited:
    """What a credit or reversal request did, and the row it names."""

    outcome: Recorded
    credit_id: int
    account_id: str
    amount: Micros
    key: str
    at: datetime


def checked_text(value: str, what: str) -> str:
    if not value or not value.strip():
        raise LedgerError(f"{what} must not be empty")
    if len(value) > MAX_TEXT:
        raise LedgerError(f"{what} is longer than {MAX_TEXT} characters")
    return value


def account_id_of(value: str) -> str:
    """``value`` if a call could name it as its ``account_id`` (``request.check_identifier``: the
    one rule), else ``LedgerError``: a credit to an id no call can have funds nobody."""
    try:
        return check_identifier(value, "account")
    except RequestMetaError as exc:
        raise LedgerError(f"{exc}: no call can name this account") from None


ACCOUNT_SEEN = select(postings.accounts.c.id).where(postings.accounts.c.id == bindparam("b_id"))


def check_seen(session: Session, account_id: str, new_account: bool) -> None:
    """Refuse an account the ledger has never seen (no call, credit or limit named it) unless the
    caller says it is new: a typo in an id would fund an account no call reaches."""
    if new_account:
        return
    if session.execute(ACCOUNT_SEEN, {"b_id": account_id}).first() is None:
        raise LedgerError(
            f"account {account_id!r} has never been seen (no call, credit or limit names it): "
            "check the id, or pass --new-account to create it"
        )


def checked_note(value: str, what: str) -> str:
    if not value or not value.strip():
        raise LedgerError(f"{what} needs a note (why)")
    if len(value) > MAX_NOTE:
        raise LedgerError(f"a note must not be longer than {MAX_NOTE:,} characters")
    return value


def checked_amount(amount: Micros, *, allow_zero: bool = False) -> int:
    if not isinstance(amount, Micros):
        raise LedgerError(f"an amount must be Micros, not {type(amount).__name__}")
    if amount < 0 or (amount == 0 and not allow_zero) or amount > MAX_AMOUNT:
        raise LedgerError(f"refusing an amount of {int(amount)} micros")
    return int(amount)


def _fund(session: Session, legs: list[tuple[int, int]], now: datetime) -> int:
    """One balanced ``fund`` transaction with no reservation; its id."""
    return postings.write_unreserved(session, Kind.FUND, legs, now)


BY_KEY = select(account_credits).where(
    account_credits.c.idempotency_key == bindparam("b_key"),
    account_credits.c.kind == str(CreditKind.CREDIT),
)
REVERSAL_OF = select(account_credits).where(account_credits.c.reverses_id == bindparam("b_id"))


def credit(
    session: Session,
    account_id: str,
    amount: Micros,
    *,
    key: str,
    note: str,
    who: str,
    now: datetime,
    new_account: bool = False,
) -> Credited:
    """Credit ``amount`` to ``account_id``'s available balance, once per ``key`` (see the module
    docstring). ``account_id`` follows the calls' id rule (``account_id_of``); an account never
    seen before is created only with ``new_account`` (``_seen``)."""
    now = aware(now)
    account_id, key = account_id_of(account_id), checked_text(key, "idempotency key")
    note, who = checked_note(note, "a credit"), checked_text(who, "who")
    micros = checked_amount(amount)
    found = session.execute(BY_KEY, {"b_key": key}).first()
    if found is not None:
        same = (found.account_id, found.amount_micros, found.note) == (account_id, micros, note)
        if not same:
            raise LedgerError(
                f"idempotency key {key!r} already recorded a credit of "
                f"{Micros(found.amount_micros).usd()} USD to {found.account_id!r} "
                f"(note {found.note!r}) on {found.created_at.isoformat()}: refusing a different "
                "credit under the same key"
            )
        return Credited(Recorded.DUPLICATE, found.id, account_id, Micros(micros), key,
                        found.created_at)  # fmt: skip
    check_seen(session, account_id, new_account)
    available_id, _ = postings.customer_ids(session, account_id, now)
    source = postings.system_account_id(session, LedgerKind.CREDIT)
    txn_id = _fund(session, [(source, -micros), (available_id, micros)], now)
    credit_id = session.execute(
        insert(account_credits).returning(account_credits.c.id),
        {"kind": str(CreditKind.CREDIT), "idempotency_key": key, "reverses_id": None,
         "account_id": account_id, "amount_micros": micros, "note": note, "created_by": who,
         "transaction_id": txn_id, "created_at": now},
    ).scalar_one()  # fmt: skip
    return Credited(Recorded.RECORDED, int(credit_id), account_id, Micros(micros), key, now)


def reverse(session: Session, key: str, *, note: str, who: str, now: datetime) -> Credited:
    """Reverse the credit recorded under ``key`` in full: a new ``fund`` transaction moving its
    amount back from the account's available balance (which may go negative) to ``credit``."""
    now = aware(now)
    key, note, who = (
        checked_text(key, "idempotency key"),
        checked_note(note, "a reversal"),
        checked_text(who, "who"),
    )
    found = session.execute(BY_KEY.with_for_update(), {"b_key": key}).first()
    if found is None:
        raise LedgerError(f"no credit was recorded under the idempotency key {key!r}")
    done = session.execute(REVERSAL_OF, {"b_id": found.id}).first()
    amount = Micros(found.amount_micros)
    if done is not None:
        if done.note != note:
            raise LedgerError(
                f"the credit {key!r} was reversed on {done.created_at.isoformat()} "
                f"(note {done.note!r}): a credit is reversed once"
            )
        return Credited(Recorded.DUPLICATE, done.id, found.account_id, amount, key,
                        done.created_at)  # fmt: skip
    available_id, _ = postings.customer_ids(session, found.account_id, now)
    sink = postings.system_account_id(session, LedgerKind.CREDIT)
    txn_id = _fund(session, [(available_id, -int(amount)), (sink, int(amount))], now)
    reversal_id = session.execute(
        insert(account_credits).returning(account_credits.c.id),
        {"kind": str(CreditKind.REVERSAL), "idempotency_key": None, "reverses_id": found.id,
         "account_id": found.account_id, "amount_micros": int(amount), "note": note,
         "created_by": who, "transaction_id": txn_id, "created_at": now},
    ).scalar_one()  # fmt: skip
    return Credited(Recorded.RECORDED, int(reversal_id), found.account_id, amount, key, now)


LIMIT_NOW = (
    select(credit_limits.c.limit_micros, credit_limits.c.note)
    .where(credit_limits.c.account_id == bindparam("b_account"))
    .order_by(credit_limits.c.set_at.desc(), credit_limits.c.id.desc())
    .limit(1)
)


def set_limit(
    session: Session, account_id: str, limit: Micros, *, note: str, who: str, now: datetime
) -> Recorded:
    """Set ``account_id``'s credit limit (0: none below zero) from ``now`` on; the same limit and
    note as the one in force is a no-op."""
    now = aware(now)
    account_id, who = account_id_of(account_id), checked_text(who, "who")
    note = checked_note(note, "a credit limit")
    micros = checked_amount(limit, allow_zero=True)
    current = session.execute(LIMIT_NOW, {"b_account": account_id}).first()
    if current is not None and (current.limit_micros, current.note) == (micros, note):
        return Recorded.DUPLICATE
    postings.customer_ids(session, account_id, now)
    session.execute(
        insert(credit_limits),
        {"account_id": account_id, "limit_micros": micros, "note": note, "set_by": who,
         "set_at": now},
    )  # fmt: skip
    return Recorded.RECORDED
