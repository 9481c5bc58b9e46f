"""Alert settings: the environment's (``worker.config.Settings``) plus the fixed tuning constants.

Webhook URLs carry their secret in the path (Slack: ``/services/T…/B…/<token>``) or the query, not
only in a password, so ``redact`` keeps the scheme and host alone: the one form of the URL that may
reach a log line, an error message or the outbox.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from urllib.parse import urlsplit

from worker.config import Settings, redact_url


def redact(url: str | None) -> str:
    """``https://hooks.slack.com/…`` from any webhook URL; passwords, paths and queries dropped."""
    if not url:
        return "<no webhook>"
    try:
        parts = urlsplit(redact_url(url))
        host = parts.hostname or ""
        if parts.port is not None:
            host = f"{host}:{parts.port}"
    except ValueError:
        return "<unparsable url>"
    if not parts.scheme or not host:
        return "<unparsable url>"
    return f"{parts.scheme}://{host}/…"


@dataclass(frozen=True, slots=True)
class AlertConfig:
    webhook_url: str | None = None
    window: timedelta = timedelta(seconds=300)
    unsettled_rate_pct: int = 5
    drift_alert_pct: int = 10
    drift_window: timedelta = timedelta(seconds=3_600)
    # A window is aggregated once it ended this long ago: batches committing late still count.
    settle_slack: timedelta = timedelta(seconds=30)
    # Closed windows looked at again on every run (dedupe keys make it idempotent); older ones that
    # were never aggregated (beat down for longer) are not alerted any more.
    lookback_windows: int = 12
    rate_min_streams: int = 20  # below this many streams in a window, a rate means nothing
    drift_min_samples: int = 20
    timeout_seconds: float = 5.0
    backoff_base: timedelta = timedelta(seconds=30)
    backoff_max: timedelta = timedelta(hours=1)
    lease: timedelta = timedelta(seconds=60)  # a claimed row a sender died on is retried after it
    batch_size: int = 50
    request_ids_shown: int = 10
    non_streamable_models: tuple[str, ...] = field(default_factory=tuple)
    low_balance_micros: int = 0  # the low-balance alert's threshold (``worker.alerts.low_balance``)

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: object) -> AlertConfig:
        values: dict[str, object] = {
            "webhook_url": settings.alert_webhook_url,
            "window": timedelta(seconds=settings.alert_window_seconds),
            "unsettled_rate_pct": settings.unsettled_rate_pct,
            "drift_alert_pct": settings.drift_alert_pct,
            "drift_window": timedelta(seconds=settings.drift_window_seconds),
            "non_streamable_models": settings.non_streamable_models,
            "low_balance_micros": settings.low_balance_micros,
        }
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]

    def backoff(self, attempts: int) -> timedelta:
        """Delay before the next try after ``attempts`` failed ones: base · 2^(attempts-1), capped."""
        exponent = max(0, min(attempts - 1, 30))
        return min(self.backoff_base * (2**exponent), self.backoff_max)
