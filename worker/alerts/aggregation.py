"""Aggregation (pure): alert events and samples of one window → alert messages.

Windows are tumbling and aligned to the epoch (``window_start``), so every process computes the same
window for the same instant and the outbox's dedupe key — (kind, account, model, reason, window start)
— names one message however many times the job runs. Texts are one Slack-compatible line; the same
facts go in structured fields next to it.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from statistics import median_low
from typing import Any

from models.alerts import AlertKind
from worker.money import Micros
from worker.terminal import printable

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def window_start(at: datetime, window: timedelta) -> datetime:
    """The start of the aligned window holding ``at``."""
    seconds = int(window.total_seconds())
    elapsed = int((at - EPOCH).total_seconds())
    return EPOCH + timedelta(seconds=elapsed - elapsed % seconds)


def closed_windows(
    now: datetime, window: timedelta, slack: timedelta, lookback: int
) -> list[tuple[datetime, datetime]]:
    """The last ``lookback`` windows that ended at least ``slack`` ago, oldest first."""
    last_end = window_start(now - slack, window)
    return [(last_end - window * k, last_end - window * (k - 1)) for k in range(lookback, 0, -1)]


def span(window: timedelta) -> str:
    seconds = int(window.total_seconds())
    if seconds % 3600 == 0:
        hours = seconds // 3600
        return "hour" if hours == 1 else f"{hours} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


def webhook_text(text: str) -> str:
    """``text`` for a chat webhook: controls escaped (``worker.terminal``), and ``&``, ``<``, ``>``
    written as entities, Slack's rule, so an account or model name holding ``<!channel>`` or
    ``<https://x|click>`` shows as typed instead of pinging everyone or hiding a link."""
    return printable(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {nouns or noun + 's'}"


@dataclass(frozen=True, slots=True)
class Alert:
    """One message for the outbox. ``subject`` tells apart alerts sharing kind and window (a
    parity pair's id); ``fields`` are the structured facts sent next to ``text``."""

    kind: AlertKind
    account_id: str | None
    model: str | None
    reason: str | None
    window_start: datetime
    window_end: datetime
    text: str
    fields: dict[str, Any] = field(default_factory=dict)
    subject: str = ""

    @property
    def dedupe_key(self) -> str:
        parts = (
            str(self.kind),
            self.account_id or "",
            self.model or "",
            self.reason or "",
            self.window_start.astimezone(UTC).isoformat(),
            self.subject,
        )
        return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()

    def payload(self) -> dict[str, Any]:
        """The webhook body: ``text`` for Slack and friends (``webhook_text``), the same facts as
        fields for machines (raw: JSON carries them intact)."""
        return {
            "text": webhook_text(self.text),
            "kind": str(self.kind),
            "account_id": self.account_id,
            "model": self.model,
            "reason": self.reason,
            "window_start": self.window_start.isoformat(),
            "window_end": self.window_end.isoformat(),
            **self.fields,
        }


@dataclass(frozen=True, slots=True)
class UnsettledEvent:
    request_id: str
    account_id: str
    model: str
    reason: str
    stream: bool
    exposure_micros: int | None


def _ids(request_ids: Sequence[str], shown: int) -> list[str]:
    return sorted(request_ids)[:shown]


def unsettled_alerts(
    events: Iterable[UnsettledEvent], start: datetime, end: datetime, *, shown: int = 10
) -> list[Alert]:
    """One alert per (account, model, reason): "12 streams unsettled (error_finish) for acct_7 on
    gpt-4o in the last 5 min, exposure $0.412000"."""
    groups: dict[tuple[str, str, str], list[UnsettledEvent]] = defaultdict(list)
    for event in events:
        groups[(event.account_id, event.model, event.reason)].append(event)
    alerts = []
    for (account, model, reason), group in sorted(groups.items()):
        noun = "stream" if all(event.stream for event in group) else "call"
        exposure = Micros(sum(event.exposure_micros or 0 for event in group))
        unpriced = sum(1 for event in group if event.exposure_micros is None)
        text = (
            f"{plural(len(group), noun)} unsettled ({reason}) for {account} on {model}"
            f" in the last {span(end - start)}, exposure ${exposure.usd()}"
        )
        if unpriced:
            text += f" (+{unpriced} unpriced)"
        alerts.append(
            Alert(
                AlertKind.UNSETTLED,
                account,
                model,
                reason,
                start,
                end,
                text,
                {
                    "count": len(group),
                    "exposure_micros": int(exposure),
                    "unpriced": unpriced,
                    "request_ids": _ids([event.request_id for event in group], shown),
                },
            )
        )
    return alerts


def rate_alert(
    unsettled: int,
    streams: int,
    start: datetime,
    end: datetime,
    *,
    threshold_pct: int,
    min_streams: int,
) -> Alert | None:
    """An alert when unsettled streams are at least ``threshold_pct`` % of the window's streams."""
    if streams < max(1, min_streams) or unsettled * 100 < threshold_pct * streams:
        return None
    tenths = unsettled * 1000 // streams
    text = (
        f"{tenths // 10}.{tenths % 10}% of streams unsettled in the last {span(end - start)}"
        f" ({unsettled} of {streams}), above the {threshold_pct}% threshold"
    )
    return Alert(
        AlertKind.UNSETTLED_RATE,
        None,
        None,
        "rate",
        start,
        end,
        text,
        {"unsettled": unsettled, "streams": streams, "threshold_pct": threshold_pct},
    )


def median(values: Sequence[int]) -> int:
    """The low median of integers (PostgreSQL's ``percentile_disc(0.5)``): no float decides."""
    return median_low(values)


def drift_alerts(
    medians: dict[str, tuple[int, int]],
    start: datetime,
    end: datetime,
    *,
    threshold_pct: int,
    min_samples: int,
) -> list[Alert]:
    """Per model, from (median drift in ppm, samples): an alert when the median drift of reported vs
    estimated completion tokens is at or past ± ``threshold_pct`` %."""
    alerts = []
    limit = threshold_pct * 10_000
    for model, (middle, samples) in sorted(medians.items()):
        if samples < max(1, min_samples) or abs(middle) < limit:
            continue
        sign = "-" if middle < 0 else "+"
        hundredths = abs(middle) // 100
        text = (
            f"{model}: median completion-token drift {sign}{hundredths // 100}.{hundredths % 100:02d}%"
            f" (reported vs estimated, {samples} streams) in the last {span(end - start)},"
            f" past the {threshold_pct}% threshold"
        )
        alerts.append(
            Alert(
                AlertKind.DRIFT,
                None,
                model,
                "median_drift",
                start,
                end,
                text,
                {"median_drift_ppm": middle, "samples": samples, "threshold_pct": threshold_pct},
            )
        )
    return alerts


@dataclass(frozen=True, slots=True)
class AnomalyEvent:
    request_id: str
    account_id: str
    model: str
    kind: str


def anomaly_alerts(
    events: Iterable[AnomalyEvent], start: datetime, end: datetime, *, shown: int = 10
) -> list[Alert]:
    """One alert per (account, model, anomaly kind) of the window, naming the requests."""
    groups: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for event in events:
        groups[(event.account_id, event.model, event.kind)].append(event.request_id)
    alerts = []
    for (account, model, kind), request_ids in sorted(groups.items()):
        listed = _ids(request_ids, shown)
        more = (
            "" if len(request_ids) <= len(listed) else f" and {len(request_ids) - len(listed)} more"
        )
        text = (
            f"{plural(len(request_ids), 'contract anomaly', 'contract anomalies')} ({kind}) for {account} on {model}"
            f" in the last {span(end - start)}: {', '.join(listed)}{more}"
        )
        alerts.append(
            Alert(
                AlertKind.ANOMALY,
                account,
                model,
                kind,
                start,
                end,
                text,
                {"count": len(request_ids), "request_ids": listed},
            )
        )
    return alerts


def parity_alert(
    *,
    pair_id: int,
    fingerprint_prefix: str,
    account_ids: tuple[str, str],
    model: str,
    streamed_request_id: str,
    plain_request_id: str,
    mismatched: Sequence[str],
    facts: dict[str, Any],
    at: datetime,
) -> Alert:
    """A parity mismatch, with both request ids: one alert per pair."""
    text = (
        f"parity mismatch on {model} ({', '.join(mismatched)}): streamed {streamed_request_id}"
        f" vs non-streamed {plain_request_id}"
        f" charged {facts['streamed_charge_micros']} vs {facts['plain_charge_micros']} micros"
    )
    account = account_ids[0] if account_ids[0] == account_ids[1] else None
    return Alert(
        AlertKind.PARITY_MISMATCH,
        account,
        model,
        ",".join(mismatched),
        at,
        at,
        text,
        {
            "streamed_request_id": streamed_request_id,
            "plain_request_id": plain_request_id,
            "account_ids": list(account_ids),
            "mismatched": list(mismatched),
            "fingerprint_prefix": fingerprint_prefix,
            **facts,
        },
        subject=str(pair_id),
    )
