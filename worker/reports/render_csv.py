"""The report as tidy CSV: one table per section, each with its own columns (issue 39).

``csv_tables`` gives every section of the report as (columns, rows): ``groups`` (the ``--by`` keys
and the tally), ``total``, ``drift``, ``parity``, ``anomalies``, ``unpriced_components``,
``providers`` and, with ``--upstream``, ``upstream``, ``upstream_total``, ``margins`` and
``margin_total``. ``billing report --format csv --out DIR`` writes each as ``DIR/<section>.csv``;
to standard output it writes the one section ``--section`` names (``render_csv``).

A cell is either a number or text, by its column. Numbers are written as a spreadsheet reads them:
integers (counts, ``*_micros``), USD with six decimals (``*_usd``, ``-0.000041`` for a loss), ratios;
an empty cell is a figure the report does not have. Text (the keys: day, account, model, provider,
...) that a spreadsheet would run as a formula (starting with ``=``, ``+``, ``-``, ``@``, tab or CR)
is prefixed with ``'``; a number never is.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping
from decimal import Decimal

from worker.reports import upstream as upstream_section
from worker.reports.model import COUNT_FIELDS, MONEY_FIELDS, PARITY_FIELDS, Report, ratio
from worker.reports.render_json import tally_dict
from worker.reports.spec import KEYS, ReportError

TALLY_COLUMNS = (
    *COUNT_FIELDS,
    *(f"{name}_micros" for name in MONEY_FIELDS),
    *(f"{name}_usd" for name in MONEY_FIELDS),
    "ties_out",
    "tie_out_difference_micros",
    "tie_out_difference_usd",
)
PROVIDER_COLUMNS = (
    "provider", "usage_shape", "calls", "charged_micros", "charged_usd", "costed_calls",
    "charged_costed_micros", "provider_cost_micros", "cost_drift",
)  # fmt: skip
UPSTREAM_KEYS = tuple(name for name, _ in upstream_section.KEY_COLUMNS)
MARGIN_KEYS = ("day", "provider", "model")
# The columns whose cells are text; every other column holds numbers.
TEXT_COLUMNS = frozenset(
    {*KEYS, *UPSTREAM_KEYS, "provider", "usage_shape", "usage_field", "kind", "unpriced"}
)
# ``ties_out`` is ``yes`` or ``no``: text, and never a formula.
TEXT_COLUMNS |= {"ties_out"}
SECTIONS = (
    "groups", "total", "drift", "parity", "anomalies", "unpriced_components", "providers",
    "upstream", "upstream_total", "margins", "margin_total",
)  # fmt: skip
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?")

Table = tuple[tuple[str, ...], list[dict[str, object]]]


def safe_text(value: str) -> str:
    return "'" + value if value.startswith(FORMULA_STARTS) else value


def _number(column: str, value: object) -> object:
    """A number cell as written: ints and decimals as they are, None empty; anything else is a
    bug in the section's columns (raised, never written as text a sum would skip)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        raise ReportError(f"CSV column {column}: a flag where a number belongs")
    if isinstance(value, int | Decimal):
        return int(value) if isinstance(value, int) else value
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str) and _NUMBER.fullmatch(value):
        return value
    raise ReportError(f"CSV column {column}: {value!r} is not a number")


def _cell(column: str, value: object) -> object:
    if column in TEXT_COLUMNS:
        return "" if value is None else safe_text(str(value))
    return _number(column, value)


def _tally(tally: object) -> dict[str, object]:
    cells = tally_dict(tally)  # type: ignore[arg-type]
    cells["ties_out"] = "yes" if cells["ties_out"] else "no"
    return cells


def _drift(d: object) -> dict[str, object]:
    return {
        "model": d.model,  # type: ignore[attr-defined]
        "calls": d.calls,  # type: ignore[attr-defined]
        **{p: ratio(getattr(d, p)) for p in ("p50", "p90", "p99")},
    }


def csv_tables(report: Report) -> dict[str, Table]:
    """Every section the report has, as (columns, rows of raw cells), in ``SECTIONS`` order."""
    tables: dict[str, Table] = {
        "groups": (
            (*report.by, *TALLY_COLUMNS),
            [
                {**dict(zip(report.by, row.key, strict=True)), **_tally(row.tally)}
                for row in report.groups
            ],
        ),
        "total": (TALLY_COLUMNS, [_tally(report.total)]),
        "drift": (("model", "calls", "p50", "p90", "p99"), [_drift(d) for d in report.drift]),
    }
    if report.parity is not None:
        parity = report.parity
        tables["parity"] = (
            ("kind", "count"),
            [
                {"kind": kind, "count": count}
                for kind, count in (
                    ("pairs", parity.pairs),
                    ("matches", parity.matches),
                    ("mismatches", parity.mismatches),
                    *((f"mismatched {n}", parity.mismatched_fields[n]) for n in PARITY_FIELDS),
                )
            ],
        )
    tables["anomalies"] = (
        ("kind", "count"),
        [{"kind": kind, "count": count} for kind, count in (report.anomalies or {}).items()],
    )
    tables["unpriced_components"] = (
        ("model", "usage_field", "calls"),
        [
            {"model": u.model, "usage_field": u.usage_field, "calls": u.calls}
            for u in report.unpriced_components
        ],
    )
    tables["providers"] = (
        PROVIDER_COLUMNS,
        [
            {"provider": p.provider, "usage_shape": p.usage_shape, "calls": p.calls,
             "charged_micros": int(p.charged), "charged_usd": p.charged.usd(),
             "costed_calls": p.costed_calls, "charged_costed_micros": int(p.charged_costed),
             "provider_cost_micros": int(p.provider_cost),
             "cost_drift": None if p.cost_drift is None else ratio(p.cost_drift)}
            for p in report.providers
        ],
    )  # fmt: skip
    if report.upstream is not None:
        section = upstream_section.section_dict(report.upstream)
        flat, margin_flat = upstream_section.FLAT_NAMES, upstream_section.MARGIN_FLAT_NAMES
        tables["upstream"] = ((*UPSTREAM_KEYS, *flat, "unpriced"), list(section["rows"]))  # type: ignore[call-overload]
        tables["upstream_total"] = (flat, [section["total"]])  # type: ignore[list-item]
        tables["margins"] = ((*MARGIN_KEYS, *margin_flat), list(section["margins"]))  # type: ignore[call-overload]
        tables["margin_total"] = (margin_flat, [section["margin_total"]])  # type: ignore[list-item]
    return tables


def write_table(out: io.TextIOBase | io.StringIO, table: Table) -> None:
    columns, rows = table
    writer = csv.writer(out, lineterminator="\r\n")  # RFC 4180: a CR or LF in a cell is quoted
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(column, row.get(column)) for column in columns])


def table_text(table: Table) -> str:
    out = io.StringIO()
    write_table(out, table)
    return out.getvalue()


def render_csv(report: Report, section: str = "groups") -> str:
    """One section as CSV text (``groups`` by default)."""
    tables = csv_tables(report)
    if section not in tables:
        raise ReportError(f"the report has no CSV section {section!r}: use {', '.join(tables)}")
    return table_text(tables[section])


def render_sections(report: Report) -> Mapping[str, str]:
    """Every section as CSV text, by file name (``<section>.csv``)."""
    return {f"{name}.csv": table_text(table) for name, table in csv_tables(report).items()}
