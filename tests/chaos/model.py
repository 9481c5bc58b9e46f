"""What should have happened, from the simulator's ``Expected`` fates, and what did, from the ledger.

The model never calls the reconciler: it reads each call's expected outcome, reason, usage source and
charge (``worker.simulation.expected`` restates the billing rules independently), and the ledger is
read with plain SQL over reservations, failures, usage records and ledger entries. Estimated charges
are not predicted by the simulator, so the model takes them from the usage records and checks them
only through the balances (held, charged, available) and the per-call revenue postings.

``digest`` hashes the final ledger without ids or timestamps: two runs of the same calls that end
with the same books have the same digest, whatever order the notifications came in.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from models import Entry, Failure, LedgerAccount, Reservation, Transaction, UsageRecord
from worker.core.result import Outcome, UsageSource
from worker.ledger.balances import balance, ledger_is_balanced
from worker.simulation.calls import SimCall

STATUS_OF = {Outcome.SETTLED: "settled", Outcome.UNSETTLED: "unsettled", Outcome.VOID: "voided"}


@dataclass
class Booked:
    """One reservation as the ledger holds it."""

    request_id: str
    account_id: str
    status: str
    reserved: int
    reason: str | None = None
    action: str | None = None
    usage_source: str | None = None
    charge: int | None = None
    tokens: tuple[int, int] | None = None
    legs: list[tuple[str, str, str, int]] = field(default_factory=list)

    @property
    def revenue(self) -> int:
        return sum(
            amount if direction == "credit" else -amount
            for _kind, account, direction, amount in self.legs
            if account == "revenue"
        )


def read_ledger(session: Session) -> dict[str, Booked]:
    """Every reservation with its failure, usage record and ledger legs (kind, account, side, µ$).

    Reads one snapshot (REPEATABLE READ; call it first in a fresh session), since workers keep writing.
    """
    if session.bind is not None and session.bind.dialect.name == "postgresql":
        session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
    booked: dict[str, Booked] = {}
    by_id: dict[int, Booked] = {}
    rows = session.execute(
        select(
            Reservation.id,
            Reservation.request_id,
            Reservation.account_id,
            Reservation.status,
            Reservation.reserved_micros,
        )
    ).all()
    for rid_pk, request_id, account_id, status, reserved in rows:
        item = Booked(request_id, account_id, status, int(reserved))
        booked[request_id] = by_id[rid_pk] = item
    for pk, reason, action in session.execute(
        select(Failure.reservation_id, Failure.reason, Failure.action)
    ).all():
        by_id[pk].reason, by_id[pk].action = reason, action
    for pk, source, charge, prompt, completion in session.execute(
        select(
            UsageRecord.reservation_id,
            UsageRecord.usage_source,
            UsageRecord.charge_micros,
            UsageRecord.prompt_tokens,
            UsageRecord.completion_tokens,
        )
    ).all():
        item = by_id[pk]
        item.usage_source, item.charge, item.tokens = source, int(charge), (prompt, completion)
    for pk, kind, account_kind, direction, amount in session.execute(
        select(
            Transaction.reservation_id,
            Transaction.kind,
            LedgerAccount.kind,
            Entry.direction,
            Entry.amount,
        )
        .join(Entry, Entry.transaction_id == Transaction.id)
        .join(LedgerAccount, LedgerAccount.id == Entry.ledger_account_id)
        .where(Transaction.reservation_id.is_not(None))
    ).all():
        by_id[pk].legs.append((kind, account_kind, direction, int(amount)))
    return booked


def digest(booked: dict[str, Booked]) -> str:
    """sha256 over sorted (request_id, status, charge, reason, legs by kind); no ids, no times.

    The reason counts only while the call is unsettled: a call that settles late keeps its closed
    failure row, and whether a late usage frame beat the close is a matter of timing, not of books.
    """
    rows = []
    for request_id in sorted(booked):
        item = booked[request_id]
        reason = item.reason if item.status == "unsettled" else None
        rows.append(
            (
                request_id,
                item.status,
                item.charge,
                item.usage_source,
                reason,
                item.reserved,
                sorted(item.legs),
            )
        )
    return hashlib.sha256(repr(rows).encode()).hexdigest()


@dataclass
class Verdict:
    """The comparison of a finished run with the model; ``problems`` lists one line per mismatch."""

    calls: int
    lost: int = 0
    charged_twice: int = 0
    wrong_outcome: int = 0
    unexplained_dead: int = 0
    missing_dead: int = 0
    balance_mismatches: int = 0
    balanced: bool = True
    dead_letters: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            self.lost == 0
            and self.charged_twice == 0
            and self.wrong_outcome == 0
            and self.unexplained_dead == 0
            and self.missing_dead == 0
            and self.balance_mismatches == 0
            and self.balanced
        )

    def note(self, text: str) -> None:
        if len(self.problems) < 40:
            self.problems.append(text)


def _field(fields: dict[bytes, bytes], name: str) -> str | None:
    value = fields.get(name.encode())
    return None if value is None else value.decode(errors="replace")


def decided(calls: list[SimCall], booked: dict[str, Booked]) -> bool:
    """Whether every call that should reach the ledger has reached its final status."""
    for call in calls:
        exp = call.expected
        if exp.outcome is None:
            continue
        item = booked.get(call.request_id)
        if item is None or item.status == "held":
            return False
        if exp.late and exp.outcome is Outcome.SETTLED and item.status != "settled":
            return False
    return True


def dead_letter_ids(dead: list[tuple[bytes, dict[bytes, bytes]]]) -> Counter[str]:
    return Counter(_field(fields, "orig.request_id") or "" for _id, fields in dead)


def check(
    calls: list[SimCall], session: Session, dead: list[tuple[bytes, dict[bytes, bytes]]]
) -> Verdict:
    """Compare the ledger and the dead-letter stream with every call's expected fate."""
    booked = read_ledger(session)
    verdict = Verdict(calls=len(calls), dead_letters=len(dead))
    verdict.balanced = ledger_is_balanced(session)
    by_id = {call.request_id: call for call in calls}
    held: dict[str, int] = defaultdict(int)
    charged: dict[str, int] = defaultdict(int)
    for call in calls:
        exp, rid = call.expected, call.request_id
        item = booked.get(rid)
        if exp.outcome is None:
            if item is not None:
                verdict.wrong_outcome += 1
                verdict.note(f"{rid}: expected only a dead letter, ledger has {item.status}")
            continue
        if item is None or item.status == "held":
            verdict.lost += 1
            verdict.note(f"{rid}: lost ({'no reservation' if item is None else 'still held'})")
            continue
        verdict.outcomes[exp.label] += 1
        want = STATUS_OF[exp.outcome]
        wrong = []
        if item.status != want:
            wrong.append(f"status {item.status} != {want}")
        elif exp.outcome is Outcome.UNSETTLED and item.reason != str(exp.reason):
            wrong.append(f"reason {item.reason} != {exp.reason}")
        elif exp.outcome is Outcome.SETTLED:
            if item.usage_source != str(exp.usage_source):
                wrong.append(f"usage source {item.usage_source} != {exp.usage_source}")
            elif exp.usage_source is UsageSource.REPORTED:
                if item.charge != exp.charge_micros:
                    wrong.append(f"charge {item.charge} != {exp.charge_micros}")
                if exp.usage is not None and item.tokens != (
                    exp.usage.prompt_tokens,
                    exp.usage.completion_tokens,
                ):
                    wrong.append(f"tokens {item.tokens} != {exp.usage}")
        if item.reserved != int(exp.reserved_micros):
            wrong.append(f"reserved {item.reserved} != {exp.reserved_micros}")
        expected_revenue = item.charge if item.status == "settled" else 0
        if item.revenue > (expected_revenue or 0):
            verdict.charged_twice += 1
            verdict.note(f"{rid}: revenue {item.revenue}, charge {item.charge}, legs {item.legs}")
        elif item.revenue != (expected_revenue or 0):
            wrong.append(f"revenue {item.revenue} != {expected_revenue}")
        if wrong:
            verdict.wrong_outcome += 1
            verdict.note(
                f"{rid} ({exp.label}, fault {call.fault}/{call.variant}): " + "; ".join(wrong)
            )
        if exp.outcome is Outcome.UNSETTLED:
            held[item.account_id] += int(exp.reserved_micros)
        elif exp.outcome is Outcome.SETTLED:
            if exp.usage_source is UsageSource.REPORTED:
                charged[item.account_id] += int(exp.charge_micros or 0)
            else:
                charged[item.account_id] += int(item.charge or 0)
    accounts = {item.account_id for item in booked.values()}
    for account in sorted(accounts):
        got = balance(session, account)
        want_held, want_charged = held[account], charged[account]
        want_available = -(want_held + want_charged)
        if (int(got.held), int(got.charged), int(got.available)) != (
            want_held,
            want_charged,
            want_available,
        ):
            verdict.balance_mismatches += 1
            verdict.note(
                f"account {account}: held {got.held}/{want_held} charged {got.charged}/"
                f"{want_charged} available {got.available}/{want_available}"
            )
    lettered = dead_letter_ids(dead)
    for rid, count in lettered.items():
        call = by_id.get(rid)
        if call is None or call.expected.dead_letter is None:
            verdict.unexplained_dead += count
            verdict.note(f"dead letter for {rid!r} not explained by the simulator")
    for call in calls:
        if call.expected.dead_letter is not None and call.request_id not in lettered:
            verdict.missing_dead += 1
            verdict.note(f"{call.request_id}: expected a dead letter ({call.expected.dead_letter})")
    return verdict


def dead_reasons(dead: list[tuple[bytes, dict[bytes, bytes]]]) -> Counter[str]:
    return Counter((_field(fields, "reason") or "?")[:60] for _id, fields in dead)


def summarize(verdict: Verdict) -> dict[str, Any]:
    return {
        "lost": verdict.lost,
        "charged_twice": verdict.charged_twice,
        "wrong_outcome": verdict.wrong_outcome,
        "unexplained_dead": verdict.unexplained_dead,
        "missing_dead": verdict.missing_dead,
        "balance_mismatches": verdict.balance_mismatches,
        "balanced": verdict.balanced,
    }
