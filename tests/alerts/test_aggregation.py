"""Aggregation texts, windows, rate and drift decisions: pure, no server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from models import AlertKind
from worker.alerts.aggregation import (
    AnomalyEvent,
    UnsettledEvent,
    anomaly_alerts,
    closed_windows,
    drift_alerts,
    median,
    rate_alert,
    unsettled_alerts,
    window_start,
)
from worker.alerts.config import AlertConfig, redact

START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
END = START + timedelta(minutes=5)


def events(count: int, reason: str = "error_finish", exposure: int | None = 34_333) -> list:
    return [
        UnsettledEvent(f"req_{i}", "acct_7", "gpt-4o", reason, True, exposure) for i in range(count)
    ]


def test_unsettled_text_is_one_line_per_account_model_reason() -> None:
    group = [*events(11), UnsettledEvent("req_x", "acct_7", "gpt-4o", "error_finish", True, 34_337)]
    [alert] = unsettled_alerts(group, START, END)
    assert alert.text == (
        "12 streams unsettled (error_finish) for acct_7 on gpt-4o in the last 5 min,"
        " exposure $0.412000"
    )
    assert alert.fields["count"] == 12 and alert.fields["exposure_micros"] == 412_000
    assert alert.payload()["text"] == alert.text and alert.payload()["reason"] == "error_finish"


def test_groups_split_and_unpriced_are_counted() -> None:
    group = events(2) + events(1, "unpriced", None)
    group.append(UnsettledEvent("req_np", "acct_7", "gpt-4o", "incomplete", False, 10))
    texts = [alert.text for alert in unsettled_alerts(group, START, END)]
    assert texts == [
        "2 streams unsettled (error_finish) for acct_7 on gpt-4o in the last 5 min,"
        " exposure $0.068666",
        "1 call unsettled (incomplete) for acct_7 on gpt-4o in the last 5 min, exposure $0.000010",
        "1 stream unsettled (unpriced) for acct_7 on gpt-4o in the last 5 min, exposure $0.000000"
        " (+1 unpriced)",
    ]


def test_dedupe_key_is_per_kind_account_model_reason_and_window() -> None:
    [a] = unsettled_alerts(events(1), START, END)
    [b] = unsettled_alerts(events(5), START, END)
    [c] = unsettled_alerts(events(1), END, END + timedelta(minutes=5))
    assert a.dedupe_key == b.dedupe_key != c.dedupe_key


def test_rate_alert_at_the_threshold_and_not_below() -> None:
    alert = rate_alert(5, 100, START, END, threshold_pct=5, min_streams=20)
    assert alert is not None and alert.kind is AlertKind.UNSETTLED_RATE
    assert alert.text == (
        "5.0% of streams unsettled in the last 5 min (5 of 100), above the 5% threshold"
    )
    assert rate_alert(4, 100, START, END, threshold_pct=5, min_streams=20) is None
    assert rate_alert(5, 10, START, END, threshold_pct=5, min_streams=20) is None


def test_drift_alert_on_the_median_past_the_threshold() -> None:
    values = [120_000, 110_000, 130_000, -5_000, 150_000]
    assert median(values) == 120_000
    [alert] = drift_alerts(
        {"gpt-4o": (median(values), 5), "gpt-4o-mini": (20_000, 5)},
        START,
        END,
        threshold_pct=10,
        min_samples=3,
    )
    assert alert.model == "gpt-4o"
    assert alert.text.startswith("gpt-4o: median completion-token drift +12.00%")
    assert not drift_alerts({"m": (-200_000, 2)}, START, END, threshold_pct=10, min_samples=3)
    [negative] = drift_alerts({"m": (-200_000, 3)}, START, END, threshold_pct=10, min_samples=3)
    assert "-20.00%" in negative.text


def test_anomaly_alerts_name_the_requests() -> None:
    found = [AnomalyEvent(f"req_{i}", "acct_7", "gpt-4o", "no_close") for i in range(3)]
    [alert] = anomaly_alerts(found, START, END, shown=2)
    assert alert.text == (
        "3 contract anomalies (no_close) for acct_7 on gpt-4o in the last 5 min:"
        " req_0, req_1 and 1 more"
    )


def test_windows_are_aligned_and_closed_after_the_slack() -> None:
    at = datetime(2026, 11, 30, 12, 7, 31, tzinfo=UTC)
    window = timedelta(minutes=5)
    assert window_start(at, window) == datetime(2026, 11, 30, 12, 5, tzinfo=UTC)
    windows = closed_windows(at, window, timedelta(seconds=30), 2)
    assert windows[-1] == (START, START + window)
    assert windows[0] == (START - window, START)
    # 10 s into a window, the previous one is still inside the slack: not closed yet
    early = closed_windows(START + timedelta(seconds=10), window, timedelta(seconds=30), 1)
    assert early == [(START - 2 * window, START - window)]


def test_backoff_doubles_and_is_capped() -> None:
    config = AlertConfig(backoff_base=timedelta(seconds=30), backoff_max=timedelta(minutes=5))
    assert [config.backoff(n).total_seconds() for n in (1, 2, 3, 4, 5, 50)] == [
        30, 60, 120, 240, 300, 300,
    ]  # fmt: skip


def test_redact_keeps_scheme_and_host_only() -> None:
    url = "https://user:pw@hooks.slack.com:8443/services/T0/B0/XYZTOKEN?token=abc"
    assert redact(url) == "https://hooks.slack.com:8443/…"
    assert redact(None) == "<no webhook>"
    assert redact("not a url") == "<unparsable url>"
