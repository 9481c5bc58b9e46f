"""Where findings come from, in the database: one reader per alert kind.

Contract: every reader takes a ``Session`` and a half-open range [start, end), reads only, and
returns ``Finding``s whose ``at`` lies in the range (for drift, the last instant of the drift window
that ends in (start, end]); none commits. A new alert kind is one more reader in ``READERS`` — or
findings with a new ``kind`` from an existing one — and is paged, digested and resolved like the
others with no other change (``worker.alerts.paging``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import orjson
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models import (
    AlertEvent,
    AlertKind,
    Anomaly,
    CalibrationFactor,
    ParityPair,
    Reservation,
    UsageRecord,
    Verdict,
)
from worker.alerts.aggregation import median, span, window_start
from worker.alerts.config import AlertConfig
from worker.alerts.low_balance import low_balance_findings
from worker.alerts.picture import Finding, Rate
from worker.core.calibration import format_factor
from worker.core.calibration_drift import POOLED, Z
from worker.core.estimate import is_approximate
from worker.core.money import Micros
from worker.ledger.funds import levels_at

alert_events = AlertEvent.__table__
anomalies = Anomaly.__table__
reservations = Reservation.__table__
usage_records = UsageRecord.__table__
pairs = ParityPair.__table__
calibration_factors = CalibrationFactor.__table__

Reader = Callable[[Session, datetime, datetime, AlertConfig], list[Finding]]


def unsettled(session: Session, start: datetime, end: datetime, _: AlertConfig) -> list[Finding]:
    """One finding per unsettled call (its alert event), with its exposure."""
    rows = session.execute(
        select(
            alert_events.c.detected_at,
            reservations.c.request_id,
            alert_events.c.account_id,
            alert_events.c.model,
            alert_events.c.reason,
            alert_events.c.stream,
            alert_events.c.exposure_micros,
        )
        .select_from(
            alert_events.join(reservations, reservations.c.id == alert_events.c.reservation_id)
        )
        .where(alert_events.c.detected_at >= start, alert_events.c.detected_at < end)
    )
    return [
        Finding(
            str(AlertKind.UNSETTLED), row.reason, row.detected_at, row.account_id, row.model,
            row.request_id, row.exposure_micros, row.stream,
        )
        for row in rows
    ]  # fmt: skip


def anomaly(session: Session, start: datetime, end: datetime, _: AlertConfig) -> list[Finding]:
    """One finding per contract anomaly, its kind as the reason."""
    rows = session.execute(
        select(
            anomalies.c.detected_at,
            reservations.c.request_id,
            reservations.c.account_id,
            reservations.c.model,
            anomalies.c.kind,
        )
        .select_from(anomalies.join(reservations, reservations.c.id == anomalies.c.reservation_id))
        .where(anomalies.c.detected_at >= start, anomalies.c.detected_at < end)
    )
    return [
        Finding(
            str(AlertKind.ANOMALY), row.kind, row.detected_at, row.account_id, row.model,
            row.request_id,
        )
        for row in rows
    ]  # fmt: skip


def parity_mismatch(
    session: Session, start: datetime, end: datetime, _: AlertConfig
) -> list[Finding]:
    """One finding per mismatched pair paired in the range, with both request ids and charges."""
    streamed = reservations.alias("streamed")
    plain = reservations.alias("plain")
    rows = session.execute(
        select(
            pairs,
            streamed.c.request_id.label("streamed_request_id"),
            plain.c.request_id.label("plain_request_id"),
            streamed.c.account_id.label("streamed_account_id"),
            plain.c.account_id.label("plain_account_id"),
            streamed.c.model,
        )
        .select_from(
            pairs.join(streamed, streamed.c.id == pairs.c.streamed_reservation_id).join(
                plain, plain.c.id == pairs.c.plain_reservation_id
            )
        )
        .where(
            pairs.c.verdict == str(Verdict.MISMATCH),
            pairs.c.paired_at >= start,
            pairs.c.paired_at < end,
        )
    )
    found = []
    for row in rows:
        mismatched = row.mismatched or ""
        facts = {
            "pair_id": row.id,
            "streamed_request_id": row.streamed_request_id,
            "plain_request_id": row.plain_request_id,
            "account_ids": [row.streamed_account_id, row.plain_account_id],
            "mismatched": mismatched.split(",") if mismatched else [],
            "fingerprint_prefix": row.fingerprint[:12],
            **{
                f"{side}_{name}": getattr(row, f"{side}_{name}")
                for side in ("streamed", "plain")
                for name in ("prompt_tokens", "completion_tokens", "charge_micros")
            },
        }
        same = row.streamed_account_id == row.plain_account_id
        found.append(
            Finding(
                str(AlertKind.PARITY_MISMATCH),
                mismatched,
                row.paired_at,
                row.streamed_account_id if same else None,
                row.model,
                row.streamed_request_id,
                note=(
                    f"{row.model} ({mismatched}): streamed {row.streamed_request_id} vs"
                    f" non-streamed {row.plain_request_id} charged {row.streamed_charge_micros}"
                    f" vs {row.plain_charge_micros} micros"
                ),
                facts=facts,
            )
        )
    return found


def drift_medians(session: Session, start: datetime, end: datetime) -> dict[str, tuple[int, int]]:
    """Per model: (low median of ``drift_ppm``, samples) of streamed calls settled in the window."""
    where = (
        reservations.c.stream.is_(True),
        usage_records.c.drift_ppm.is_not(None),
        usage_records.c.created_at >= start,
        usage_records.c.created_at < end,
    )
    joined = usage_records.join(reservations, reservations.c.id == usage_records.c.reservation_id)
    if session.get_bind().dialect.name == "postgresql":
        rows = session.execute(
            select(
                reservations.c.model,
                func.percentile_disc(0.5).within_group(usage_records.c.drift_ppm),
                func.count(),
            )
            .select_from(joined)
            .where(*where)
            .group_by(reservations.c.model)
        ).all()
        return {model: (int(middle), count) for model, middle, count in rows}
    samples: dict[str, list[int]] = defaultdict(list)
    for model, drift in session.execute(
        select(reservations.c.model, usage_records.c.drift_ppm).select_from(joined).where(*where)
    ):
        samples[model].append(drift)
    return {model: (median(values), len(values)) for model, values in samples.items()}


def drift_past(
    medians: dict[str, tuple[int, int]],
    start: datetime,
    end: datetime,
    *,
    threshold_pct: int,
    min_samples: int,
) -> list[Finding]:
    """Per model of one drift window, from (median drift in ppm, samples): a finding when the median
    drift of reported vs estimated completion tokens is at or past ± ``threshold_pct`` %. Only for
    a model the worker tokenizes exactly: an approximate model's drift from the raw estimate is
    what its calibration learns and charges for, and its calibration's findings speak for it
    (``calibration``)."""
    found = []
    limit = threshold_pct * 10_000
    for model, (middle, samples) in sorted(medians.items()):
        if samples < max(1, min_samples) or abs(middle) < limit or is_approximate(model):
            continue
        sign = "-" if middle < 0 else "+"
        hundredths = abs(middle) // 100
        found.append(
            Finding(
                str(AlertKind.DRIFT),
                "median_drift",
                end - timedelta(microseconds=1),
                model=model,
                note=(
                    f"{model}: median completion-token drift {sign}{hundredths // 100}."
                    f"{hundredths % 100:02d}% (reported vs estimated, {samples} streams) in the"
                    f" {span(end - start)} from {start.isoformat()}, past the {threshold_pct}%"
                    " threshold"
                ),
                facts={
                    "model": model,
                    "median_drift_ppm": middle,
                    "samples": samples,
                    "threshold_pct": threshold_pct,
                    "drift_window_start": start.isoformat(),
                    "drift_window_end": end.isoformat(),
                },
            )
        )
    return found


def drift(session: Session, start: datetime, end: datetime, config: AlertConfig) -> list[Finding]:
    """Drift findings of every drift window that ends in (start, end]."""
    found: list[Finding] = []
    window = config.drift_window
    at = window_start(end, window)  # the last drift window end at or before ``end``
    while at > start:
        found += drift_past(
            drift_medians(session, at - window, at),
            at - window,
            at,
            threshold_pct=config.drift_alert_pct,
            min_samples=config.drift_min_samples,
        )
        at -= window
    return found


# Why a calibration version was written → its finding's reason; the causes not listed (``first``,
# ``refit``) are no news.
CALIBRATION_REASONS = {
    "tokenizer": "tokenizer_change",
    "mix": "mix_change",
    "too_few_calls": "too_few_calls",
}


def _percent(ppm: int) -> str:
    """A share in ppm as a percentage with two decimals, truncated: ``9_512`` is ``0.95%``."""
    return f"{ppm // 10_000}.{ppm % 10_000 // 100:02d}%"


def _calibration_note(row: Any, where: str, moves: list[dict[str, Any]]) -> str:
    shown = ", ".join(
        f"{m['direction']} {m['segment'] if m['segment'] != POOLED else 'pooled'}"
        f" {format_factor(m['before_ppm'])} -> {format_factor(m['after_ppm'])}"
        f" (moved past {_percent(m['threshold_ppm'])}, the larger of the reversion step and"
        f" {Z} standard errors; {m['after_samples']} calls)"
        for m in moves
    )
    if row.cause == "tokenizer":
        return (
            f"{where}: calibration v{row.version}: the provider's token counting changed: {shown};"
            " estimated calls are charged at the new factors"
        )
    if row.cause == "mix":
        return (
            f"{where}: calibration v{row.version}: the traffic's mix of segments changed, every"
            f" segment steady ({shown}); expected, nothing to do"
        )
    return (
        f"{where}: calibration v{row.version}: {row.prompt_samples} calls with reported usage,"
        " fewer than calibration needs: its estimates are charged uncalibrated (factor 1) until"
        " it has enough; reported once"
    )


def calibration(session: Session, start: datetime, end: datetime, _: AlertConfig) -> list[Finding]:
    """One drift finding per calibration version written in the range for a reason that is news
    (``CALIBRATION_REASONS``, ``worker.ledger.calibration``): a tokenizer change pages by itself, a
    mix change and a model under the minimum sample go to the digest. Each version is found once,
    at the instant it was written: a model stays reported once until its calibration changes."""
    f = calibration_factors.c
    rows = session.execute(
        select(calibration_factors).where(
            f.cause.in_(tuple(CALIBRATION_REASONS)), f.created_at >= start, f.created_at < end
        )
    )
    found = []
    for row in rows:
        where = f"{row.provider}/{row.model}" if row.provider else row.model
        moves = orjson.loads(row.moves) if row.moves else []
        factors = {
            name: {
                "factor_ppm": getattr(row, f"{name}_factor_ppm"),
                "samples": getattr(row, f"{name}_samples"),
            }
            for name in ("prompt", "completion")
        }
        found.append(
            Finding(
                str(AlertKind.DRIFT),
                CALIBRATION_REASONS[row.cause],
                row.created_at,
                model=row.model,
                note=_calibration_note(row, where, moves),
                facts={
                    "provider": row.provider,
                    "model": row.model,
                    "calibration_version": row.version,
                    "cause": row.cause,
                    "moves": moves,
                    **factors,
                },
                pages=row.cause == "tokenizer",
            )
        )
    return found


def low_balance(
    session: Session, start: datetime, end: datetime, config: AlertConfig
) -> list[Finding]:
    """Funded accounts whose balance got worse in a window of [start, end) (``low_balance``)."""
    count = (end - start) // config.window
    moments = [start + config.window * k for k in range(count + 1)]
    return low_balance_findings(
        levels_at(session, moments), moments, threshold=Micros(config.low_balance_micros)
    )


def upstream_leakage(
    session: Session, start: datetime, end: datetime, config: AlertConfig
) -> list[Finding]:
    """Days of a provider's export imported in [start, end) whose leakage passes a threshold."""
    from worker.alerts.upstream_leakage import (
        imported_leakage,  # the reconciliation, only when it runs
    )

    return imported_leakage(session, start, end, config)


READERS: tuple[Reader, ...] = (
    unsettled, anomaly, parity_mismatch, drift, calibration, low_balance, upstream_leakage,
)  # fmt: skip


def settled_streams(session: Session, start: datetime, end: datetime) -> int:
    return session.scalar(
        select(func.count())
        .select_from(
            usage_records.join(reservations, reservations.c.id == usage_records.c.reservation_id)
        )
        .where(
            reservations.c.stream.is_(True),
            usage_records.c.created_at >= start,
            usage_records.c.created_at < end,
        )
    )


def unsettled_rates(
    session: Session,
    windows: list[tuple[datetime, datetime]],
    findings: list[Finding],
    config: AlertConfig,
) -> dict[tuple[str, datetime], Rate]:
    """The unsettled share of streams per window that has unsettled streams: unsettled streams over
    every stream that finished in it (settled + unsettled)."""
    kind = str(AlertKind.UNSETTLED)
    counts: dict[datetime, int] = defaultdict(int)
    for finding in findings:
        if finding.kind == kind and finding.stream:
            counts[window_start(finding.at, config.window)] += 1
    rates: dict[tuple[str, datetime], Rate] = {}
    for start, end in windows:
        count = counts.get(start, 0)
        if count:
            rates[(kind, start)] = Rate(
                "streams unsettled",
                count,
                count + settled_streams(session, start, end),
                config.unsettled_rate_pct,
                config.rate_min_streams,
            )
    return rates


RateReader = Callable[
    [Session, list[tuple[datetime, datetime]], list[Finding], AlertConfig],
    dict[tuple[str, datetime], Rate],
]
RATES: tuple[RateReader, ...] = (unsettled_rates,)
