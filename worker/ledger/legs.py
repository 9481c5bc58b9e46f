"""The money rules as pure functions: which balanced transactions each ledger movement posts.

Contract. Each function returns the ``Posting``s of one movement; legs are (ledger account id,
signed amount), a credit > 0, and every posting's legs sum to zero (``check_balanced`` refuses
anything else). Both write paths, the batched one (``batch``) and the per-call one
(``operations``), post what these functions return through the one writer, ``postings.write``.

A hold moves the reserved amount from the customer's ``available`` to ``held``. A charge moves the
whole hold on: the charge (up to the hold) to ``revenue``, the rest back to ``available``; a charge
above the hold posts the whole hold and moves the excess from ``available`` to ``revenue`` in a
separate, flagged ``true_up``: never a silent cap, never a negative hold. A release moves the whole
hold back to ``available``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from models import Kind
from worker.core.errors import LedgerError
from worker.ledger.rollup import Grain

Leg = tuple[int, int]


class Customer(NamedTuple):
    """A customer's two ledger accounts."""

    available_id: int
    held_id: int


class Posting(NamedTuple):
    """One balanced transaction to write for a reservation (``kind`` is unique per reservation)."""

    reservation_id: int
    kind: Kind
    legs: tuple[Leg, ...]
    flagged: bool
    grain: Grain  # the reservation's key in money_daily
    available_id: int  # the customer's available account, for the rollup's ``released``


def check_legs(kind: Kind, legs: Sequence[Leg]) -> None:
    """Refuse a transaction whose legs do not sum to zero (a bug, never a race)."""
    if sum(amount for _, amount in legs) != 0:
        raise LedgerError(f"refusing an unbalanced {kind} transaction: {tuple(legs)}")


def check_balanced(posting: Posting) -> None:
    check_legs(posting.kind, posting.legs)


def hold(reservation_id: int, amount: int, customer: Customer, grain: Grain) -> list[Posting]:
    if amount < 0:
        raise LedgerError(f"reservation {reservation_id}: a hold must not be negative ({amount})")
    legs = ((customer.available_id, -amount), (customer.held_id, amount))
    return [Posting(reservation_id, Kind.HOLD, legs, False, grain, customer.available_id)]


def above_hold(reserved: int, amount: int) -> int:
    """What a charge of ``amount`` exceeds the hold by (the true-up), 0 when it does not."""
    return max(0, amount - reserved)


def charge(
    reservation_id: int,
    reserved: int,
    amount: int,
    customer: Customer,
    revenue_id: int,
    grain: Grain,
    kind: Kind = Kind.CHARGE,
) -> list[Posting]:
    """Charge ``amount`` against a hold of ``reserved``, releasing the rest; above the hold, the
    excess is a second, flagged ``true_up`` posting."""
    if amount < 0:
        raise LedgerError(f"reservation {reservation_id}: negative charge {amount}")
    posted = min(amount, reserved)
    legs = (
        (customer.held_id, -reserved),
        (revenue_id, posted),
        (customer.available_id, reserved - posted),
    )
    found = [Posting(reservation_id, kind, legs, False, grain, customer.available_id)]
    excess = above_hold(reserved, amount)
    if excess:
        legs = ((customer.available_id, -excess), (revenue_id, excess))
        found.append(
            Posting(reservation_id, Kind.TRUE_UP, legs, True, grain, customer.available_id)
        )
    return found


def release(
    reservation_id: int, reserved: int, customer: Customer, grain: Grain, kind: Kind
) -> list[Posting]:
    """Move the whole hold back to available."""
    legs = ((customer.held_id, -reserved), (customer.available_id, reserved))
    return [Posting(reservation_id, kind, legs, False, grain, customer.available_id)]


def late_charge(
    reservation_id: int,
    amount: int,
    already: int,
    customer: Customer,
    revenue_id: int,
    grain: Grain,
) -> list[Posting]:
    """A call's charge of ``amount`` posted after its hold was resolved, ``already`` of it charged
    by the resolution: the difference moves between ``available`` and ``revenue`` (a refund when
    the resolution charged more), as the reservation's one ``charge`` transaction, flagged."""
    if amount < 0 or already < 0:
        raise LedgerError(
            f"reservation {reservation_id}: negative late charge {amount} / {already}"
        )
    delta = amount - already
    legs = ((customer.available_id, -delta), (revenue_id, delta))
    return [Posting(reservation_id, Kind.CHARGE, legs, True, grain, customer.available_id)]
