"""Money per call day: the ledger's report-side sums, kept in the transaction that posts the money.

One row per (UTC day of the reservation's ``created_at``, account, model) with the four figures the
report's money section reads — ``held`` (credits of ``hold`` transactions), ``charged`` (revenue
credits minus revenue debits), ``true_ups`` (revenue credits of ``true_up`` transactions) and
``released`` (credits to the customer's ``available`` account). The ledger's posting functions
(``worker.ledger.postings.post`` and ``worker.ledger.batch``) add their deltas with one
``INSERT … ON CONFLICT DO UPDATE`` in the same database transaction as the entries, so the table always
equals the ``entries ⋈ transactions ⋈ reservations ⋈ ledger_accounts`` sums (``billing report
--verify-ledger`` compares them). Not append-only: rows are updated in place; the ledger stays the
record, this is an index of it.
"""

from __future__ import annotations

from datetime import date

from sqlalchemy import BigInteger, Date, String
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base

MONEY_COLUMNS = ("held", "charged", "true_ups", "released")


class MoneyDaily(Base):
    __tablename__ = "money_daily"

    day: Mapped[date] = mapped_column(Date, primary_key=True)
    account_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    model: Mapped[str] = mapped_column(String(200), primary_key=True)
    held: Mapped[int] = mapped_column(BigInteger, default=0)
    charged: Mapped[int] = mapped_column(BigInteger, default=0)
    true_ups: Mapped[int] = mapped_column(BigInteger, default=0)
    released: Mapped[int] = mapped_column(BigInteger, default=0)


# The call rollup's measures, in this order everywhere (``worker.ledger.rollup.call_measures``).
CALL_COLUMNS = (
    "calls",
    "streamed",
    "reserved",
    "charged",
    "costed_calls",
    "charged_costed",
    "provider_cost",
    "exposure",
)
# Its key besides (day, account, model); '' where the call has none (no usage record, no failure,
# no provider or shape, an open failure's action): a primary key column cannot be NULL.
CALL_STATE_KEY = ("status", "usage_source", "provider", "usage_shape", "reason", "action")


class CallsDaily(Base):
    """Calls per call day and state: every call counted in exactly one row, the one its reservation's
    status, its usage record (source, provider, shape) and its failure (reason, resolution) name.

    Kept like ``money_daily``, by the ledger's writers in the transaction that changes the call
    (``worker.ledger.rollup``): each change moves the call's measures from the row of its state
    before to the row of its state after. A row whose calls all moved on stays, at zero. The report's
    calls and providers sections read it for whole UTC days; ``billing report --verify-ledger``
    compares it with ``reservations ⟕ usage_records ⟕ failures``. Not append-only.

    Measures: ``calls``; ``streamed`` (of them); ``reserved`` (their holds); ``charged``,
    ``costed_calls``, ``charged_costed``, ``provider_cost`` (of their usage records: the charge, the
    calls whose provider sent a cost, our charge on those, and the provider's); ``exposure`` (their
    failures' exposure, whether resolved or not: the action is in the key)."""

    __tablename__ = "calls_daily"

    day: Mapped[date] = mapped_column(Date, primary_key=True)
    account_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    model: Mapped[str] = mapped_column(String(200), primary_key=True)
    status: Mapped[str] = mapped_column(String(32), primary_key=True)
    usage_source: Mapped[str] = mapped_column(String(16), primary_key=True)
    provider: Mapped[str] = mapped_column(String(64), primary_key=True)
    usage_shape: Mapped[str] = mapped_column(String(32), primary_key=True)
    reason: Mapped[str] = mapped_column(String(32), primary_key=True)
    action: Mapped[str] = mapped_column(String(32), primary_key=True)
    calls: Mapped[int] = mapped_column(BigInteger, default=0)
    streamed: Mapped[int] = mapped_column(BigInteger, default=0)
    reserved: Mapped[int] = mapped_column(BigInteger, default=0)
    charged: Mapped[int] = mapped_column(BigInteger, default=0)
    costed_calls: Mapped[int] = mapped_column(BigInteger, default=0)
    charged_costed: Mapped[int] = mapped_column(BigInteger, default=0)
    provider_cost: Mapped[int] = mapped_column(BigInteger, default=0)
    exposure: Mapped[int] = mapped_column(BigInteger, default=0)
