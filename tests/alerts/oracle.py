"""The facts the old alerts carried, computed from the findings alone, and the facts the new
messages carry, read from their fields: the two must be equal (no fact lost, none invented).

The old aggregation sent one message per (kind, account, model, reason, window) with its count and
exposure; that is ``old_facts``. ``new_facts`` reads every page and every window of every digest
(resolved notices repeat a quiet window's facts, which its digest carries, so they are not read).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timedelta

from worker.alerts.aggregation import EPOCH, Alert
from worker.alerts.picture import Finding

Fact = tuple[str, str | None, str | None, str, str]


def start_of(at: datetime, window: timedelta) -> str:
    """The window's start, computed here in whole microseconds (not with the code under test)."""
    size = window // timedelta(microseconds=1)
    offset = (at - EPOCH) // timedelta(microseconds=1)
    return (EPOCH + timedelta(microseconds=offset - offset % size)).isoformat()


def old_facts(
    findings: Iterable[Finding], window: timedelta
) -> tuple[Counter[Fact], Counter[Fact]]:
    """(count, exposure) per (kind, account, model, reason, window start)."""
    counts: Counter[Fact] = Counter()
    exposure: Counter[Fact] = Counter()
    for f in findings:
        fact = (f.kind, f.account_id, f.model, f.reason, start_of(f.at, window))
        counts[fact] += 1
        exposure[fact] += f.exposure_micros or 0
    return counts, exposure


def new_facts(alerts: Iterable[Alert]) -> tuple[Counter[Fact], Counter[Fact]]:
    counts: Counter[Fact] = Counter()
    exposure: Counter[Fact] = Counter()
    for alert in alerts:
        body = alert.payload()
        if body["severity"] == "page":
            parts = [(body["window_start"], body["groups"])]
        elif body["severity"] == "digest":
            parts = [(w["window_start"], w["groups"]) for w in body["windows"]]
        else:
            continue
        for start, groups in parts:
            for g in groups:
                fact = (body["kind"], g["account_id"], g["model"], g["reason"], start)
                counts[fact] += g["count"]
                exposure[fact] += g["exposure_micros"]
    return counts, exposure
