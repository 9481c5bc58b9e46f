"""The low-balance alert (pure): a funded account whose spendable balance got worse than a level.

An account is watched from its first credit or credit limit on (an account nobody funded is
post-paid: the gateway grants its credit, and a negative balance is its normal state). Its
spendable balance is ``available + credit limit``; at the end of each closed alert window it is in
one of three states: ``ok``, ``low`` (below ``threshold``; never when the threshold is 0) or
``exhausted`` (below zero: negative without a limit, past the limit with one). One alert per
account and window in which the state got worse than at the window's start, naming the new state
as its reason: a ``Finding`` of kind ``low_balance``, paged or digested like every kind's
(``worker.alerts.paging``). An account that stays low is not found again until it recovers and
falls again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from models.alerts import AlertKind
from worker.alerts.aggregation import span
from worker.alerts.picture import Finding
from worker.core.money import Micros
from worker.ledger.funds import Level

OK, LOW, EXHAUSTED = "ok", "low", "exhausted"
RANK = {OK: 0, LOW: 1, EXHAUSTED: 2}


def state(level: Level | None, threshold: Micros) -> str:
    if level is None:
        return OK
    if level.spendable < 0:
        return EXHAUSTED
    return LOW if level.spendable < threshold else OK


def low_balance_findings(
    levels: Mapping[str, Sequence[Level | None]],
    moments: Sequence[datetime],
    *,
    threshold: Micros,
) -> list[Finding]:
    """``levels[account][i]`` is the account's level at ``moments[i]`` (ascending window
    boundaries); a finding, dated at the window's start, for each window (moments[i],
    moments[i + 1]) that left it worse off."""
    alerts = []
    for account in sorted(levels):
        series = levels[account]
        for i in range(len(moments) - 1):
            before, after = state(series[i], threshold), state(series[i + 1], threshold)
            level = series[i + 1]
            if RANK[after] <= RANK[before] or level is None:
                continue
            alerts.append(_finding(account, after, level, moments[i], moments[i + 1], threshold))
    return alerts


def _finding(
    account: str, reason: str, level: Level, start: datetime, end: datetime, threshold: Micros
) -> Finding:
    spendable = level.spendable
    if reason == EXHAUSTED:
        what = f"past its credit limit of {level.limit.usd()} USD" if level.limit else "negative"
    else:
        what = f"below the {threshold.usd()} USD threshold"
    note = (
        f"{account}: spendable balance {spendable.usd()} USD is {what} (available"
        f" {level.available.usd()} USD) at the end of the {span(end - start)} window;"
        f" `billing balance {account}` shows it, `billing credit {account} AMOUNT` tops it up"
    )
    return Finding(
        str(AlertKind.LOW_BALANCE),
        reason,
        start,
        account_id=account,
        note=note,
        facts={
            "available_micros": int(level.available),
            "credit_limit_micros": int(level.limit),
            "spendable_micros": int(spendable),
            "threshold_micros": int(threshold),
        },
    )
