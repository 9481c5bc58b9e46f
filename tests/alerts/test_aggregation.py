"""Pictures, message texts, windows, rate and exposure decisions: pure, no server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from worker.alerts.aggregation import closed_windows, median, window_start
from worker.alerts.config import AlertConfig, redact
from worker.alerts.messages import digest, page, resolved
from worker.alerts.picture import Finding, Rate, picture
from worker.alerts.sources import drift_past

START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
END = START + timedelta(minutes=5)


def unsettled(
    request_id: str,
    account: str = "acct_7",
    model: str = "gpt-4o",
    reason: str = "error_finish",
    exposure: int | None = 34_333,
    stream: bool = True,
) -> Finding:
    return Finding("unsettled", reason, START, account, model, request_id, exposure, stream)


def demo_findings() -> list[Finding]:
    found = [unsettled(f"req_{i}") for i in range(11)]
    found.append(unsettled("req_x", exposure=34_337))
    found += [
        unsettled(f"req_b{i}", "acct_2", "gpt-4o-mini", "incomplete", 5_000) for i in range(3)
    ]
    found.append(unsettled("req_u", "acct_2", "gpt-5", "unpriced", None))
    return found


def test_a_picture_sums_counts_exposure_and_keeps_every_group() -> None:
    shown = picture("unsettled", demo_findings(), START, END, shown=4)
    assert (shown.count, shown.exposure_micros, shown.unpriced, shown.streams) == (
        16, 412_000 + 15_000, 1, 16,
    )  # fmt: skip
    assert shown.by_reason == (("error_finish", 12), ("incomplete", 3), ("unpriced", 1))
    assert [
        (g.account_id, g.model, g.reason, g.count, g.exposure_micros) for g in shown.groups
    ] == [
        ("acct_2", "gpt-4o-mini", "incomplete", 3, 15_000),
        ("acct_2", "gpt-5", "unpriced", 1, 0),
        ("acct_7", "gpt-4o", "error_finish", 12, 412_000),
    ]
    assert [(r.name, r.exposure_micros, r.count) for r in shown.accounts] == [
        ("acct_7", 412_000, 12), ("acct_2", 15_000, 4),
    ]  # fmt: skip
    assert shown.request_ids == ("req_0", "req_1", "req_10", "req_2")


def test_a_finding_of_another_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="anomaly finding in the picture of unsettled"):
        picture("unsettled", [Finding("anomaly", "no_close", START)], START, END)


def test_the_page_carries_the_whole_picture() -> None:
    rate = Rate("streams unsettled", 16, 200, threshold_pct=5, min_total=20)
    shown = picture(
        "unsettled", demo_findings(), START, END, rate=rate, exposure_limit_micros=10_000_000
    )
    assert shown.pages
    alert = page(shown)
    assert alert.text.split("\n") == [
        "PAGE unsettled: 16 calls unsettled in the 5 min from 2026-11-30 12:00:00 UTC,"
        " exposure $0.427000 (+1 unpriced)",
        "thresholds: 8.0% of streams unsettled (16 of 200), crossed the 5% threshold;"
        " exposure $0.427000, below the $10.000000 threshold",
        "by reason: error_finish 12, incomplete 3, unpriced 1",
        "top accounts by exposure: acct_7 $0.412000 (12), acct_2 $0.015000 (4)",
        "top models by exposure: gpt-4o $0.412000 (12), gpt-4o-mini $0.015000 (3), gpt-5 $0.000000 (1)",
        "requests: req_0, req_1, req_10, req_2, req_3, req_4, req_5, req_6, req_7, req_8 and 6 more",
        "list them: billing unsettled list (open ones, oldest first);"
        " billing report --since 2026-11-30T12:00:00Z --until 2026-11-30T12:05:00Z --by account,model",
    ]
    body = alert.payload()
    assert (body["kind"], body["reason"], body["severity"]) == ("unsettled", "page", "page")
    assert body["count"] == 16 and body["exposure_micros"] == 427_000
    assert body["rate"] == {
        "what": "streams unsettled", "count": 16, "total": 200, "threshold_pct": 5, "crossed": True,
    }  # fmt: skip
    assert body["by_reason"] == {"error_finish": 12, "incomplete": 3, "unpriced": 1}
    assert len(body["groups"]) == 3


@pytest.mark.parametrize(
    ("count", "total", "minimum", "crossed"),
    [
        (5, 100, 20, True),
        (4, 100, 20, False),
        (5, 10, 20, False),
        (1, 1, 0, True),
        (0, 0, 0, False),
    ],
)
def test_rate_crosses_at_the_threshold_and_not_below(
    count: int, total: int, minimum: int, crossed: bool
) -> None:
    assert Rate("streams unsettled", count, total, 5, minimum).crossed is crossed


def test_exposure_pages_at_its_threshold_and_zero_never_pages() -> None:
    found = [unsettled("a", exposure=600_000), unsettled("b", exposure=400_000)]
    assert picture("unsettled", found, START, END, exposure_limit_micros=1_000_000).pages
    assert not picture("unsettled", found, START, END, exposure_limit_micros=1_000_001).pages
    assert not picture("unsettled", found, START, END, exposure_limit_micros=0).pages
    assert not picture("unsettled", found, START, END).pages


def test_digest_and_resolved_say_what_they_are() -> None:
    found = [
        Finding("anomaly", "no_close", START, "acct_7", "gpt-4o", f"req_{i}") for i in range(3)
    ]
    summary = picture("anomaly", found, START, START + timedelta(hours=1))
    alert = digest(summary, [START + timedelta(minutes=10)], [summary])
    assert alert.text.split("\n")[:4] == [
        "DIGEST anomaly: 3 contract anomalies in the hour from 2026-11-30 12:00:00 UTC"
        " (besides 1 window that paged)",
        "by reason: no_close 3",
        "top accounts by count: acct_7 (3)",
        "top models by count: gpt-4o (3)",
    ]
    assert alert.reason == "digest" and alert.payload()["paged_windows"] == [
        (START + timedelta(minutes=10)).isoformat()
    ]
    quiet = picture("unsettled", [], END, END + timedelta(minutes=5), exposure_limit_micros=10)
    notice = resolved(quiet, [START - timedelta(minutes=5), START])
    assert notice.text.startswith(
        "RESOLVED unsettled: back under the thresholds in the 5 min from 2026-11-30 12:05:00 UTC;"
        " it paged 2 windows since 2026-11-30 11:55:00 UTC"
    )
    assert notice.reason == "resolved"


def test_dedupe_keys_are_per_kind_severity_and_window() -> None:
    one = page(picture("unsettled", demo_findings(), START, END, exposure_limit_micros=1))
    more = page(picture("unsettled", demo_findings()[:3], START, END, exposure_limit_micros=1))
    later = page(
        picture(
            "unsettled", demo_findings(), END, END + timedelta(minutes=5), exposure_limit_micros=1
        )
    )
    same_window_digest = digest(picture("unsettled", demo_findings(), START, END), [], [])
    assert one.dedupe_key == more.dedupe_key
    assert len({one.dedupe_key, later.dedupe_key, same_window_digest.dedupe_key}) == 3


def test_drift_past_the_threshold_on_the_median() -> None:
    values = [120_000, 110_000, 130_000, -5_000, 150_000]
    assert median(values) == 120_000
    [found] = drift_past(
        {"gpt-4o": (median(values), 5), "gpt-4o-mini": (20_000, 5)},
        START, END, threshold_pct=10, min_samples=3,
    )  # fmt: skip
    assert found.model == "gpt-4o" and found.facts["median_drift_ppm"] == 120_000
    assert found.note.startswith("gpt-4o: median completion-token drift +12.00%")
    assert window_start(found.at, END - START) == START  # counted in the window it ends
    assert not drift_past({"o3": (-200_000, 2)}, START, END, threshold_pct=10, min_samples=3)
    [negative] = drift_past({"o3": (-200_000, 3)}, START, END, threshold_pct=10, min_samples=3)
    assert "-20.00%" in negative.note
    # a model the worker estimates approximately drifts from its raw estimate by design: its
    # calibration learns that ratio and speaks for it, so no median-drift finding, however far
    assert not drift_past(
        {"claude-haiku-4-5": (-300_000, 500)}, START, END, threshold_pct=10, min_samples=3
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


def test_the_digest_window_is_a_multiple_of_the_alert_window() -> None:
    with pytest.raises(ValueError, match="must be a multiple of the alert window"):
        AlertConfig(window=timedelta(seconds=300), digest_window=timedelta(seconds=450))
    with pytest.raises(ValueError, match="must be a multiple"):
        AlertConfig(window=timedelta(seconds=300), digest_window=timedelta(seconds=60))


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
