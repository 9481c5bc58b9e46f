"""The report as JSON: money as ``*_micros`` integers and ``*_usd`` strings, times in UTC."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from worker.reports import upstream as upstream_section
from worker.reports.model import (
    COUNT_FIELDS,
    MONEY_FIELDS,
    ProviderUsage,
    Report,
    Tally,
    UnpricedComponent,
)


def _iso(value: Any) -> str:
    return value.isoformat().replace("+00:00", "Z")


def tally_dict(tally: Tally) -> dict[str, Any]:
    return {
        **{name: tally.counts[name] for name in COUNT_FIELDS},
        **{f"{name}_micros": int(tally.money[name]) for name in MONEY_FIELDS},
        **{f"{name}_usd": tally.money[name].usd() for name in MONEY_FIELDS},
        "ties_out": tally.ties_out,
        "tie_out_difference_micros": int(tally.tie_out_difference),
        "tie_out_difference_usd": tally.tie_out_difference.usd(),
    }


def report_dict(report: Report) -> dict[str, Any]:
    return {
        "window": {"since": _iso(report.since), "until": _iso(report.until)},
        "generated_at": _iso(report.generated_at),
        "by": list(report.by),
        "ties_out": report.ties_out,
        "total": tally_dict(report.total),
        "groups": [
            {**dict(zip(report.by, row.key, strict=True)), **tally_dict(row.tally)}
            for row in report.groups
        ],
        "days": [{"day": row.key[0], **tally_dict(row.tally)} for row in report.days],
        "unsettled_by_reason": report.unsettled_by_reason,
        "drift": {
            "method": report.drift_method,
            "models": [
                {"model": d.model, "calls": d.calls, "p50": d.p50, "p90": d.p90, "p99": d.p99}
                for d in report.drift
            ],
        },
        "parity": None
        if report.parity is None
        else {
            "pairs": report.parity.pairs,
            "matches": report.parity.matches,
            "mismatches": report.parity.mismatches,
            "mismatched_fields": dict(report.parity.mismatched_fields),
        },
        "anomalies": None if report.anomalies is None else dict(report.anomalies),
        "unpriced_components": [unpriced_dict(u) for u in report.unpriced_components],
        "providers": [provider_dict(p) for p in report.providers],
        "calibration": [dataclasses.asdict(c) for c in report.calibration],
        "upstream": None
        if report.upstream is None
        else upstream_section.section_dict(report.upstream),
    }


def provider_dict(p: ProviderUsage) -> dict[str, Any]:
    return {
        "provider": p.provider,
        "usage_shape": p.usage_shape,
        "calls": p.calls,
        "charged_micros": int(p.charged),
        "costed_calls": p.costed_calls,
        "charged_costed_micros": int(p.charged_costed),
        "provider_cost_micros": int(p.provider_cost),
        "cost_drift": p.cost_drift,
    }


def unpriced_dict(u: UnpricedComponent) -> dict[str, Any]:
    return {"model": u.model, "usage_field": u.usage_field, "calls": u.calls}


def render_json(report: Report) -> str:
    return orjson.dumps(report_dict(report), option=orjson.OPT_INDENT_2).decode() + "\n"
