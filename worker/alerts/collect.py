"""The aggregation step: read the findings of the windows to decide, turn them into messages, queue
them in the outbox. Runs in the caller's transaction and never commits; idempotent (dedupe keys)."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from sqlalchemy.orm import Session

from models.alerts import AlertKind
from worker.alerts.aggregation import closed_windows, window_start
from worker.alerts.config import AlertConfig
from worker.alerts.outbox import enqueue
from worker.alerts.paging import Plan, messages
from worker.alerts.picture import Finding
from worker.alerts.sources import RATES, READERS, drift_medians
from worker.ledger.alert_events import backfill_unsettled_events


def plan(config: AlertConfig, now: datetime) -> Plan:
    """Pages and resolved notices for the last ``lookback_windows`` closed windows, digests for the
    last two closed digest windows; read back far enough to know whether the window before the
    first one paged, and every window of both digests."""
    emit = closed_windows(now, config.window, config.settle_slack, config.lookback_windows)
    digests = closed_windows(now, config.digest_window, config.settle_slack, 2)
    first = min(emit[0][0] - config.window, digests[0][0])
    last = emit[-1][1]
    count = (last - first) // config.window
    windows = [(first + config.window * k, first + config.window * (k + 1)) for k in range(count)]
    return Plan(
        config.window,
        windows,
        emit,
        digests,
        exposure_limit_micros=config.exposure_page_micros or None,
        shown=config.request_ids_shown,
    )


def collect(session: Session, config: AlertConfig, now: datetime) -> int:
    """Aggregate the closed windows into outbox rows; returns how many are new."""
    chosen = plan(config, now)
    first, last = chosen.windows[0][0], chosen.windows[-1][1]
    backfill_unsettled_events(session, first)
    findings: list[Finding] = []
    for read in READERS:
        findings += read(session, first, last, config)
    rates = {}
    for rate in RATES:
        rates.update(rate(session, chosen.windows, findings, config))
    _record_metrics(session, config, now, chosen, findings)
    return enqueue(session, messages(chosen, findings, rates), now)


def _record_metrics(
    session: Session, config: AlertConfig, now: datetime, chosen: Plan, findings: list[Finding]
) -> None:
    """The gauges of the last closed window: exposure per kind (0 for a kind with no findings in
    it), and the drift medians of the last closed drift window for every model with samples."""
    from worker import metrics  # imported here: the exporter process must not create its files

    last = chosen.emit[-1][0]
    exposure: Counter[str] = Counter(dict.fromkeys((f.kind for f in findings), 0))
    exposure.setdefault("unsettled", 0)
    for finding in findings:
        if window_start(finding.at, config.window) == last:
            exposure[finding.kind] += finding.exposure_micros or 0
    # Contract anomalies of the last window by kind: charge_above_hold counts the true-ups.
    anomalies = Counter(
        f.reason
        for f in findings
        if f.kind == AlertKind.ANOMALY and window_start(f.at, config.window) == last
    )
    [(start, end)] = closed_windows(now, config.drift_window, config.settle_slack, 1)
    drift = {model: middle for model, (middle, _) in drift_medians(session, start, end).items()}
    metrics.record_alert_window(dict(exposure), drift, dict(anomalies))
