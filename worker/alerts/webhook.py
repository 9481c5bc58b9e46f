"""Delivery: outbox rows → the webhook (JSON, Slack-compatible ``text``) and one log line each.

Contract of ``deliver``: may block up to ``timeout_seconds`` per row; safe to run in any number of
processes at once (rows are claimed one at a time, see ``outbox``); never raises for a webhook that is
down or slow — the row goes back to ``pending`` with ``attempts`` and ``next_attempt_at`` (exponential
backoff), and nothing is lost. Without a configured webhook a row is written to the log only and
marked ``logged``.

The webhook URL is a secret (Slack puts its token in the path): only ``config.redact(url)`` is ever
logged or stored, and error texts are built from status codes and exception types, never from the
exception's message (``urllib`` may quote the URL in it).
"""

from __future__ import annotations

import logging
import socket
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from types import ModuleType

from sqlalchemy.orm import Session

from models import OutboxStatus
from worker.alerts.config import AlertConfig, redact
from worker.alerts.outbox import claim_one, finish
from worker.core.terminal import printable


def _metrics() -> ModuleType:
    """``worker.metrics``, imported on first delivery: importing it creates this process's metric
    files in a multiprocess directory, which a process that never delivers (the exporter, which
    imports every CLI module) must not do."""
    from worker import metrics

    return metrics


log = logging.getLogger(__name__)

USER_AGENT = "billing-worker-alerts/1"


class DeliveryFailed(Exception):
    """The webhook did not accept the alert; the message is safe to log and store."""


def post(url: str, body: bytes, timeout: float) -> int:
    """POST ``body`` as JSON; the HTTP status when it is 2xx, else ``DeliveryFailed``."""
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": USER_AGENT},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read(1024)
            return response.status
    except urllib.error.HTTPError as exc:
        raise DeliveryFailed(f"HTTP {exc.code}") from None
    except TimeoutError:
        raise DeliveryFailed(f"timeout after {timeout:g}s") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError | socket.timeout):
            raise DeliveryFailed(f"timeout after {timeout:g}s") from None
        raise DeliveryFailed(f"unreachable ({type(reason).__name__})") from None
    except (OSError, ValueError) as exc:
        raise DeliveryFailed(f"failed ({type(exc).__name__})") from None


@dataclass
class DeliveryStats:
    delivered: int = 0
    logged: int = 0
    failed: int = 0


def deliver(
    sessions: Callable[[], Session],
    config: AlertConfig,
    *,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    limit: int | None = None,
) -> DeliveryStats:
    """Send every due outbox row (up to ``limit``), one claim, one request, one update at a time."""
    stats = DeliveryStats()
    url = config.webhook_url
    shown = redact(url)
    for _ in range(limit or config.batch_size):
        with sessions() as session:
            claimed = claim_one(session, config, clock())
        if claimed is None:
            break
        shown_text = printable(claimed.text)  # log lines end on terminals too
        if url is None:
            log.warning("alert %s (no webhook configured): %s", claimed.kind, shown_text)
            with sessions() as session:
                finish(session, claimed, config, clock(), status=OutboxStatus.LOGGED)
            stats.logged += 1
            continue
        try:
            post(url, claimed.payload.encode(), config.timeout_seconds)
        except DeliveryFailed as exc:
            error = str(exc).replace(url, shown)
            with sessions() as session:
                next_at = finish(
                    session, claimed, config, clock(), status=OutboxStatus.PENDING, error=error
                )
            assert next_at is not None
            log.warning(
                "alert %s to %s failed (attempt %d, next at %s): %s | %s",
                claimed.kind, shown, claimed.attempts, next_at.isoformat(), error, shown_text,
            )  # fmt: skip
            _metrics().alert_delivery(False)
            stats.failed += 1
            continue
        with sessions() as session:
            finish(session, claimed, config, clock(), status=OutboxStatus.DELIVERED)
        log.info("alert %s delivered to %s: %s", claimed.kind, shown, shown_text)
        _metrics().alert_delivery(True)
        stats.delivered += 1
    return stats
