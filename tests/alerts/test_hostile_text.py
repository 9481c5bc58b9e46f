"""Gateway text in alerts: Slack control syntax arrives escaped, terminal controls never arrive.

A model or account name is the gateway's to choose. Slack reads ``<!channel>`` as a ping to everyone
and ``<http://x|click>`` as a link whose target is hidden behind its text; ``&``, ``<`` and ``>`` must
be written as entities for the text to show as typed (Slack's "escaping text" rule).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import delete
from sqlalchemy.orm import Session, sessionmaker

from models import OutboxAlert
from worker.alerts.aggregation import webhook_text
from worker.alerts.config import AlertConfig
from worker.alerts.messages import page
from worker.alerts.outbox import enqueue
from worker.alerts.picture import Finding, picture
from worker.alerts.webhook import deliver
from worker.core.terminal import printable

MODEL = "gpt\x1b[2J\x07<!channel>"
ACCOUNT = "acct <http://x|click> & co"
START = datetime(2031, 6, 1, 12, 0, tzinfo=UTC)


def hostile_alert():
    found = [
        Finding("unsettled", "error_finish", START, ACCOUNT, MODEL, "req_1\n<!here>", 10, True)
    ]
    end = START + timedelta(minutes=5)
    return page(picture("unsettled", found, START, end, exposure_limit_micros=1))


def test_the_webhook_text_escapes_slack_syntax_and_controls() -> None:
    alert = hostile_alert()
    text = alert.payload()["text"]
    assert "&lt;!channel&gt;" in text and "<!channel>" not in text
    assert "&lt;http://x|click&gt;" in text and "<http" not in text
    assert "& co" not in text and "&amp; co" in text
    assert "<" not in text and ">" not in text
    assert "\x1b" not in text and "\x07" not in text
    assert "gpt\\x1b[2J\\x07" in text  # visible, not interpreted
    # A newline in a value never starts a line of its own: the lines are the message's.
    assert "req_1\\n&lt;!here&gt;" in text
    assert [line.split(":")[0] for line in text.split("\n")] == [
        "PAGE unsettled", "thresholds", "by reason", "top accounts by exposure",
        "top models by exposure", "requests", "list them",
    ]  # fmt: skip
    # The structured fields stay exact (JSON carries them safely); the stored text has the values
    # escaped for a terminal.
    [group] = alert.payload()["groups"]
    assert group["model"] == MODEL and group["account_id"] == ACCOUNT
    assert printable(MODEL) in alert.text


@given(st.text())
def test_webhook_text_leaves_no_markup_nor_control(text: str) -> None:
    shown = webhook_text(text)
    assert "<" not in shown and ">" not in shown
    assert all(c.isprintable() for line in shown.split("\n") for c in line)
    assert shown.count("\n") == text.count("\n")  # only the message's own line breaks
    # every & is the start of one of the three entities
    rest = shown.replace("&amp;", "").replace("&lt;", "").replace("&gt;", "")
    assert "&" not in rest


@pytest.fixture
def clean(sessions: sessionmaker[Session]):
    def wipe() -> None:
        with sessions() as s, s.begin():
            s.execute(delete(OutboxAlert).where(OutboxAlert.window_start == START))

    wipe()
    yield
    wipe()


def test_delivered_body_and_log_lines_are_escaped(
    sessions: sessionmaker[Session], clean, receiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with sessions() as s, s.begin():
        assert enqueue(s, [hostile_alert()], datetime.now(UTC)) == 1
    stats = deliver(sessions, AlertConfig(webhook_url=receiver.url))
    assert stats.delivered >= 1
    [body] = [b for b in receiver.bodies if b.get("groups", [{}])[0].get("model") == MODEL]
    assert "&lt;!channel&gt;" in body["text"] and "<" not in body["text"]
    assert "\x1b" not in body["text"] and "\x07" not in body["text"]
    assert "\x1b" not in caplog.text and "\x07" not in caplog.text
