"""The report as one CSV table with a ``section`` column: ``group`` rows, one ``total`` row, then
``drift``, ``parity``, ``anomaly``, ``unpriced_component`` (model, ``usage_field``, ``count``: calls)
and ``provider`` rows (their own columns filled, the others empty).

Money appears twice, ``*_micros`` and ``*_usd``. A text cell that a spreadsheet would run as a
formula (starting with ``=``, ``+``, ``-``, ``@``, tab or CR) is prefixed with ``'``.
"""

from __future__ import annotations

import csv
import io

from worker.reports import upstream as upstream_section
from worker.reports.model import COUNT_FIELDS, MONEY_FIELDS, PARITY_FIELDS, Report, ratio
from worker.reports.render_json import tally_dict
from worker.reports.spec import KEYS
from worker.upstream.matching import Reconciliation

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
UNPRICED_COLUMNS = ("usage_field",)
_TAKEN = {
    *KEYS, *TALLY_COLUMNS, *EXTRA_COLUMNS, *PROVIDER_COLUMNS, *UNPRICED_COLUMNS,
    "charged_micros", "charged_usd",
}  # fmt: skip
UPSTREAM_COLUMNS = tuple(
    name
    for name in ("upstream_key", *upstream_section.FLAT_NAMES, *upstream_section.MARGIN_FLAT_NAMES)
    if name not in _TAKEN
)
COLUMNS = (
    "section", *KEYS, *TALLY_COLUMNS, *EXTRA_COLUMNS, *PROVIDER_COLUMNS, *UNPRICED_COLUMNS,
    *UPSTREAM_COLUMNS,
)  # fmt: skip
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
    for u in report.unpriced_components:
        writer.writerow({
            "section": "unpriced_component", "model": safe_text(u.model),
            "usage_field": safe_text(u.usage_field), "count": u.calls,
        })  # fmt: skip
    for p in report.providers:
        writer.writerow({
            "section": "provider", "provider": safe_text(p.provider),
            "usage_shape": safe_text(p.usage_shape), "provider_calls": p.calls,
            "charged_micros": int(p.charged), "charged_usd": p.charged.usd(),
            "costed_calls": p.costed_calls, "charged_costed_micros": int(p.charged_costed),
            "provider_cost_micros": int(p.provider_cost),
            "cost_drift": "" if p.cost_drift is None else ratio(p.cost_drift),
        })  # fmt: skip
    if report.upstream is not None:
        _upstream_rows(writer, report.upstream)
    return out.getvalue()


def _cells(cells: dict[str, object]) -> dict[str, object]:
    return {
        k: "" if v is None else (safe_text(v) if isinstance(v, str) else v)
        for k, v in cells.items()
    }


def _upstream_rows(writer: csv.DictWriter[str], found: Reconciliation) -> None:
    """``upstream`` rows per (day, provider, model, key), one ``upstream_total``, then ``margin``
    rows per (day, provider, model) and one ``margin_total``."""
    section = upstream_section.section_dict(found)
    for row in section["rows"]:  # type: ignore[attr-defined]
        writer.writerow({"section": "upstream", **_cells(row)})
    writer.writerow({"section": "upstream_total", **_cells(section["total"])})  # type: ignore[arg-type]
    for row in section["margins"]:  # type: ignore[attr-defined]
        writer.writerow({"section": "margin", **_cells(row)})
    writer.writerow({"section": "margin_total", **_cells(section["margin_total"])})  # type: ignore[arg-type]
