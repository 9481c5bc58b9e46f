"""Importing exports into ``upstream_usage`` / ``upstream_costs``: idempotent per natural key.

A bucket row is identified by its natural key (``models.upstream.USAGE_KEY`` / ``COST_KEY``):

* not there yet: inserted (``added``);
* there with the same figures: nothing is written (``unchanged``), so importing a period again
  changes nothing;
* there with other figures: **replaced**, and the figures it had and has now are written to
  ``upstream_revisions`` (``replaced``). The providers' exports are not final while a bucket is
  still filling in (today's bucket grows all day, and late-reported usage lands in earlier ones):
  refusing would make an export of the current period impossible to import twice, and keeping
  both would count the usage twice. The audit rows keep what was reported before.

One file with the same key twice and different figures is refused (``ExportError``): it is not an
export as a provider writes one. The caller owns the transaction (one per command: all files or
nothing).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import and_, insert, select, update
from sqlalchemy.orm import Session

from models import UpstreamCost, UpstreamRevision, UpstreamUsage
from models.upstream import COST_KEY, USAGE_FIGURES, USAGE_KEY
from worker.upstream.exports import CostRow, Export, ExportError, UsageRow

COST_FIGURES = ("bucket_end", "model", "amount", "amount_micros")


@dataclass
class ImportStats:
    added: int = 0
    unchanged: int = 0
    replaced: int = 0
    rounded: int = 0  # cost rows whose amount was not a whole number of micro-USD

    def __str__(self) -> str:
        return (
            f"{self.added} added, {self.unchanged} unchanged, {self.replaced} replaced "
            f"(kept in upstream_revisions), {self.rounded} cost rows rounded half-even to micro-USD"
        )


def _unique(rows: tuple[Any, ...], source: str) -> list[Any]:
    seen: dict[tuple[object, ...], Any] = {}
    for row in rows:
        other = seen.setdefault(row.key, row)
        if other != row:
            raise ExportError(
                f"{source}: the bucket row {row.key!r} appears twice with other figures"
            )
    return list(seen.values())


def _figures(row: Any, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(row, name) for name in names}


def _json(values: dict[str, Any]) -> str:
    return orjson.dumps(values, default=str).decode()


def _upsert(
    session: Session,
    table: Any,
    kind: str,
    row: UsageRow | CostRow,
    key: tuple[str, ...],
    figures: tuple[str, ...],
    source: str,
    now: datetime,
    stats: ImportStats,
) -> None:
    where = and_(*(table.c[name] == getattr(row, name) for name in key))
    found = session.execute(select(table.c.id, *(table.c[n] for n in figures)).where(where)).first()
    new = _figures(row, figures)
    if found is None:
        values = {**_figures(row, key), **new, "source": source, "imported_at": now}
        if kind == "usage":
            values["bucket_end"] = row.bucket_end
        session.execute(insert(table).values(**values))
        stats.added += 1
        return
    old = {name: getattr(found, name) for name in figures}
    if old == new:
        stats.unchanged += 1
        return
    session.execute(
        update(table).where(table.c.id == found.id).values(**new, source=source, imported_at=now)
    )
    session.execute(
        insert(UpstreamRevision.__table__).values(
            kind=kind, row_id=found.id, before=_json(old), after=_json(new), source=source,
            revised_at=now,
        )
    )  # fmt: skip
    stats.replaced += 1


def import_export(
    session: Session, export: Export, source: str, now: datetime, stats: ImportStats | None = None
) -> ImportStats:
    """Write one file's rows (see the module docstring); returns the running ``stats``."""
    stats = stats or ImportStats()
    usage = UpstreamUsage.__table__
    for row in _unique(export.usage, source):
        _upsert(session, usage, "usage", row, USAGE_KEY, USAGE_FIGURES, source, now, stats)
    costs = UpstreamCost.__table__
    for row in _unique(export.costs, source):
        _upsert(session, costs, "cost", row, COST_KEY, COST_FIGURES, source, now, stats)
        stats.rounded += row.rounded
    return stats
