"""The ``upstream_leakage`` alert: a day on which a provider's export shows usage the ledger has no
call for, past a threshold.

Raised after an import (``billing upstream import``), for each (UTC day, provider) the import
touched, through the outbox like every other kind (``worker.alerts.outbox.enqueue``): one alert per
day and provider, its dedupe key the kind, the provider and the day, so importing the same period
again queues nothing new. Thresholds (``Settings``): the day's leaked usage priced at our prices
reaches ``upstream_leak_micros``, or its leaked tokens reach ``upstream_leak_pct`` percent of the
day's upstream tokens; 0 turns that test off.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from models import AlertKind
from worker.alerts.aggregation import Alert
from worker.money import Micros
from worker.upstream.matching import Reconciliation, daily_leak


def leakage_alerts(
    found: Reconciliation,
    days: set[tuple[str, str]],
    *,
    min_micros: int,
    min_pct: int,
) -> list[Alert]:
    """Alerts for the (day ISO, provider) pairs of ``days`` whose leakage passes a threshold."""
    alerts = []
    for (day, provider), (leaked, upstream, cost, requests) in sorted(
        daily_leak(found.rows).items()
    ):
        if (day, provider) not in days or leaked == 0:
            continue
        by_money = min_micros > 0 and cost >= min_micros
        by_share = min_pct > 0 and upstream > 0 and leaked * 100 >= min_pct * upstream
        if not (by_money or by_share):
            continue
        start = datetime.combine(date.fromisoformat(day), datetime.min.time(), UTC)
        share = leaked / upstream if upstream else 1.0
        text = (
            f"upstream leakage on {day}: {provider} counted {leaked:,} tokens"
            f" ({share:.2%} of {upstream:,}) and {requests:,} requests with no call in the ledger,"
            f" {Micros(cost).usd()} USD at our prices"
        )
        alerts.append(
            Alert(
                AlertKind.UPSTREAM_LEAKAGE,
                None,
                None,
                provider,
                start,
                start + timedelta(days=1),
                text,
                {
                    "provider": provider,
                    "day": day,
                    "leaked_tokens": leaked,
                    "upstream_tokens": upstream,
                    "leaked_requests": requests,
                    "leak_cost_micros": cost,
                },
                subject=provider,
            )
        )
    return alerts
