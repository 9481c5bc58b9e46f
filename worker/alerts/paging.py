"""Paging, digest, resolved (pure): the findings and rates of a stretch of windows → the messages.

Per kind and alert window, the window's picture *pages* when a rate or exposure threshold is crossed
(``Picture.pages``): one page, carrying the whole picture. A window that does not page leaves its
findings to the kind's digest, one message per kind per digest window (a whole number of alert
windows, aligned to the same epoch). The first window that does not page after one that did gets one
resolved notice. Every decision is a function of the findings alone, so each run over the same
windows reaches the same messages and the same dedupe keys.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from worker.alerts.aggregation import Alert, window_start
from worker.alerts.messages import digest, page, resolved
from worker.alerts.picture import Finding, Picture, Rate, picture

Window = tuple[datetime, datetime]


@dataclass(frozen=True, slots=True)
class Plan:
    """What to decide over: ``windows`` are every alert window the findings cover, oldest first;
    pages and resolved notices are made for those in ``emit`` (the lookback), digests for
    ``digests``. Every digest window must be covered by ``windows``."""

    window: timedelta
    windows: list[Window]
    emit: list[Window]
    digests: list[Window]
    exposure_limit_micros: int | None = None
    shown: int = 10


def messages(
    plan: Plan, findings: Iterable[Finding], rates: Mapping[tuple[str, datetime], Rate]
) -> list[Alert]:
    """Pages, resolved notices and digests; ``rates`` is keyed by (kind, window start)."""
    by_window: dict[tuple[str, datetime], list[Finding]] = defaultdict(list)
    for finding in findings:
        by_window[(finding.kind, window_start(finding.at, plan.window))].append(finding)
    kinds = sorted({kind for kind, _ in by_window} | {kind for kind, _ in rates})
    emit = set(plan.emit)
    alerts: list[Alert] = []
    for kind in kinds:
        pictures: dict[datetime, Picture] = {}
        for start, end in plan.windows:
            pictures[start] = picture(
                kind,
                by_window.get((kind, start), ()),
                start,
                end,
                rate=rates.get((kind, start)),
                exposure_limit_micros=plan.exposure_limit_micros,
                shown=plan.shown,
            )
        streak: list[datetime] = []
        for start, end in plan.windows:
            current = pictures[start]
            if current.pages:
                if (start, end) in emit:
                    alerts.append(page(current))
                streak.append(start)
                continue
            if streak and (start, end) in emit:
                alerts.append(resolved(current, streak))
            streak = []
        for start, end in plan.digests:
            quiet: list[Finding] = []
            paged: list[datetime] = []
            parts: list[Picture] = []
            for inner, _ in plan.windows:
                if not start <= inner < end:
                    continue
                if pictures[inner].pages:
                    paged.append(inner)
                else:
                    quiet += by_window.get((kind, inner), [])
                    parts.append(pictures[inner])
            if quiet:
                summary = picture(kind, quiet, start, end, shown=plan.shown)
                alerts.append(digest(summary, paged, parts))
    return alerts
