"""How imported rows join the book: added, never replacing history, never unpricing anything.

The effective book is the file rows (bundled list snapshot and TOML overrides) plus every row in the
database; a database row replaces a file row only when both have the same key (layer, model,
provider, tier, effective_from). An import adds rows: a model it does not mention keeps every row it
had, so an import can never make a priced model unpriced.

An import is refused, whole, when a row:
* has the key of a stored row with other values (prices are history: add a later row instead);
* starts (or ends) before ``now`` and no backdating reason is given: a row dated in the past would
  reprice calls that are already held; with a reason, the reason is stored with each such row;
* would make a name ambiguous (an alias that another model already uses);
* holds a price above ``MAX_PRICE`` (refused earlier, when the row is built).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from worker.core.errors import PriceBookError
from worker.core.prices.book import PriceBook
from worker.core.prices.price import Price

MAX_REASON = 500


def effective_rows(files: Iterable[Price], stored: Iterable[Price]) -> list[Price]:
    """The file rows, with any row of the same key replaced by the stored one, and the stored rows."""
    rows = {price.key: price for price in files}
    for price in stored:
        rows[price.key] = price
    return list(rows.values())


@dataclass(frozen=True)
class ImportPlan:
    new: list[Price]
    present: int
    backdated: int


def plan_import(
    files: list[Price],
    stored: list[Price],
    incoming: list[Price],
    *,
    now: datetime,
    backdate_reason: str | None = None,
) -> ImportPlan:
    """The rows to insert for ``incoming``; raises ``PriceBookError`` (nothing inserted) if refused."""
    if backdate_reason is not None:
        backdate_reason = backdate_reason.strip()
        if not backdate_reason or len(backdate_reason) > MAX_REASON:
            raise PriceBookError(f"a backdating reason must be 1-{MAX_REASON} characters")
    known = {price.key: price for price in stored}
    new: dict[tuple[object, ...], Price] = {}
    present = backdated = 0
    for price in incoming:
        same = known.get(price.key) or new.get(price.key)
        if same is not None:
            if same.values() != price.values():
                raise PriceBookError(
                    f"{_name(price)} from {price.effective_from.isoformat()} is already priced "
                    "otherwise; prices are history: add a row with a later effective_from instead"
                )
            present += 1
            continue
        starts_past = price.effective_from < now or (price.until is not None and price.until < now)
        if starts_past:
            if backdate_reason is None:
                raise PriceBookError(
                    f"{_name(price)} is dated {price.effective_from.isoformat()}, before now "
                    f"({now.isoformat()}): it would reprice calls already made; give a later "
                    "effective_from, or --backdate --reason TEXT"
                )
            price = dataclasses.replace(price, reason=backdate_reason)
            backdated += 1
        new[price.key] = price
    conflicts = PriceBook(effective_rows(files, [*stored, *new.values()])).name_conflicts()
    before = set(PriceBook(effective_rows(files, stored)).name_conflicts())
    added = [conflict for conflict in conflicts if conflict not in before]
    if added:
        raise PriceBookError(f"ambiguous name: {added[0]}")
    return ImportPlan(list(new.values()), present, backdated)


def _name(price: Price) -> str:
    where = f"provider {price.provider}" if price.provider else "any provider"
    return f"{price.layer} price of {price.model} ({where}, tier {price.tier})"
