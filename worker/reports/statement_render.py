"""An account's statement as a table, CSV, JSON or one self-contained HTML page.

The report renderers' conventions: money as USD with six decimals (JSON and CSV also carry
``*_micros`` integers), times in UTC with ``Z``, names through ``worker.core.terminal.printable`` on a
table, ``html.escape`` in HTML, and a CSV text cell a spreadsheet would run as a formula prefixed
with ``'``. Every format shows the same figures: each is read off ``statement_dict``.
"""

from __future__ import annotations

import csv
import io
from html import escape
from typing import Any

import orjson

from worker.core.money import Micros
from worker.core.terminal import printable
from worker.reports.render_csv import safe_text
from worker.reports.statement_model import CHARGE_COLUMNS, RELEASES, Position, Statement

POSITION_FIELDS = ("funded", "charged", "balance", "held", "available")


def _iso(value: Any) -> str:
    return value.isoformat().replace("+00:00", "Z")


def _money(amount: Micros) -> dict[str, Any]:
    return {"micros": int(amount), "usd": amount.usd()}


def _position(position: Position) -> dict[str, Any]:
    return {name: _money(getattr(position, name)) for name in POSITION_FIELDS}


def statement_dict(s: Statement) -> dict[str, Any]:
    return {
        "account_id": s.account_id,
        "month": s.month,
        "period": {"from": _iso(s.start), "until": _iso(s.as_of)},
        "complete": s.complete,
        "generated_at": _iso(s.generated_at),
        "opening": _position(s.opening),
        "credits": [
            {"at": _iso(c.at), "kind": c.kind, "key": c.key, "note": c.note, **_money(c.amount)}
            for c in s.credits
        ],
        "credited": _money(s.credited),
        "charges": [
            {
                "day": row.day.isoformat(),
                "model": row.model,
                "calls": row.calls,
                **{name: _money(row.money[name]) for name, _ in CHARGE_COLUMNS},
                "total": _money(row.total),
            }
            for row in s.charges
        ],
        "charged": {**_money(s.charged), **{n: _money(v) for n, v in s.charge_totals.items()}},
        "holds": _money(s.holds),
        "releases": {name: _money(s.releases[name]) for name, _ in RELEASES},
        "released": _money(s.released),
        "open_failures": [
            {
                "request_id": f.request_id,
                "model": f.model,
                "reason": f.reason,
                "detected_at": _iso(f.detected_at),
                "held": _money(f.held),
                "exposure": None if f.exposure is None else _money(f.exposure),
            }
            for f in s.open_failures
        ],
        "closing": _position(s.closing),
        "ties_out": s.ties_out,
        "differences": {name: _money(amount) for name, amount in s.differences.items()},
    }


def render_json(s: Statement) -> str:
    return orjson.dumps(statement_dict(s), option=orjson.OPT_INDENT_2).decode() + "\n"


def _lines(s: Statement) -> list[tuple[str, str, str, str, Micros | None]]:
    """(section, label, day or time, detail, amount): the statement as rows, for table and CSV."""
    rows: list[tuple[str, str, str, str, Micros | None]] = []
    for name in POSITION_FIELDS:
        rows.append(("opening", name, _iso(s.start), "", getattr(s.opening, name)))
    for c in s.credits:
        rows.append(("credit", c.kind, _iso(c.at), f"{c.key}: {c.note}", c.amount))
    rows.append(("credits", "total", "", "", s.credited))
    for row in s.charges:
        for name, label in CHARGE_COLUMNS:
            if row.money[name]:
                rows.append(("charge", label, row.day.isoformat(), row.model, row.money[name]))
        rows.append(("charge", "total", row.day.isoformat(), f"{row.model} ({row.calls} calls)",
                     row.total))  # fmt: skip
    for name, label in CHARGE_COLUMNS:
        rows.append(("charges", label, "", "", s.charge_totals[name]))
    rows.append(("charges", "total", "", "", s.charged))
    rows.append(("holds", "posted", "", "", s.holds))
    for name, label in RELEASES:
        rows.append(("releases", label, "", "", s.releases[name]))
    for f in s.open_failures:
        exposure = "unpriced" if f.exposure is None else f"exposure {f.exposure.usd()}"
        rows.append(("open failure", f.reason, _iso(f.detected_at),
                     f"{f.request_id} {f.model} {exposure}", f.held))  # fmt: skip
    for name in POSITION_FIELDS:
        rows.append(("closing", name, _iso(s.as_of), "", getattr(s.closing, name)))
    for name, amount in s.differences.items():
        rows.append(("tie-out", f"{name} difference", "", "", amount))
    return rows


def _title(s: Statement) -> str:
    state = "" if s.complete else f" (to date: {_iso(s.as_of)})"
    return f"statement {s.account_id} {s.month}{state}, USD"


def _verdict(s: Statement) -> str:
    if s.ties_out:
        return "ties out: opening + credits - charges = closing; held and available agree"
    differs = ", ".join(f"{k} {v.usd()}" for k, v in s.differences.items() if v)
    return f"DIFFERS: {differs}"


def render_table(s: Statement) -> str:
    out = [printable(_title(s))]
    for section, label, when, detail, amount in _lines(s):
        shown = "" if amount is None else amount.usd()
        out.append(
            printable(f"  {section:<13} {label:<31} {when:<27} {shown:>18}  {detail}").rstrip()
        )
    out.append(_verdict(s))
    return "\n".join(out) + "\n"


CSV_COLUMNS = ("section", "label", "when", "detail", "micros", "usd")


def render_csv(s: Statement) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for section, label, when, detail, amount in _lines(s):
        writer.writerow([section, label, when, safe_text(detail),
                         "" if amount is None else int(amount),
                         "" if amount is None else amount.usd()])  # fmt: skip
    return buffer.getvalue()


def render_html(s: Statement) -> str:
    """One self-contained page (inline CSS, no script); every amount cell carries
    ``data-micros``, the tie-out line ``data-ties-out``."""
    body = []
    section = None
    for name, label, when, detail, amount in _lines(s):
        if name != section:
            body.append(f'<tr class="section"><th colspan="4">{escape(name)}</th></tr>')
            section = name
        cell = (
            ""
            if amount is None
            else f'<td class="n" data-micros="{int(amount)}">{amount.usd()}</td>'
        )
        body.append(
            f"<tr><td>{escape(label)}</td><td>{escape(when)}</td><td>{escape(detail)}</td>{cell}</tr>"
        )
    ok = "true" if s.ties_out else "false"
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(_title(s))}</title><style>"
        "body{font-family:system-ui,sans-serif;margin:2rem}table{border-collapse:collapse}"
        "td,th{border:1px solid #e2e8f0;padding:3px 8px}td.n{text-align:right;"
        "font-variant-numeric:tabular-nums}tr.section th{background:#edf2f7;text-align:left}"
        f"</style></head><body><h1>{escape(_title(s))}</h1>"
        f'<p data-ties-out="{ok}">{escape(_verdict(s))}</p>'
        f"<table><tbody>{''.join(body)}</tbody></table></body></html>\n"
    )


RENDERERS = {"table": render_table, "csv": render_csv, "json": render_json, "html": render_html}
