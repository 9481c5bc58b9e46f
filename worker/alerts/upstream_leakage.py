"""The ``upstream_leakage`` alert: a day on which a provider's export shows usage the ledger has no
call for, past a threshold — as findings, paged, digested and resolved like every kind's
(``worker.alerts.sources.upstream_leakage`` reads them; ``worker.alerts.paging``). The price book
comes from ``worker.consumer.pricing`` (the prices table over the file rows), imported when the
reader runs.

A finding is one (UTC day, provider) of an export imported in the alert window: its ``at`` is the
import's time (the latest ``imported_at`` of that day's rows: the moment the leak became known), its
reason the provider, its exposure the leaked tokens priced at our prices. Thresholds
(``Settings``): that price reaches ``upstream_leak_micros``, or the leaked tokens reach
``upstream_leak_pct`` percent of the day's upstream tokens; 0 turns that test off. Importing the
same period again writes nothing new (unchanged rows keep their ``imported_at``), so it finds
nothing new; a replaced row is news, and is found again in the window of its import.

Cost: one indexed range read of ``upstream_usage.imported_at`` per alert run; the reconciliation
of the imported days only when an import lies in the lookback (the hour after it, by default).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models import AlertKind, UpstreamUsage
from worker.alerts.config import AlertConfig
from worker.alerts.picture import Finding
from worker.core.money import Micros
from worker.upstream.matching import Reconciliation, daily_leak


def leakage_findings(
    found: Reconciliation,
    imported: Mapping[tuple[str, str], datetime],
    *,
    min_micros: int,
    min_pct: int,
) -> list[Finding]:
    """Findings for the (day ISO, provider) pairs of ``imported`` (their import time) whose
    leakage passes a threshold. Pure."""
    findings = []
    for (day, provider), (leaked, upstream, cost, requests) in sorted(
        daily_leak(found.rows).items()
    ):
        at = imported.get((day, provider))
        if at is None or leaked == 0:
            continue
        by_money = min_micros > 0 and cost >= min_micros
        by_share = min_pct > 0 and upstream > 0 and leaked * 100 >= min_pct * upstream
        if not (by_money or by_share):
            continue
        share = leaked / upstream if upstream else 1.0
        findings.append(
            Finding(
                kind=str(AlertKind.UPSTREAM_LEAKAGE),
                reason=provider,
                at=at,
                exposure_micros=cost,
                note=(
                    f"{day}: {provider} counted {leaked:,} tokens ({share:.2%} of {upstream:,}) and"
                    f" {requests:,} requests with no call in the ledger, {Micros(cost).usd()} USD"
                    " at our prices"
                ),
                facts={
                    "day": day,
                    "provider": provider,
                    "leaked_tokens": leaked,
                    "upstream_tokens": upstream,
                    "leaked_requests": requests,
                    "leak_cost_micros": cost,
                },
            )
        )
    return findings


def imported_leakage(
    session: Session, start: datetime, end: datetime, config: AlertConfig
) -> list[Finding]:
    """The findings of the exports imported in [start, end) (read-only)."""
    from worker.consumer.pricing import effective_book
    from worker.upstream.query import reconciliation

    u = UpstreamUsage.__table__
    rows = session.execute(
        select(u.c.provider, u.c.bucket_start, func.max(u.c.imported_at).label("at"))
        .where(u.c.imported_at >= start, u.c.imported_at < end)
        .group_by(u.c.provider, u.c.bucket_start)
    ).all()
    if not rows:
        return []
    imported: dict[tuple[str, str], datetime] = {}
    for row in rows:
        key = (row.bucket_start.date().isoformat(), row.provider)
        imported[key] = max(imported.get(key, row.at), row.at)
    days = sorted(date.fromisoformat(day) for day, _ in imported)
    since = datetime.combine(days[0], datetime.min.time(), UTC)
    until = datetime.combine(days[-1], datetime.min.time(), UTC) + timedelta(days=1)
    book = effective_book(session, config.price_book)
    found = reconciliation(session.connection(), since, until, book)
    return leakage_findings(
        found, imported, min_micros=config.upstream_leak_micros, min_pct=config.upstream_leak_pct
    )
