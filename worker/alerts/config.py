"""Alert settings: the environment's (``worker.config.Settings``) plus the fixed tuning constants.

The fields that come from the environment take their defaults from the settings' declarations
(``Settings()``), never restated here.

Webhook URLs carry their secret in the path (Slack: ``/services/T…/B…/<token>``) or the query, not
only in a password, so ``redact`` keeps the scheme and host alone: the one form of the URL that may
reach a log line, an error message or the outbox.
"""

from __future__ import annotations

from dataclasses import dataclass
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


_DEFAULTS = Settings()


@dataclass(frozen=True, slots=True)
class AlertConfig:
    webhook_url: str | None = _DEFAULTS.alert_webhook_url
    window: timedelta = timedelta(seconds=_DEFAULTS.alert_window_seconds)
    unsettled_rate_pct: int = _DEFAULTS.unsettled_rate_pct
    # Windows that do not page go to one digest per kind this often (a whole number of windows).
    digest_window: timedelta = timedelta(seconds=_DEFAULTS.alert_digest_seconds)
    # A window's exposure at which its kind pages; 0: never on exposure.
    exposure_page_micros: int = _DEFAULTS.exposure_page_micros
    drift_alert_pct: int = _DEFAULTS.drift_alert_pct
    drift_window: timedelta = timedelta(seconds=_DEFAULTS.drift_window_seconds)
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
    non_streamable_models: tuple[str, ...] = _DEFAULTS.non_streamable_models
    # the low-balance alert's threshold (``worker.alerts.low_balance``)
    low_balance_micros: int = _DEFAULTS.low_balance_micros
    # the upstream leakage alert's thresholds (``worker.alerts.upstream_leakage``) and the price book file
    # its leaked tokens are priced with (``BILLING_PRICE_BOOK``; None: the bundled one)
    upstream_leak_micros: int = _DEFAULTS.upstream_leak_micros
    upstream_leak_pct: int = _DEFAULTS.upstream_leak_pct
    price_book: str | None = _DEFAULTS.price_book

    def __post_init__(self) -> None:
        if self.digest_window < self.window or self.digest_window % self.window:
            raise ValueError(
                f"the digest window ({self.digest_window}) must be a multiple of the alert window"
                f" ({self.window})"
            )

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: object) -> AlertConfig:
        values: dict[str, object] = {
            "webhook_url": settings.alert_webhook_url,
            "window": timedelta(seconds=settings.alert_window_seconds),
            "unsettled_rate_pct": settings.unsettled_rate_pct,
            # a whole number of windows (``Settings.from_env`` refuses others; this rounds up for a
            # ``Settings`` built in code)
            "digest_window": timedelta(
                seconds=-(-settings.alert_digest_seconds // settings.alert_window_seconds)
                * settings.alert_window_seconds
            ),
            "exposure_page_micros": settings.exposure_page_micros,
            "drift_alert_pct": settings.drift_alert_pct,
            "drift_window": timedelta(seconds=settings.drift_window_seconds),
            "non_streamable_models": settings.non_streamable_models,
            "low_balance_micros": settings.low_balance_micros,
            "upstream_leak_micros": settings.upstream_leak_micros,
            "upstream_leak_pct": settings.upstream_leak_pct,
            "price_book": settings.price_book,
        }
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]

    def backoff(self, attempts: int) -> timedelta:
        """Delay before the next try after ``attempts`` failed ones: base · 2^(attempts-1), capped."""
        exponent = max(0, min(attempts - 1, 30))
        return min(self.backoff_base * (2**exponent), self.backoff_max)
