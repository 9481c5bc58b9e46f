"""The alert settings from the environment: the exposure threshold in USD, the digest interval."""

from __future__ import annotations

from datetime import timedelta

import pytest

from worker.alerts.config import AlertConfig
from worker.config import Settings


def test_defaults_page_at_ten_dollars_and_digest_hourly() -> None:
    config = AlertConfig.from_settings(Settings.from_env({}))
    assert config.exposure_page_micros == 10_000_000
    assert config.digest_window == timedelta(hours=1)


@pytest.mark.parametrize(
    ("raw", "micros"), [("2.5", 2_500_000), ("0.000001", 1), ("0", 0), (" 7 ", 7_000_000)]
)
def test_exposure_threshold_is_usd_to_the_micro(raw: str, micros: int) -> None:
    assert Settings.from_env({"BILLING_EXPOSURE_PAGE_USD": raw}).exposure_page_micros == micros


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("0.0000001", "has more than 6 decimals"),
        ("-1", "is negative"),
        ("ten", "is not an amount of USD"),
        ("Infinity", "is not an amount of USD"),
    ],
)
def test_a_bad_exposure_threshold_is_refused_clearly(raw: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^BILLING_EXPOSURE_PAGE_USD '{raw}' {message}"):
        Settings.from_env({"BILLING_EXPOSURE_PAGE_USD": raw})


def test_the_digest_interval_is_a_multiple_of_the_window() -> None:
    env = {"BILLING_ALERT_WINDOW_SECONDS": "10", "BILLING_ALERT_DIGEST_SECONDS": "30"}
    assert AlertConfig.from_settings(Settings.from_env(env)).digest_window == timedelta(seconds=30)
    with pytest.raises(
        ValueError, match=r"multiple of BILLING_ALERT_WINDOW_SECONDS \(300\), got 450"
    ):
        Settings.from_env({"BILLING_ALERT_DIGEST_SECONDS": "450"})
    # a Settings built in code is rounded up to whole windows
    built = Settings(alert_window_seconds=86_400)
    assert AlertConfig.from_settings(built).digest_window == timedelta(days=1)
