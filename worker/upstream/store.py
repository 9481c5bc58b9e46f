"""Importing exports into ``upstream_usage`` / ``upstream_costs``: idempotent, one bucket at a time.

The unit is the **bucket**: a provider's usage (or costs) over one time bucket, as one export
groups it. For each bucket of a file (``models.upstream.USAGE_KEY`` / ``COST_KEY`` identify its
rows):

* no row of that provider and kind is stored for the bucket's time: its rows are inserted
  (``added``);
* rows of **another bucket width** overlap it (a daily export over an hourly one's hours): the
  file is refused (``ExportError``). Summing them would count the usage twice, and replacing a
  day by one of its hours would lose the rest;
* rows of the same bucket are stored: the file's bucket **replaces** them, row by row: the same
  figures write nothing (``unchanged``: importing a period again changes nothing), other figures
  are updated (``replaced``), rows the file does not have are deleted (``removed``: the file groups
  the bucket otherwise: by model and key where the stored one was by model alone...). Every
  replaced or removed row's figures go to ``upstream_revisions``. The providers' buckets are not
  final while they fill in (today's grows all day): a later download replaces an earlier one;
* **unless it is older**: a bucket whose totals (requests, tokens of each kind; or cost) are each
  at most the stored one's and one is lower is an earlier download of a bucket still filling in.
  It is skipped (``stale``), so importing an old file after a new one never moves the figures
  back. (A provider's correction downwards is therefore not taken from a file; docs/reports.md.)

A file's ``has_more`` page without its next page records a gap (``upstream_gaps``); an import
holding a bucket of that provider and kind (or an empty bucket, whose kind an OpenAI page does not
say) starting at or after the gap closes it. The caller owns the transaction (one per command: all
files or nothing).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import and_, delete, insert, select, update
from sqlalchemy.orm import Session

from models import UpstreamCost, UpstreamGap, UpstreamRevision, UpstreamUsage
from models.upstream import COST_KEY, USAGE_FIGURES, USAGE_KEY
from worker.upstream.exports import CostRow, Export, ExportError, UsageRow

COST_FIGURES = ("model", "amount", "amount_micros")


@dataclass
class ImportStats:
    added: int = 0
    unchanged: int = 0
    replaced: int = 0
    removed: int = 0
    stale: int = 0  # rows of buckets skipped as an older download than the one stored
    rounded: int = 0  # cost rows whose amount was not a whole number of micro-USD
    gaps: int = 0  # pages that said has_more without their next page

    def __str__(self) -> str:
        text = (
            f"{self.added} added, {self.unchanged} unchanged, {self.replaced} replaced, "
            f"{self.removed} removed (kept in upstream_revisions), {self.stale} skipped as older "
            f"than the figures stored, {self.rounded} cost rows rounded half-even to micro-USD"
        )
        if self.gaps:
            text += f"; INCOMPLETE: {self.gaps} pages said has_more without their next page"
        return text


@dataclass(frozen=True, slots=True)
class _Kind:
    name: str  # 'usage' or 'cost'
    table: Any
    key: tuple[str, ...]
    figures: tuple[str, ...]


USAGE = _Kind("usage", UpstreamUsage.__table__, USAGE_KEY, USAGE_FIGURES)
COST = _Kind("cost", UpstreamCost.__table__, COST_KEY, COST_FIGURES)


def _json(values: dict[str, Any]) -> str:
    return orjson.dumps(values, default=str).decode()


def _totals(kind: _Kind, rows: Any) -> tuple[int, ...]:
    if kind is COST:
        return (sum(r.amount_micros for r in rows),)
    return tuple(
        sum(getattr(r, name) or 0 for r in rows) for name in USAGE_FIGURES
    )  # requests None (Anthropic) sums as 0 on both sides


def _older(new: tuple[int, ...], old: tuple[int, ...]) -> bool:
    return all(n <= o for n, o in zip(new, old, strict=True)) and new != old


def _revision(
    session: Session, kind: _Kind, row_id: int, before: dict[str, Any], after: dict[str, Any],
    source: str, now: datetime,
) -> None:  # fmt: skip
    session.execute(
        insert(UpstreamRevision.__table__).values(
            kind=kind.name, row_id=row_id, before=_json(before), after=_json(after),
            source=source, revised_at=now,
        )
    )  # fmt: skip


def _bucket(
    session: Session,
    kind: _Kind,
    provider: str,
    start: datetime,
    end: datetime,
    rows: list[UsageRow] | list[CostRow],
    source: str,
    now: datetime,
    stats: ImportStats,
) -> None:
    t = kind.table
    stored = session.execute(
        select(t.c.id, t.c.bucket_start, t.c.bucket_end, t.c.source, *(t.c[n] for n in kind.key),
               *(t.c[n] for n in kind.figures if n not in kind.key))
        .where(t.c.provider == provider, t.c.bucket_start < end, t.c.bucket_end > start)
    ).all()  # fmt: skip
    other = next((r for r in stored if (r.bucket_start, r.bucket_end) != (start, end)), None)
    if other is not None:
        raise ExportError(
            f"{source}: the {kind.name} bucket {start.isoformat()} to {end.isoformat()} overlaps "
            f"the bucket {other.bucket_start.isoformat()} to {other.bucket_end.isoformat()} "
            f"imported from {other.source}: buckets of two widths are never summed; import "
            "this period at the width already stored"
        )
    if stored and _older(_totals(kind, rows), _totals(kind, stored)):
        stats.stale += len(rows)
        return
    old = {tuple(getattr(r, n) for n in kind.key): r for r in stored}
    for row in rows:
        key = tuple(getattr(row, n) for n in kind.key)
        new = {name: getattr(row, name) for name in kind.figures}
        found = old.pop(key, None)
        if found is None:
            values = {**dict(zip(kind.key, key, strict=True)), **new}
            session.execute(
                insert(t).values(**values, bucket_end=end, source=source, imported_at=now)
            )
            stats.added += 1
            continue
        before = {name: getattr(found, name) for name in kind.figures}
        if before == new:
            stats.unchanged += 1
            continue
        session.execute(
            update(t).where(t.c.id == found.id).values(**new, source=source, imported_at=now)
        )
        _revision(session, kind, found.id, before, new, source, now)
        stats.replaced += 1
    for gone in old.values():
        before = {name: getattr(gone, name) for name in kind.figures}
        session.execute(delete(t).where(t.c.id == gone.id))
        _revision(session, kind, gone.id, before, {}, source, now)
        stats.removed += 1


def _gaps(session: Session, export: Export, source: str, now: datetime, stats: ImportStats) -> None:
    g = UpstreamGap.__table__
    providers = {r.provider for r in (*export.usage, *export.costs)} | {
        gap.provider for gap in export.gaps
    }
    for provider in providers:
        for kind in ("usage", "cost"):
            starts = [start for k, start in export.buckets if k in (kind, "")]
            if starts:
                session.execute(
                    update(g)
                    .where(g.c.provider == provider, g.c.kind == kind, g.c.closed_at.is_(None),
                           g.c.after <= max(starts))
                    .values(closed_at=now)
                )  # fmt: skip
    for gap in export.gaps:
        stats.gaps += 1
        where = and_(g.c.provider == gap.provider, g.c.kind == gap.kind, g.c.after == gap.after,
                     g.c.closed_at.is_(None))  # fmt: skip
        if session.execute(select(g.c.id).where(where)).first() is None:
            session.execute(
                insert(g).values(
                    provider=gap.provider, kind=gap.kind, after=gap.after,
                    source=f"{source} {gap.path}", recorded_at=now,
                )
            )  # fmt: skip


def _unique(rows: tuple[Any, ...], kind: _Kind, source: str) -> list[Any]:
    """The rows once each; one key twice with other figures is not an export (the reader sums a
    bucket's parts, so only rows built otherwise can hold it)."""
    seen: dict[tuple[object, ...], Any] = {}
    for row in rows:
        other = seen.setdefault(row.key, row)
        if other != row:
            named = ", ".join(f"{n}={getattr(row, n)}" for n in kind.key if n != "provider")
            raise ExportError(
                f"{source}: a {kind.name} row appears twice with other figures: {named}"
            )
    return list(seen.values())


def import_export(
    session: Session, export: Export, source: str, now: datetime, stats: ImportStats | None = None
) -> ImportStats:
    """Write one file's buckets (see the module docstring); returns the running ``stats``."""
    stats = stats or ImportStats()
    for kind, rows in ((USAGE, export.usage), (COST, export.costs)):
        buckets: dict[tuple[str, datetime, datetime], list[Any]] = defaultdict(list)
        for row in _unique(rows, kind, source):
            buckets[(row.provider, row.bucket_start, row.bucket_end)].append(row)
        for (provider, start, end), bucket in sorted(buckets.items()):
            _bucket(session, kind, provider, start, end, bucket, source, now, stats)
        if kind is COST:
            stats.rounded += sum(row.rounded for row in rows)
    _gaps(session, export, source, now, stats)
    return stats
