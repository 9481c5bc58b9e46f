"""The whole picture of one alert kind in one window (pure): findings in, one summary out.

A *finding* is one thing the worker found (an unsettled call, a contract anomaly, a parity mismatch,
a model whose drift passed its threshold). ``picture`` adds up the findings of one kind and window:
counts by reason, exposure, the top accounts and models by exposure, and every (account, model,
reason) group with its count, so a message built from it loses none of the facts one message per
group used to carry. Nothing here knows a kind: a new kind is findings with a new ``kind``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class Finding:
    """One occurrence. ``exposure_micros`` is what is at stake in integer micro-USD (0: nothing;
    None: unknown, an unpriced call); ``facts`` are the kind's own details, carried to the message
    fields as they are (a parity pair's request ids, a drift median), and ``note`` says them in one
    line for the text. ``pages``: the finding pages its window by itself, whatever the thresholds
    (a tokenizer change: one is news enough)."""

    kind: str
    reason: str
    at: datetime
    account_id: str | None = None
    model: str | None = None
    request_id: str | None = None
    exposure_micros: int | None = 0
    stream: bool | None = None
    note: str = ""
    facts: Mapping[str, Any] = field(default_factory=dict)
    pages: bool = False


@dataclass(frozen=True, slots=True)
class Rate:
    """A share of a window's traffic against its threshold, e.g. unsettled streams of all streams.
    Below ``min_total`` the share means nothing and never crosses."""

    what: str
    count: int
    total: int
    threshold_pct: int
    min_total: int = 1

    @property
    def crossed(self) -> bool:
        return (
            self.total >= max(1, self.min_total)
            and self.count * 100 >= self.threshold_pct * self.total
        )

    def percent(self) -> str:
        """The share with one decimal, truncated, from integers: ``'7.4%'``."""
        tenths = self.count * 1000 // self.total if self.total else 0
        return f"{tenths // 10}.{tenths % 10}%"


@dataclass(frozen=True, slots=True)
class Group:
    """The findings of one (account, model, reason): the fact one old message carried."""

    account_id: str | None
    model: str | None
    reason: str
    count: int
    exposure_micros: int
    unpriced: int


@dataclass(frozen=True, slots=True)
class Ranked:
    """An account or a model with its exposure and count."""

    name: str | None
    exposure_micros: int
    count: int


@dataclass(frozen=True, slots=True)
class Picture:
    """Every finding of one kind in [start, end), summed; ``groups`` is complete, ``top_*`` and
    ``request_ids`` are the first few for the text (``requests`` counts the distinct ones)."""

    kind: str
    start: datetime
    end: datetime
    count: int
    exposure_micros: int
    unpriced: int
    streams: int
    by_reason: tuple[tuple[str, int], ...]
    groups: tuple[Group, ...]
    accounts: tuple[Ranked, ...]
    models: tuple[Ranked, ...]
    request_ids: tuple[str, ...]
    requests: int
    details: tuple[Mapping[str, Any], ...]
    notes: tuple[str, ...] = ()
    rate: Rate | None = None
    exposure_limit_micros: int | None = None
    paging: int = 0  # findings that page by themselves (``Finding.pages``)

    @property
    def exposure_crossed(self) -> bool:
        limit = self.exposure_limit_micros
        return limit is not None and limit > 0 and self.exposure_micros >= limit

    @property
    def pages(self) -> bool:
        """A rate or exposure threshold is crossed, or a finding pages by itself: this window
        pages; else it goes to the digest."""
        crossed = (self.rate is not None and self.rate.crossed) or self.exposure_crossed
        return crossed or self.paging > 0


def _ranked(totals: Mapping[str | None, list[int]]) -> tuple[Ranked, ...]:
    """By exposure, then count, descending; then by name, so equal ones keep one order."""
    ranked = [Ranked(name, exposure, count) for name, (exposure, count) in totals.items()]
    ranked.sort(key=lambda r: (-r.exposure_micros, -r.count, r.name or ""))
    return tuple(ranked)


def picture(
    kind: str,
    findings: Iterable[Finding],
    start: datetime,
    end: datetime,
    *,
    rate: Rate | None = None,
    exposure_limit_micros: int | None = None,
    shown: int = 10,
) -> Picture:
    """Sum ``findings`` (all of ``kind``) into one picture; ``shown`` request ids are kept."""
    groups: dict[tuple[str | None, str | None, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    accounts: dict[str | None, list[int]] = defaultdict(lambda: [0, 0])
    models: dict[str | None, list[int]] = defaultdict(lambda: [0, 0])
    reasons: Counter[str] = Counter()
    request_ids: list[str] = []
    details: list[Mapping[str, Any]] = []
    notes: list[str] = []
    count = exposure = unpriced = streams = paging = 0
    for finding in findings:
        if finding.kind != kind:
            raise ValueError(f"a {finding.kind} finding in the picture of {kind}")
        value = finding.exposure_micros or 0
        count += 1
        exposure += value
        unpriced += finding.exposure_micros is None
        streams += finding.stream is True
        paging += finding.pages
        reasons[finding.reason] += 1
        group = groups[(finding.account_id, finding.model, finding.reason)]
        group[0] += 1
        group[1] += value
        group[2] += finding.exposure_micros is None
        for totals, name in ((accounts, finding.account_id), (models, finding.model)):
            totals[name][0] += value
            totals[name][1] += 1
        if finding.request_id is not None:
            request_ids.append(finding.request_id)
        if finding.facts:
            details.append(finding.facts)
        if finding.note:
            notes.append(finding.note)
    return Picture(
        kind=kind,
        start=start,
        end=end,
        count=count,
        exposure_micros=exposure,
        unpriced=unpriced,
        streams=streams,
        by_reason=tuple(sorted(reasons.items(), key=lambda item: (-item[1], item[0]))),
        groups=tuple(
            Group(account, model, reason, *totals)
            for (account, model, reason), totals in sorted(
                groups.items(), key=lambda item: tuple(part or "" for part in item[0])
            )
        ),
        accounts=_ranked(accounts) if any(name is not None for name in accounts) else (),
        models=_ranked(models) if any(name is not None for name in models) else (),
        request_ids=tuple(sorted(set(request_ids))[:shown]),
        requests=len(set(request_ids)),
        details=tuple(details),
        notes=tuple(sorted(notes)),
        rate=rate,
        exposure_limit_micros=exposure_limit_micros,
        paging=paging,
    )
