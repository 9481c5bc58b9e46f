"""Budgets: how much an account may spend per UTC day or calendar month, for every model or one.

Each setting is a new ``budgets`` row (``models.budgets``); the newest per (account, period, model)
is in force, and one whose ``limit_micros`` is NULL clears it. Checked like credits: an account id a
call could name, an amount within the ledger's range, a note saying why.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from models import Budget
from models.budgets import BUDGET_PERIODS
from worker.core.errors import LedgerError
from worker.core.money import Micros
from worker.ledger import postings
from worker.ledger.credits import (
    Recorded,
    account_id_of,
    check_seen,
    checked_amount,
    checked_note,
    checked_text,
)
from worker.ledger.rows import aware

budgets = Budget.__table__
# A per-model budget names a model as a call's ``model`` would: at most this many characters.
MAX_MODEL = 200


def set_budget(
    session: Session,
    account_id: str,
    period: str,
    limit: Micros | None,
    *,
    model: str = "",
    note: str,
    who: str,
    now: datetime,
    new_account: bool = False,
) -> Recorded:
    """Set (``limit`` None: clear) ``account_id``'s ``period`` budget, for ``model`` or every model
    (empty), from ``now`` on. The same setting as the one in force is a no-op."""
    now = aware(now)
    account_id, who = account_id_of(account_id), checked_text(who, "who")
    if period not in BUDGET_PERIODS:
        raise LedgerError(
            f"a budget's period is one of {', '.join(BUDGET_PERIODS)}, not {period!r}"
        )
    if len(model) > MAX_MODEL or model != model.strip():
        raise LedgerError(f"refusing the model name {model[:40]!r}")
    note = checked_note(note, "a budget")
    micros = None if limit is None else checked_amount(limit, allow_zero=True)
    check_seen(session, account_id, new_account)
    current = in_force(session, [account_id]).get(account_id, {}).get((period, model), "none")
    if current == micros or (current == "none" and micros is None):
        return Recorded.DUPLICATE
    postings.customer_ids(session, account_id, now)
    session.execute(
        insert(budgets),
        {"account_id": account_id, "period": period, "model": model, "limit_micros": micros,
         "note": note, "set_by": who, "set_at": now},
    )  # fmt: skip
    return Recorded.RECORDED


def in_force(
    session: Session, account_ids: Sequence[str] | None = None
) -> dict[str, dict[tuple[str, str], int]]:
    """Per account, its budgets in force: (period, model) → limit in micros (cleared ones absent)."""
    query = select(budgets.c.account_id, budgets.c.period, budgets.c.model, budgets.c.limit_micros)
    if account_ids is not None:
        query = query.where(budgets.c.account_id.in_(list(account_ids)))
    newest: dict[str, dict[tuple[str, str], int | None]] = {}
    for account, period, model, limit in session.execute(
        query.order_by(budgets.c.set_at, budgets.c.id)
    ):
        newest.setdefault(account, {})[(period, model)] = limit
    return {
        account: {key: int(limit) for key, limit in found.items() if limit is not None}
        for account, found in newest.items()
    }
