"""Messages (pure): a ``Picture`` → the page, the digest entry or the resolved notice of its kind.

Layout (docs/alerts.md "The message"): a headline, then one line each for the thresholds, the counts
by reason, the top accounts and models by exposure, a few request ids, and the commands that list
the calls. Lines are joined by ``\\n``; every value from outside (account, model, request id) is
passed through ``printable`` here, so a newline or an escape in a name can never start a line of its
own. The fields next to the text carry every fact exactly, ``groups`` complete.

Dedupe keys are (kind, page|digest|resolved, window start): deterministic, so the outbox queues each
message once however many times, and in however many processes, the aggregation runs.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from worker.alerts.aggregation import Alert, plural, span
from worker.alerts.picture import Picture, Ranked
from worker.core.money import Micros
from worker.core.terminal import printable

PAGE, DIGEST, RESOLVED = "page", "digest", "resolved"
TOP = 5

# How a kind's findings are named: (one, many). A kind not listed is named after itself.
NOUNS = {
    "unsettled": ("call unsettled", "calls unsettled"),
    "anomaly": ("contract anomaly", "contract anomalies"),
    "parity_mismatch": ("parity mismatch", "parity mismatches"),
    "drift": ("model with drift findings", "models with drift findings"),
    "low_balance": ("funded account running low", "funded accounts running low"),
}
# Kinds whose headline counts the distinct models of their findings (a model drifting in three
# drift windows is one model), the findings after them.
BY_MODEL = frozenset({"drift"})


def noun(kind: str, count: int) -> str:
    one, many = NOUNS.get(kind, (f"{kind} finding", f"{kind} findings"))
    return plural(count, one, many)


def distinct_models(picture: Picture) -> int:
    return len({g.model for g in picture.groups})


def counted(picture: Picture) -> str:
    """How many the headline says: findings, or for a ``BY_MODEL`` kind distinct models."""
    if picture.kind not in BY_MODEL:
        return noun(picture.kind, picture.count)
    models = distinct_models(picture)
    return f"{noun(picture.kind, models)} ({plural(picture.count, 'finding')})"


def stamp(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def rfc3339(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def usd(micros: int) -> str:
    return f"${Micros(micros).usd()}"


def commands(kind: str, start: datetime, end: datetime) -> str:
    """The commands that list the calls behind a message of ``kind`` over [start, end)."""
    window = f"billing report --since {rfc3339(start)} --until {rfc3339(end)} --by account,model"
    if kind == "unsettled":
        return f"billing unsettled list (open ones, oldest first); {window}"
    return f"{window}; billing show REQUEST_ID"


def _ranked(items: tuple[Ranked, ...], priced: bool) -> str:
    shown = [
        f"{printable(item.name or '-')} {usd(item.exposure_micros)} ({item.count})"
        if priced
        else f"{printable(item.name or '-')} ({item.count})"
        for item in items[:TOP]
    ]
    more = f", and {len(items) - TOP} more" if len(items) > TOP else ""
    return ", ".join(shown) + more


def _thresholds(picture: Picture) -> str | None:
    parts = []
    rate = picture.rate
    if rate is not None:
        mark = "crossed" if rate.crossed else "below"
        parts.append(
            f"{rate.percent()} of {rate.what} ({rate.count} of {rate.total}),"
            f" {mark} the {rate.threshold_pct}% threshold"
        )
    limit = picture.exposure_limit_micros
    if limit:
        mark = "crossed" if picture.exposure_crossed else "below"
        parts.append(f"exposure {usd(picture.exposure_micros)}, {mark} the {usd(limit)} threshold")
    if picture.paging:
        one, many = "finding that pages by itself", "findings that page by themselves"
        parts.append(plural(picture.paging, one, many))
    return "; ".join(parts) or None


def _body(picture: Picture) -> list[str]:
    """The lines after the headline: thresholds, reasons, top accounts and models, requests."""
    lines = []
    thresholds = _thresholds(picture)
    if thresholds:
        lines.append(f"thresholds: {thresholds}")
    if picture.by_reason:
        reasons = ", ".join(f"{printable(r)} {n}" for r, n in picture.by_reason)
        lines.append(f"by reason: {reasons}")
    priced = picture.exposure_micros > 0
    ranking = "by exposure" if priced else "by count"
    if picture.accounts:
        lines.append(f"top accounts {ranking}: {_ranked(picture.accounts, priced)}")
    if picture.models:
        lines.append(f"top models {ranking}: {_ranked(picture.models, priced)}")
    if picture.notes:
        more = len(picture.notes) - TOP
        listed = "; ".join(printable(note) for note in picture.notes[:TOP])
        lines.append(f"details: {listed}" + (f"; and {more} more" if more > 0 else ""))
    if picture.request_ids:
        more = picture.requests - len(picture.request_ids)
        listed = ", ".join(printable(r) for r in picture.request_ids)
        lines.append(f"requests: {listed}" + (f" and {more} more" if more > 0 else ""))
    return lines


def _exposure(picture: Picture) -> str:
    if not picture.exposure_micros and not picture.unpriced:
        return ""
    text = f", exposure {usd(picture.exposure_micros)}"
    return text + (f" (+{picture.unpriced} unpriced)" if picture.unpriced else "")


def _groups(picture: Picture) -> list[dict[str, Any]]:
    return [
        {
            "account_id": g.account_id,
            "model": g.model,
            "reason": g.reason,
            "count": g.count,
            "exposure_micros": g.exposure_micros,
            "unpriced": g.unpriced,
        }
        for g in picture.groups
    ]


def _fields(picture: Picture, severity: str) -> dict[str, Any]:
    rate = picture.rate
    return {
        "severity": severity,
        "count": picture.count,
        "models": distinct_models(picture),
        "paging": picture.paging,
        "streams": picture.streams,
        "exposure_micros": picture.exposure_micros,
        "unpriced": picture.unpriced,
        "by_reason": dict(picture.by_reason),
        "rate": None
        if rate is None
        else {
            "what": rate.what,
            "count": rate.count,
            "total": rate.total,
            "threshold_pct": rate.threshold_pct,
            "crossed": rate.crossed,
        },
        "exposure_threshold_micros": picture.exposure_limit_micros,
        "top_accounts": [
            {"account_id": r.name, "exposure_micros": r.exposure_micros, "count": r.count}
            for r in picture.accounts[:TOP]
        ],
        "top_models": [
            {"model": r.name, "exposure_micros": r.exposure_micros, "count": r.count}
            for r in picture.models[:TOP]
        ],
        "groups": _groups(picture),
        "request_ids": list(picture.request_ids),
        "details": [dict(d) for d in picture.details],
        "command": commands(picture.kind, picture.start, picture.end),
    }


def page(picture: Picture) -> Alert:
    """The one page of a kind in a window that crossed a threshold."""
    headline = (
        f"PAGE {picture.kind}: {counted(picture)} in the"
        f" {span(picture.end - picture.start)} from {stamp(picture.start)}{_exposure(picture)}"
    )
    lines = [
        headline,
        *_body(picture),
        f"list them: {commands(picture.kind, picture.start, picture.end)}",
    ]
    return Alert(
        picture.kind, None, None, PAGE, picture.start, picture.end, "\n".join(lines),
        _fields(picture, PAGE),
    )  # fmt: skip


def resolved(picture: Picture, paged: list[datetime]) -> Alert:
    """The notice that a kind which paged in the windows starting at ``paged`` (oldest first, the
    last one right before ``picture``'s) is back under its thresholds in ``picture``'s window."""
    headline = (
        f"RESOLVED {picture.kind}: back under the thresholds in the {span(picture.end - picture.start)}"
        f" from {stamp(picture.start)}; it paged {plural(len(paged), 'window')}"
        f" since {stamp(paged[0])}"
    )
    lines = [headline, *_body(picture)]
    fields = _fields(picture, RESOLVED)
    fields["paged_windows"] = [at.isoformat() for at in paged]
    return Alert(
        picture.kind, None, None, RESOLVED, picture.start, picture.end, "\n".join(lines), fields
    )


def digest(picture: Picture, paged: list[datetime], windows: list[Picture]) -> Alert:
    """A kind's findings over a digest window, from its windows that did not page (``windows``, one
    picture each, whose groups the fields keep per window); ``paged`` are the starts of the windows
    that paged (their findings are in their pages)."""
    headline = (
        f"DIGEST {picture.kind}: {counted(picture)} in the"
        f" {span(picture.end - picture.start)} from {stamp(picture.start)}{_exposure(picture)}"
    )
    if paged:
        headline += f" (besides {plural(len(paged), 'window')} that paged)"
    lines = [
        headline,
        *_body(picture),
        f"list them: {commands(picture.kind, picture.start, picture.end)}",
    ]
    fields = _fields(picture, DIGEST)
    fields["paged_windows"] = [at.isoformat() for at in paged]
    fields["windows"] = [
        {"window_start": w.start.isoformat(), "window_end": w.end.isoformat(), "groups": _groups(w)}
        for w in windows
        if w.count
    ]
    return Alert(
        picture.kind, None, None, DIGEST, picture.start, picture.end, "\n".join(lines), fields
    )
