"""An account's monthly statement: one model that every statement renderer reads.

Money is ``Micros``. A ``Position`` is what the account held at a moment, read by the balance query
(``worker.ledger.funds``) at the month's start and end; the movements between them are read apart,
from the month's ledger entries. So the statement checks itself, three ways, to the micro-dollar:

* balance: opening balance + credits - charges = closing balance, where balance = funded - charged
  (what was paid in and not yet spent; held money is part of it);
* held: opening held + holds - releases - charged from holds = closing held, where charged from
  holds = charges - true-ups (a true-up is taken from available, beyond the hold);
* available: closing available (the ledger's ``available`` account) = closing balance - closing held.

Money belongs to the moment its ledger transaction was written (a call held on the 31st and
settled on the 1st is held in one month and charged in the next; the hold shows in the first
month's closing held). The report, by contrast, files money under the day its call was created.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime

from worker.core.money import Micros

# (field, label) of a charge row's money, in every renderer's order.
CHARGE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("reported", "usage reported"),
    ("estimated", "usage estimated"),
    ("resolved", "charged estimate (resolved)"),
    ("true_ups", "true-ups beyond the hold"),
)
CHARGE_FIELDS = tuple(name for name, _ in CHARGE_COLUMNS)
# Releases by the ledger transaction that moved money back to available.
RELEASES: tuple[tuple[str, str], ...] = (
    ("after_charge", "rest of the hold after a charge"),
    ("void", "void calls"),
    ("resolved", "resolved by release"),
)
RELEASE_FIELDS = tuple(name for name, _ in RELEASES)


@dataclass(frozen=True, slots=True)
class Position:
    funded: Micros
    charged: Micros
    held: Micros
    available: Micros

    @property
    def balance(self) -> Micros:
        return self.funded - self.charged


@dataclass(frozen=True, slots=True)
class CreditLine:
    at: datetime
    kind: str  # credit | reversal
    key: str  # the credit's idempotency key (a reversal's: the credit it reverses)
    note: str
    amount: Micros  # signed: a reversal is negative


@dataclass(frozen=True, slots=True)
class ChargeRow:
    day: date
    model: str
    calls: int  # calls charged that day (a charge, or a charged estimate)
    money: Mapping[str, Micros]  # by ``CHARGE_FIELDS``

    @property
    def total(self) -> Micros:
        return Micros(sum(self.money.values()))


@dataclass(frozen=True, slots=True)
class OpenFailure:
    request_id: str
    model: str
    reason: str
    detected_at: datetime
    held: Micros
    exposure: Micros | None  # the estimate's price; None when unpriced


@dataclass(frozen=True, slots=True)
class Statement:
    account_id: str
    month: str  # YYYY-MM
    start: datetime
    end: datetime  # the month's end, exclusive
    as_of: datetime  # the closing moment: the month's end, or now for the month in progress
    generated_at: datetime
    opening: Position
    closing: Position
    credits: tuple[CreditLine, ...]
    charges: tuple[ChargeRow, ...]
    holds: Micros  # holds posted in the month
    releases: Mapping[str, Micros]  # by ``RELEASE_FIELDS``
    open_failures: tuple[OpenFailure, ...]  # open at ``as_of``

    @property
    def complete(self) -> bool:
        return self.as_of >= self.end

    @property
    def credited(self) -> Micros:
        return Micros(sum(line.amount for line in self.credits))

    @property
    def charged(self) -> Micros:
        return Micros(sum(row.total for row in self.charges))

    @property
    def true_ups(self) -> Micros:
        return Micros(sum(row.money["true_ups"] for row in self.charges))

    @property
    def released(self) -> Micros:
        return Micros(sum(self.releases.values()))

    @property
    def charge_totals(self) -> dict[str, Micros]:
        return {
            name: Micros(sum(row.money[name] for row in self.charges)) for name in CHARGE_FIELDS
        }

    @property
    def differences(self) -> dict[str, Micros]:
        """The three tie-outs (module docstring) as differences: all zero when the books agree."""
        o, c = self.opening, self.closing
        return {
            "balance": o.balance + self.credited - self.charged - c.balance,
            "held": o.held + self.holds - self.released - (self.charged - self.true_ups) - c.held,
            "available": c.available - (c.balance - c.held),
        }

    @property
    def ties_out(self) -> bool:
        return not any(self.differences.values())
