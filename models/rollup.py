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
