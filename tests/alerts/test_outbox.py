"""The outbox end to end: aggregation into rows, delivery to a real HTTP receiver, retries with
backoff through a 500 and a timeout, no double send with two deliverers, no secret in the logs."""

from __future__ import annotations

import logging
import re
import threading
import uuid
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from freezegun import freeze_time
from parity.calls import meta_dict, run_call, usage
from prometheus_client import REGISTRY
from sqlalchemy import Engine, delete, select
from sqlalchemy.orm import Session, sessionmaker

from models import AlertKind, OutboxAlert
from worker.alerts.aggregation import Alert
from worker.alerts.config import AlertConfig
from worker.alerts.jobs import run_alerts
from worker.alerts.outbox import enqueue
from worker.alerts.webhook import deliver
from worker.ledger.database import session_factory

SECRETS = ("s3cr3t-t0ken", "qs-t0ken", "T000/B000")


@pytest.fixture
def clean(sessions: sessionmaker[Session]):
    def wipe() -> None:
        with sessions() as s, s.begin():
            s.execute(delete(OutboxAlert))

    wipe()
    yield
    wipe()


def base_time() -> datetime:
    """A window of our own, far from every other test's rows (windows are global)."""
    offset = uuid.uuid4().int % 400_000
    return datetime(2031, 1, 1, tzinfo=UTC) + timedelta(hours=offset)


def alert(text: str = "5 streams unsettled", at: datetime | None = None) -> Alert:
    at = at or base_time()
    return Alert(
        AlertKind.UNSETTLED, "acct_7", "gpt-4o", "error_finish", at, at + timedelta(minutes=5),
        text, {"count": 5},
    )  # fmt: skip


def rows(sessions: sessionmaker[Session]) -> list[OutboxAlert]:
    with sessions() as s:
        return list(s.scalars(select(OutboxAlert).order_by(OutboxAlert.id)))


def queue(sessions: sessionmaker[Session], *alerts: Alert) -> datetime:
    now = datetime.now(UTC)
    with sessions() as s, s.begin():
        enqueue(s, list(alerts), now)
    return now


def no_secret(caplog: pytest.LogCaptureFixture, sessions: sessionmaker[Session]) -> None:
    for secret in SECRETS:
        assert secret not in caplog.text
        for row in rows(sessions):
            assert secret not in (row.last_error or "") + row.payload + row.text


def test_delivered_once_with_text_and_fields(
    sessions, clean, receiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    config = AlertConfig(webhook_url=receiver.url)
    once = alert()
    queue(sessions, once)
    queue(sessions, once)  # the same dedupe key: not queued twice
    assert deliver(sessions, config).delivered == 1
    assert deliver(sessions, config).delivered == 0
    [body] = receiver.bodies
    assert body["text"] == "5 streams unsettled" and body["count"] == 5
    assert body["kind"] == "unsettled" and body["account_id"] == "acct_7"
    [row] = rows(sessions)
    assert (row.status, row.attempts) == ("delivered", 1) and row.delivered_at is not None
    assert "delivered to http://127.0.0.1:" in caplog.text and "5 streams unsettled" in caplog.text
    no_secret(caplog, sessions)


@pytest.mark.parametrize("failure", ["fail", "slow"])
def test_retried_with_backoff_then_delivered(
    sessions, clean, receiver, caplog: pytest.LogCaptureFixture, failure: str
) -> None:
    caplog.set_level(logging.DEBUG)
    config = AlertConfig(
        webhook_url=receiver.url, timeout_seconds=0.5, backoff_base=timedelta(seconds=30)
    )
    start = queue(sessions, alert())
    receiver.mode = failure
    clock = [start]
    stats = deliver(sessions, config, clock=lambda: clock[0])
    assert stats.failed == 1
    [row] = rows(sessions)
    assert (row.status, row.attempts) == ("pending", 1)
    assert row.next_attempt_at == start + timedelta(seconds=30)
    assert row.last_error == ("HTTP 500" if failure == "fail" else "timeout after 0.5s")
    # not due yet: nothing is tried
    clock[0] = start + timedelta(seconds=29)
    assert deliver(sessions, config, clock=lambda: clock[0]).failed == 0
    # still down at the second try: the wait doubles
    clock[0] = start + timedelta(seconds=31)
    assert deliver(sessions, config, clock=lambda: clock[0]).failed == 1
    [row] = rows(sessions)
    assert row.attempts == 2 and row.next_attempt_at == clock[0] + timedelta(seconds=60)
    # the receiver recovers (a slow answer to the second try may still be under way: it ends
    # first, so only the third try's body is counted)
    receiver.wait_idle()
    receiver.mode = "ok"
    receiver.bodies.clear()
    clock[0] = start + timedelta(seconds=92)
    assert deliver(sessions, config, clock=lambda: clock[0]).delivered == 1
    [row] = rows(sessions)
    assert (row.status, row.attempts, row.last_error) == ("delivered", 3, None)
    assert len(receiver.bodies) == 1
    assert "failed (attempt 1" in caplog.text
    no_secret(caplog, sessions)


def test_without_a_webhook_alerts_go_to_the_log(
    sessions, clean, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    queue(sessions, alert("3 streams unsettled (incomplete)"))
    assert deliver(sessions, AlertConfig(webhook_url=None)).logged == 1
    assert rows(sessions)[0].status == "logged"
    assert "3 streams unsettled (incomplete)" in caplog.text


@pytest.mark.postgres
def test_two_concurrent_deliverers_never_send_twice(pg_engine: Engine, receiver) -> None:
    sessions = session_factory(pg_engine)
    with sessions() as s, s.begin():
        s.execute(delete(OutboxAlert))
    at = base_time()
    queue(sessions, *(alert(f"alert {i}", at + timedelta(minutes=5 * i)) for i in range(30)))
    config = AlertConfig(webhook_url=receiver.url, batch_size=100)
    barrier = threading.Barrier(3)
    results = []

    def run() -> None:
        barrier.wait()
        results.append(deliver(session_factory(pg_engine), config))

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    texts = [body["text"] for body in receiver.bodies]
    assert sorted(texts) == sorted(f"alert {i}" for i in range(30))
    assert sum(result.delivered for result in results) == 30
    with sessions() as s, s.begin():
        assert {row.status for row in s.scalars(select(OutboxAlert))} == {"delivered"}
        s.execute(delete(OutboxAlert))


def test_the_true_ups_of_the_last_window_are_a_gauge(sessions, clean, receiver) -> None:
    """Calls charged beyond their hold are counted (billing_alert_anomalies, kind
    charge_above_hold) for the last closed window, and 0 in the next, not logged one by one."""
    at = base_time()
    account = f"acct_{uuid.uuid4().hex[:6]}"
    config = AlertConfig(webhook_url=receiver.url)
    with sessions() as s, s.begin():
        for held in (1, 2):  # a hold of a micro-dollar or two: every charge is beyond it
            data = meta_dict(stream=True, account=account, created_at=at, reserved=held)
            run_call(s, data, now=at + timedelta(seconds=10))
        run_call(s, meta_dict(stream=True, account=account, created_at=at), now=at)

    def true_ups() -> float | None:
        labels = {"kind": "charge_above_hold"}
        return REGISTRY.get_sample_value("billing_alert_anomalies", labels)

    with freeze_time(at + timedelta(minutes=5, seconds=31)):
        run_alerts(sessions, config)
    assert true_ups() == 2
    with freeze_time(at + timedelta(minutes=10, seconds=31)):
        run_alerts(sessions, config)
    assert true_ups() == 0


def test_unsettled_calls_page_once_then_resolve_once(sessions, clean, receiver) -> None:
    at = base_time()
    account = f"acct_{uuid.uuid4().hex[:6]}"
    config = AlertConfig(webhook_url=receiver.url, rate_min_streams=4, unsettled_rate_pct=50)
    with sessions() as s, s.begin():
        for _ in range(3):
            data = meta_dict(stream=True, account=account, created_at=at)
            run_call(s, data, finish="error", now=at + timedelta(seconds=10))
        run_call(s, meta_dict(stream=True, account=account), now=at + timedelta(seconds=20))
    with freeze_time(at + timedelta(minutes=2)):
        assert run_alerts(sessions, config).queued == 0  # the window is still open
    with freeze_time(at + timedelta(minutes=5, seconds=31)):
        assert run_alerts(sessions, config).queued == 1
        again = run_alerts(sessions, config)
    assert again.queued == 0 and again.delivery.delivered == 0
    [body] = receiver.bodies
    lines = body["text"].split("\n")
    assert re.fullmatch(
        r"PAGE unsettled: 3 calls unsettled in the 5 min from .* UTC, exposure \$0\.\d{6}", lines[0]
    )
    assert lines[1].startswith(
        "thresholds: 75.0% of streams unsettled (3 of 4), crossed the 50% threshold"
    )
    assert lines[2] == "by reason: error_finish 3"
    assert (body["kind"], body["reason"], body["count"]) == ("unsettled", "page", 3)
    assert body["groups"] == [
        {"account_id": account, "model": "gpt-4o", "reason": "error_finish", "count": 3,
         "exposure_micros": body["exposure_micros"], "unpriced": 0},
    ]  # fmt: skip
    assert len(body["request_ids"]) == 3
    # the exposure gauge of the last closed window says the same
    exposure = REGISTRY.get_sample_value("billing_alert_exposure_micros", {"kind": "unsettled"})
    assert exposure == body["exposure_micros"] > 0
    # the next window is quiet: one resolved notice, once
    with freeze_time(at + timedelta(minutes=10, seconds=31)):
        assert run_alerts(sessions, config).queued == 1
    with freeze_time(at + timedelta(minutes=15, seconds=31)):
        assert run_alerts(sessions, config).queued == 0
    assert [b["reason"] for b in receiver.bodies] == ["page", "resolved"]
    assert receiver.bodies[1]["text"].startswith("RESOLVED unsettled: back under the thresholds")
    # the digest of the hour has nothing left: the one window with findings paged
    with freeze_time(at + timedelta(hours=1, seconds=31)):
        assert run_alerts(sessions, config).queued == 0


def test_quiet_windows_go_to_one_digest(sessions, clean, receiver) -> None:
    at = base_time()
    account = f"acct_{uuid.uuid4().hex[:6]}"
    config = AlertConfig(webhook_url=receiver.url, rate_min_streams=1_000)
    with sessions() as s, s.begin():
        for minute in (1, 12, 31):
            data = meta_dict(stream=True, account=account, created_at=at)
            run_call(s, data, finish="error", now=at + timedelta(minutes=minute))
    with freeze_time(at + timedelta(minutes=55)):
        assert run_alerts(sessions, config).queued == 0  # below every threshold: no page
    with freeze_time(at + timedelta(hours=1, seconds=31)):
        assert run_alerts(sessions, config).queued == 1
        assert run_alerts(sessions, config).queued == 0
    [body] = receiver.bodies
    assert (body["kind"], body["reason"], body["count"]) == ("unsettled", "digest", 3)
    assert body["text"].startswith("DIGEST unsettled: 3 calls unsettled in the hour from")
    assert [w["groups"][0]["count"] for w in body["windows"]] == [1, 1, 1]


def test_drift_is_stored_and_a_median_past_the_threshold_is_in_the_digest(sessions, clean) -> None:
    at = base_time()
    model = "gpt-4o-mini"
    config = AlertConfig(drift_min_samples=3, drift_alert_pct=10)
    with sessions() as s, s.begin():
        for completion in (30, 40, 50):  # the estimate of "One two three." is a handful
            data = meta_dict(stream=True, model=model, created_at=at)
            run_call(s, data, block=usage(completion=completion), now=at + timedelta(seconds=5))
    with freeze_time(at + timedelta(hours=1, seconds=31)):
        run = run_alerts(sessions, config)
    assert run.delivery.logged >= 1
    drift = [row for row in rows(sessions) if row.kind == "drift"]
    assert len(drift) == 1 and drift[0].reason == "digest"
    body = orjson.loads(drift[0].payload)
    [detail] = [d for d in body["details"] if d["model"] == model]
    assert detail["samples"] == 3 and detail["median_drift_ppm"] > 100_000
    assert f"details: {model}: median completion-token drift +" in drift[0].text
    gauge = REGISTRY.get_sample_value("billing_drift_median_ppm", {"model": model})
    assert gauge == detail["median_drift_ppm"]
