"""Where the worker gets its prices: the database's price book, refreshed now and then.

Order: the database table (``billing prices import``) when it has rows, else the file named by
``BILLING_PRICE_BOOK``, else the bundled default. Re-read every ``refresh_seconds`` so an imported
price takes effect without a restart, each time in a transaction of its own: give it read-only
sessions (``session_factory(engine, readonly=True)``) so the read never waits for a writer on SQLite.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy.orm import Session

from worker.ledger.pricebook import price_book
from worker.prices import PriceBook, load_price_book


class PriceSource:
    def __init__(
        self,
        sessions: Callable[[], Session],
        fallback_path: str | None = None,
        refresh_seconds: float = 60.0,
    ) -> None:
        self._sessions = sessions
        self._fallback_path = fallback_path
        self._refresh = refresh_seconds
        self._book: PriceBook | None = None
        self._loaded_at = 0.0

    def current(self) -> PriceBook:
        now = time.monotonic()
        if self._book is None or now - self._loaded_at > self._refresh:
            with self._sessions() as session:
                book = price_book(session)
            self._book = book or load_price_book(self._fallback_path)
            self._loaded_at = now
        return self._book
