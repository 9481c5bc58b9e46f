"""What a report covers: a half-open UTC window on ``reservations.created_at`` and the grouping keys.

Parsing is pure and strict, so a wrong date or key is a one-line error before any query runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from worker.core.errors import InputError

KEYS = ("day", "account", "model")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_TIMESTAMP = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([Zz]|[+-]\d{2}:\d{2})$"
)


class ReportError(InputError):
    """A report request that cannot run as given (dates, window, grouping keys, format)."""


@dataclass(frozen=True, slots=True)
class ReportSpec:
    since: datetime
    until: datetime
    by: tuple[str, ...] = ("day",)

    def __post_init__(self) -> None:
        for name in ("since", "until"):
            if getattr(self, name).tzinfo is None:
                raise ReportError(f"--{name} must be an aware UTC time")
        if self.since >= self.until:
            raise ReportError(
                f"--since ({self.since.isoformat()}) must be before --until "
                f"({self.until.isoformat()})"
            )
        unknown = [key for key in self.by if key not in KEYS]
        if unknown:
            raise ReportError(f"unknown --by key {unknown[0]!r}: use {', '.join(KEYS)}")


def parse_time(text: str, option: str) -> datetime:
    """An RFC 3339 date (midnight UTC) or timestamp with ``Z`` or an offset, as an aware UTC time."""
    text = text.strip()
    if _DATE.match(text):
        try:
            return datetime.fromisoformat(text).replace(tzinfo=UTC)
        except ValueError as exc:
            raise ReportError(f"--{option} {text!r}: {exc}") from None
    if not _TIMESTAMP.match(text):
        raise ReportError(
            f"--{option} {text!r} is not an RFC 3339 date or timestamp "
            "(2025-03-01 or 2025-03-01T12:00:00Z)"
        )
    try:
        parsed = datetime.fromisoformat(text.upper().replace("Z", "+00:00"))
    except ValueError as exc:
        raise ReportError(f"--{option} {text!r}: {exc}") from None
    return parsed.astimezone(UTC)


def parse_by(text: str) -> tuple[str, ...]:
    """``day,account,model`` (any subset, in the order given); empty means totals only."""
    keys = tuple(part.strip() for part in text.split(",") if part.strip())
    for key in keys:
        if key not in KEYS:
            raise ReportError(f"unknown --by key {key!r}: use {', '.join(KEYS)}")
    if len(set(keys)) != len(keys):
        raise ReportError(f"--by {text!r} repeats a key")
    return keys


def parse_spec(since: str | None, until: str | None, by: str) -> ReportSpec:
    if not since or not until:
        raise ReportError("both --since and --until are required (RFC 3339 dates, UTC)")
    return ReportSpec(parse_time(since, "since"), parse_time(until, "until"), parse_by(by))
