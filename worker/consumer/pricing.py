"""Where the worker gets its prices: the file rows plus the database's, refreshed now and then.

The effective book is the bundled list snapshot, the TOML overrides (``BILLING_PRICE_BOOK``, else the
bundled ``prices.toml``) and every row imported into the ``prices`` table (``billing prices
import``), merged by ``worker.core.prices.merge``: an import adds to the book, it never hides the file rows
of models it does not mention. Re-read every ``refresh_seconds``, so an imported price takes effect
without a restart.
Each read is a transaction of its own: give it read-only sessions (``session_factory(engine,
readonly=True)``) so the read never waits for a writer on SQLite.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from models import PriceRow
from worker.core.calibration import CalibrationTable
from worker.core.prices import Layer, Price, PriceBook
from worker.core.prices.bundled import file_prices
from worker.core.prices.merge import ImportPlan, effective_rows, plan_import
from worker.core.prices.price import (
    bands_from_json,
    bands_to_json,
    dimensions_from_json,
    dimensions_to_json,
)
from worker.ledger.calibration import current as current_calibration

prices_table = PriceRow.__table__


def _price(row: PriceRow) -> Price:
    return Price(
        model=row.model,
        effective_from=row.effective_from,
        input=row.input,
        cached_input=row.cached_input,
        output=row.output,
        cache_write=row.cache_write,
        reasoning=row.reasoning,
        audio_input=row.audio_input,
        audio_output=row.audio_output,
        tier=row.tier,
        provider=row.provider or None,
        layer=Layer(row.layer),
        aliases=tuple(a for a in row.aliases.split("\n") if a),
        snapshots=row.snapshots,
        until=row.until,
        max_input_tokens=row.max_input_tokens,
        max_output_tokens=row.max_output_tokens,
        prompt_limit=row.prompt_limit,
        bands=bands_from_json(row.bands, f"stored price {row.id} of {row.model}: bands"),
        **dimensions_from_json(row.dimensions, f"stored price {row.id} of {row.model}: dimensions"),
        source=row.source,
        reason=row.reason,
    )


def stored_prices(session: Session) -> list[Price]:
    """Every row of the ``prices`` table, as book rows (not the ``retired`` prefix rows that
    revision 0009 kept as history)."""
    rows = session.scalars(
        select(PriceRow)
        .where(PriceRow.layer.in_([layer.value for layer in Layer]))
        .order_by(
            PriceRow.model,
            PriceRow.layer,
            PriceRow.provider,
            PriceRow.tier,
            PriceRow.effective_from,
        )
    ).all()
    return [_price(row) for row in rows]


def import_prices(
    session: Session,
    prices: list[Price],
    *,
    files: list[Price] | None = None,
    now: datetime | None = None,
    backdate_reason: str | None = None,
) -> ImportPlan:
    """Insert the rows of ``prices`` not yet stored (``worker.core.prices.merge`` says what is refused:
    then ``PriceBookError`` and nothing is written). ``files`` are the file rows the book merges with
    (default: the bundled ones), for the ambiguity check."""
    now = now or datetime.now(UTC)
    plan = plan_import(
        file_prices() if files is None else files,
        stored_prices(session),
        prices,
        now=now,
        backdate_reason=backdate_reason,
    )
    if plan.new:
        session.execute(
            insert(prices_table),
            [
                {
                    "layer": p.layer.value,
                    "model": p.model,
                    "provider": p.provider or "",
                    "tier": p.tier,
                    "effective_from": p.effective_from,
                    "until": p.until,
                    "input": p.input,
                    "cached_input": p.cached_input,
                    "cache_write": p.cache_write,
                    "output": p.output,
                    "reasoning": p.reasoning,
                    "audio_input": p.audio_input,
                    "audio_output": p.audio_output,
                    "aliases": "\n".join(p.aliases),
                    "snapshots": p.snapshots,
                    "max_input_tokens": p.max_input_tokens,
                    "max_output_tokens": p.max_output_tokens,
                    "prompt_limit": p.prompt_limit,
                    "bands": bands_to_json(p.bands),
                    "dimensions": dimensions_to_json(p),
                    "source": p.source,
                    "reason": p.reason,
                    "created_at": now,
                }
                for p in plan.new
            ],
        )
    return plan


def effective_book(session: Session, fallback_path: str | None = None) -> PriceBook:
    """The book the worker prices with: the file rows of ``fallback_path`` and the stored rows."""
    return PriceBook(effective_rows(file_prices(fallback_path), stored_prices(session)))


class PriceSource:
    """The current effective book for the worker, carrying the current calibration factors
    (``worker.ledger.calibration.current``); rebuilt (and its name cache emptied) only when the
    stored rows, the override file or the factors changed since the last read."""

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
        self._rows: tuple[list[Price], list[Price], CalibrationTable] | None = None
        self._loaded_at = 0.0

    def current(self) -> PriceBook:
        now = time.monotonic()
        if self._book is None or now - self._loaded_at > self._refresh:
            with self._sessions() as session:
                rows = (
                    file_prices(self._fallback_path),
                    stored_prices(session),
                    current_calibration(session),
                )
            if self._book is None or rows != self._rows:
                self._book = PriceBook(effective_rows(rows[0], rows[1]), rows[2])
                self._rows = rows
            self._loaded_at = now
        return self._book
