"""The report as one CSV table with a ``section`` column: ``group`` rows, one ``total`` row, then
``drift``, ``parity``, ``anomaly`` and ``provider`` rows (their own columns filled, the others
empty).

Money appears twice, ``*_micros`` and ``*_usd``. A text cell that a spreadsheet would run as a
formula (starting with ``=``, ``+``, ``-``, ``@``, tab or CR) is prefixed with ``'``.
"""

from __future__ import annotations

import csv
import io

from worker.reports.model import COUNT_FIELDS, MONEY_FIELDS, PARITY_FIELDS, Report, ratio
from worker.reports.render_json import tally_dict
from worker.reports.spec import KEYS

TALLY_COLUMNS = (
    *COUNT_FIELDS,
    *(f"{name}_micros" for name in MONEY_FIELDS),
    *(f"{name}_usd" for name in MONEY_FIELDS),
    "ties_out",
    "tie_out_difference_micros",
    "tie_out_difference_usd",
)
EXTRA_COLUMNS = ("drift_calls", "drift_p50", "drift_p90", "drift_p99", "kind", "count")
PROVIDER_COLUMNS = (
    "provider", "usage_shape", "provider_calls", "charged_costed_micros", "costed_calls",
    "provider_cost_micros", "cost_drift",
)  # fmt: skip
COLUMNS = ("section", *KEYS, *TALLY_COLUMNS, *EXTRA_COLUMNS, *PROVIDER_COLUMNS)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def safe_text(value: str) -> str:
    return "'" + value if value.startswith(FORMULA_STARTS) else value


def render_csv(report: Report) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()

    def tally_cells(tally: object) -> dict[str, object]:
        cells = tally_dict(tally)  # type: ignore[arg-type]
        cells["ties_out"] = "yes" if cells["ties_out"] else "no"
        return cells

    for row in report.groups:
        keys = {key: safe_text(value) for key, value in zip(report.by, row.key, strict=True)}
        writer.writerow({"section": "group", **keys, **tally_cells(row.tally)})
    writer.writerow({"section": "total", **tally_cells(report.total)})
    for d in report.drift:
        writer.writerow({
            "section": "drift", "model": safe_text(d.model), "drift_calls": d.calls,
            "drift_p50": ratio(d.p50), "drift_p90": ratio(d.p90), "drift_p99": ratio(d.p99),
        })  # fmt: skip
    if report.parity is not None:
        parity = report.parity
        for kind, count in (
            ("pairs", parity.pairs),
            ("matches", parity.matches),
            ("mismatches", parity.mismatches),
            *((f"mismatched {name}", parity.mismatched_fields[name]) for name in PARITY_FIELDS),
        ):
            writer.writerow({"section": "parity", "kind": kind, "count": count})
    for kind, count in (report.anomalies or {}).items():
        writer.writerow({"section": "anomaly", "kind": safe_text(kind), "count": count})
    for p in report.providers:
        writer.writerow({
            "section": "provider", "provider": safe_text(p.provider),
            "usage_shape": safe_text(p.usage_shape), "provider_calls": p.calls,
            "charged_micros": int(p.charged), "charged_usd": p.charged.usd(),
            "costed_calls": p.costed_calls, "charged_costed_micros": int(p.charged_costed),
            "provider_cost_micros": int(p.provider_cost),
            "cost_drift": "" if p.cost_drift is None else ratio(p.cost_drift),
        })  # fmt: skip
    return out.getvalue()
