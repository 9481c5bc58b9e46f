"""The price book in the database: history, imported idempotently, read back as a ``PriceBook``.

A (pattern, effective_from) row is never changed: a new price is a new row with a later
``effective_from``, so every past charge can be recomputed from the prices that were in force.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from models import PriceRow
from worker.errors import LedgerError
from worker.prices import Price, PriceBook

prices_table = PriceRow.__table__


def _key(pattern: str, at: datetime) -> tuple[str, datetime]:
    return pattern, at.astimezone(UTC)


def list_prices(session: Session) -> list[Price]:
    rows = session.execute(
        select(
            prices_table.c.pattern,
            prices_table.c.effective_from,
            prices_table.c.input,
            prices_table.c.cached_input,
            prices_table.c.output,
        ).order_by(prices_table.c.pattern, prices_table.c.effective_from)
    ).all()
    return [Price(*row) for row in rows]


def import_prices(session: Session, prices: list[Price], *, now: datetime | None = None) -> int:
    """Insert the prices not yet present; returns how many were new.

    The same values again are a no-op; different values for an existing (pattern, effective_from)
    raise ``LedgerError`` and nothing is written (prices are history: add a later row instead).
    """
    now = now or datetime.now(UTC)
    existing = {_key(p.pattern, p.effective_from): p for p in list_prices(session)}
    new: dict[tuple[str, datetime], Price] = {}
    for price in prices:
        key = _key(price.pattern, price.effective_from)
        known = existing.get(key) or new.get(key)
        if known is None:
            new[key] = price
        elif (known.input, known.cached_input, known.output) != (
            price.input,
            price.cached_input,
            price.output,
        ):
            raise LedgerError(
                f"price of {price.pattern} from {key[1].isoformat()} is already "
                f"{known.input}/{known.cached_input}/{known.output}; prices are history, "
                "add a row with a later effective_from instead"
            )
    if new:
        session.execute(
            insert(prices_table),
            [
                {
                    "pattern": p.pattern,
                    "effective_from": p.effective_from,
                    "input": p.input,
                    "cached_input": p.cached_input,
                    "output": p.output,
                    "created_at": now,
                }
                for p in new.values()
            ],
        )
    return len(new)


def price_book(session: Session) -> PriceBook | None:
    """The book of every price in the database; None when the table is empty."""
    prices = list_prices(session)
    return PriceBook(prices) if prices else None
