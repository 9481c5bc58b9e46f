"""Alert messages and their windows (pure): the ``Alert`` the outbox queues, aligned windows, and
the escaping of a message for a chat webhook.

Windows are tumbling and aligned to the epoch (``window_start``), so every process computes the same
window for the same instant and the outbox's dedupe key — (kind, account, model, reason, window start,
subject) — names one message however many times the job runs. A text is Slack-compatible lines; the
same facts go in structured fields next to it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from statistics import median_low
from typing import Any

from worker.core.terminal import printable

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
    """``text`` for a chat webhook: each line's controls escaped (``worker.core.terminal``), and ``&``,
    ``<``, ``>`` written as entities, Slack's rule, so an account or model name holding
    ``<!channel>`` or ``<https://x|click>`` shows as typed instead of pinging everyone or hiding a
    link. Only the ``\n`` between lines stays; messages escape the values they put in a line."""
    return "\n".join(
        printable(line).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        for line in text.split("\n")
    )


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {nouns or noun + 's'}"


@dataclass(frozen=True, slots=True)
class Alert:
    """One message for the outbox. ``kind`` is an ``AlertKind`` value; ``subject`` tells apart
    alerts sharing kind, reason and window; ``fields`` are the structured facts sent next to
    ``text``."""

    kind: str
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


def median(values: Sequence[int]) -> int:
    """The low median of integers (PostgreSQL's ``percentile_disc(0.5)``): no float decides."""
    return median_low(values)
