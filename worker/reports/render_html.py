"""The report as ONE self-contained HTML file: inline CSS and inline SVG, no script, no CDN.

Every string from the database (account and model names, anomaly kinds) goes through
``html.escape``. The total row's cells carry ``data-total="<field>"`` (money cells also
``data-micros``) and the tie-out line ``data-ties-out``, so a test or a scraper reads the numbers
without parsing the layout.
"""

from __future__ import annotations

from html import escape

from worker.core.calibration import format_factor
from worker.reports import charts
from worker.reports import upstream as upstream_section
from worker.reports.model import (
    COUNTS,
    MONEY,
    PARITY_FIELDS,
    PROVIDER_HEADERS,
    REASONS,
    Report,
    Tally,
    percent_ppm,
    ratio,
)
from worker.upstream.matching import Reconciliation

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem;color:#1a202c}
h1{margin-bottom:.2rem}h2{margin-top:2rem;border-bottom:1px solid #e2e8f0}
.meta{color:#4a5568}.tie{font-weight:bold;padding:.4rem .8rem;display:inline-block;border-radius:4px}
.tie.ok{background:#c6f6d5}.tie.bad{background:#fed7d7}
table{border-collapse:collapse;margin:.5rem 0;font-size:13px}
th,td{border:1px solid #e2e8f0;padding:3px 8px}td.n{text-align:right;font-variant-numeric:tabular-nums}
thead th{background:#edf2f7;position:sticky;top:0}tfoot td{font-weight:bold;background:#f7fafc}
.cards{display:flex;flex-wrap:wrap;gap:1rem}.card{border:1px solid #e2e8f0;padding:.6rem 1rem;border-radius:6px}
tr.leak td{background:#fff5f5}.card b{display:block;font-size:1.2rem}.scroll{overflow-x:auto}svg{max-width:100%;height:auto}
"""


def _when(value: object) -> str:
    return value.isoformat().replace("+00:00", "Z")  # type: ignore[attr-defined]


def _cells(tally: Tally, total: bool) -> str:
    parts = []
    for name, _ in COUNTS:
        attr = f' data-total="{name}"' if total else ""
        parts.append(f'<td class="n"{attr}>{tally.counts[name]}</td>')
    for name, _ in MONEY:
        micros = int(tally.money[name])
        attr = f' data-total="{name}" data-micros="{micros}"' if total else ""
        parts.append(f'<td class="n"{attr}>{tally.money[name].usd()}</td>')
    diff = tally.tie_out_difference
    verdict = "ties out" if tally.ties_out else f"differs by {diff.usd()}"
    attr = f' data-total="tie_out_difference" data-micros="{int(diff)}"' if total else ""
    parts.append(f"<td{attr}>{escape(verdict)}</td>")
    return "".join(parts)


def _groups_table(report: Report) -> str:
    keys = report.by or ("",)
    head = "".join(f"<th>{escape(k)}</th>" for k in keys)
    head += "".join(f"<th>{escape(label)}</th>" for _, label in COUNTS)
    head += "".join(f"<th>{escape(label)} (USD)</th>" for _, label in MONEY)
    head += "<th>tie-out</th>"
    body = []
    for row in report.groups:
        key_cells = "".join(f"<td>{escape(v)}</td>" for v in (row.key or ("all",)))
        body.append(f"<tr>{key_cells}{_cells(row.tally, total=False)}</tr>")
    foot_keys = "<td>total</td>" + "<td></td>" * (len(keys) - 1)
    return (
        '<div class="scroll"><table id="groups"><thead><tr>' + head + "</tr></thead><tbody>"
        + "".join(body) + "</tbody><tfoot><tr>" + foot_keys + _cells(report.total, total=True)
        + "</tr></tfoot></table></div>"
    )  # fmt: skip


def _cards(report: Report) -> str:
    t = report.total
    cards = [("calls", "calls", str(t.counts["calls"]), None)]
    cards += [
        (name, label, t.money[name].usd() + " USD", int(t.money[name])) for name, label in MONEY
    ]
    return '<div class="cards">' + "".join(
        f'<div class="card">{escape(label)}<b data-card="{name}"'
        + ("" if micros is None else f' data-micros="{micros}"')
        + f">{escape(value)}</b></div>"
        for name, label, value, micros in cards
    ) + "</div>"  # fmt: skip


def _drift(report: Report) -> str:
    if not report.drift:
        return "<p>No streamed call settled with reported usage and a non-zero estimate in the window.</p>"
    rows = "".join(
        f'<tr data-drift-model="{escape(d.model)}"><td>{escape(d.model)}</td>'
        f'<td class="n">{d.calls}</td><td class="n" data-p="p50">{ratio(d.p50)}</td>'
        f'<td class="n" data-p="p90">{ratio(d.p90)}</td>'
        f'<td class="n" data-p="p99">{ratio(d.p99)}</td></tr>'
        for d in report.drift
    )
    chart = charts.range_dots(
        "drift per model: (visible - estimated) / estimated completion tokens, streamed calls",
        [(d.model, (d.p50, d.p90, d.p99)) for d in report.drift],
        ("p50", "p90", "p99"),
    )
    return (
        f'{chart}<table id="drift"><thead><tr><th>model</th><th>calls</th><th>p50</th>'
        f"<th>p90</th><th>p99</th></tr></thead><tbody>{rows}</tbody></table>"
        f'<p class="meta">Percentiles computed by {escape(report.drift_method)}; values are '
        "fractions (0.100000 = 10 %).</p>"
    )


def _calibration(report: Report) -> str:
    """The current calibration factors and their held-out error (``worker.core.calibration``)."""
    if not report.calibration:
        return "<p>No calibration factors learnt yet.</p>"
    rows = "".join(
        f'<tr data-calibration-model="{escape(c.model)}"><td>{escape(c.provider or "-")}</td>'
        f"<td>{escape(c.model)}{' (exact)' if c.exact else ''}</td>"
        f'<td class="n">{c.version}</td><td class="n">{c.held_out}</td>'
        f'<td class="n">{format_factor(c.prompt_factor_ppm)}</td>'
        f'<td class="n">{c.prompt_samples}</td>'
        f'<td class="n">{percent_ppm(c.prompt_error_raw_ppm)} &rarr; '
        f"{percent_ppm(c.prompt_error_calibrated_ppm)}</td>"
        f'<td class="n">{format_factor(c.completion_factor_ppm)}</td>'
        f'<td class="n">{c.completion_samples}</td>'
        f'<td class="n">{percent_ppm(c.completion_error_raw_ppm)} &rarr; '
        f"{percent_ppm(c.completion_error_calibrated_ppm)}</td></tr>"
        for c in report.calibration
    )
    return (
        '<table id="calibration"><thead><tr><th>provider</th><th>model</th><th>v</th>'
        "<th>held out</th><th>prompt factor</th><th>n</th><th>prompt error</th>"
        "<th>completion factor</th><th>n</th><th>completion error</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
        '<p class="meta">Current factors; errors on the calls held out of the fit, (sum estimated'
        " - sum reported) / sum reported, uncalibrated &rarr; calibrated.</p>"
    )


def _parity_and_anomalies(report: Report) -> str:
    parts = []
    if report.parity is not None:
        p = report.parity
        rows = [("pairs", p.pairs), ("matches", p.matches), ("mismatches", p.mismatches)]
        rows += [(f"mismatched {name}", p.mismatched_fields[name]) for name in PARITY_FIELDS]
        parts.append(
            '<h2>Parity pairs (streamed vs non-streamed twins)</h2><table id="parity"><tbody>'
            + "".join(
                f'<tr><td>{escape(k)}</td><td class="n" data-parity="{escape(k)}">{v}</td></tr>'
                for k, v in rows
            )
            + "</tbody></table>"
        )
    if report.anomalies is not None:
        rows = "".join(
            f'<tr><td>{escape(kind)}</td><td class="n" data-anomaly="{escape(kind)}">{n}</td></tr>'
            for kind, n in report.anomalies.items()
        )
        parts.append(
            "<h2>Contract anomalies</h2>"
            + (f'<table id="anomalies"><tbody>{rows}</tbody></table>' if rows else "<p>none</p>")
        )
    parts.append(_unpriced(report))
    return "".join(parts)


def _unpriced(report: Report) -> str:
    """Calls unsettled ``unpriced_component`` per model and usage field (each count carries
    ``data-unpriced-model`` and ``data-unpriced-field``): the prices to add."""
    rows = "".join(
        f"<tr><td>{escape(u.model)}</td><td>{escape(u.usage_field)}</td>"
        f'<td class="n" data-unpriced-model="{escape(u.model)}"'
        f' data-unpriced-field="{escape(u.usage_field)}">{u.calls}</td></tr>'
        for u in report.unpriced_components
    )
    return "<h2>Unpriced components: calls unsettled by a usage field without a price</h2>" + (
        '<table id="unpriced"><thead><tr><th>model</th><th>usage field</th>'
        f"<th>calls unsettled</th></tr></thead><tbody>{rows}</tbody></table>"
        if rows
        else "<p>none</p>"
    )


def _providers(report: Report) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in PROVIDER_HEADERS)
    rows = "".join(
        "<tr>"
        f"<td>{escape(p.provider)}</td><td>{escape(p.usage_shape)}</td>"
        f'<td class="n">{p.calls}</td><td class="n">{p.charged.usd()}</td>'
        f'<td class="n">{p.costed_calls}</td><td class="n">{p.charged_costed.usd()}</td>'
        f'<td class="n">{p.provider_cost.usd()}</td>'
        f'<td class="n">{"" if p.cost_drift is None else ratio(p.cost_drift)}</td>'
        "</tr>"
        for p in report.providers
    )
    return "<h2>Providers: usage shapes and the provider's own cost</h2>" + (
        f'<table id="providers"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'
        if rows
        else "<p>no calls with a usage record</p>"
    )


def render_html(report: Report) -> str:
    t = report.total
    days = [row.key[0] for row in report.days]
    money_chart = charts.grouped_bars(
        "charged vs exposure of open failures per day (USD)",
        days,
        [
            ("charged", [int(row.tally.money["charged"]) for row in report.days]),
            ("exposure", [int(row.tally.money["exposure"]) for row in report.days]),
        ],
        value_label="{:,.6f}",
        scale=1_000_000,
    )
    reason_chart = charts.horizontal_bars(
        "unsettled calls by reason",
        [(reason, t.counts[f"unsettled_{reason}"]) for reason in REASONS],
    )
    diff = t.tie_out_difference
    tie = (
        "held = charged from holds + released + still held: ties out"
        if report.ties_out
        else f"held = charged from holds + released + still held: DIFFERS by {diff.usd()} USD"
    )
    window = f"{_when(report.since)} to {_when(report.until)}"
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>Billing report {escape(window)}</title><style>{STYLE}</style></head><body>"
        "<h1>Billing report</h1>"
        f'<p class="meta">Calls created from {escape(_when(report.since))} (inclusive) to '
        f"{escape(_when(report.until))} (exclusive), UTC. Grouped by "
        f"{escape(', '.join(report.by) or 'nothing (totals only)')}. Generated "
        f"{escape(_when(report.generated_at))}. Money in USD with six decimals; still held and "
        "exposure as of generation.</p>"
        f'<p class="tie {"ok" if report.ties_out else "bad"}" '
        f'data-ties-out="{"true" if report.ties_out else "false"}">{escape(tie)}</p>'
        f"{_cards(report)}"
        f"<h2>Money per day</h2>{money_chart}"
        f"<h2>Unsettled calls</h2>{reason_chart}"
        f"<h2>Calls and money by group</h2>{_groups_table(report)}"
        f"<h2>Drift of visible completion tokens per model (streamed)</h2>{_drift(report)}"
        f"<h2>Calibration of estimates per model</h2>{_calibration(report)}"
        f"{_parity_and_anomalies(report)}"
        f"{_providers(report)}"
        f"{'' if report.upstream is None else _upstream(report.upstream)}"
        "</body></html>\n"
    )


def _upstream(found: Reconciliation) -> str:
    """The upstream section: a chart of matched, leaked and over-counted tokens per day, the table
    (total cells carry ``data-upstream-total``, money also ``data-micros``) and the margins."""
    days = sorted({row.day for row in found.rows})
    series: dict[str, dict[str, int]] = {"matched": {}, "leaked": {}, "over-count": {}}
    for row in found.rows:
        for name, value in (
            ("matched", row.matched_input + row.matched_output),
            ("leaked", row.leak_input + row.leak_output),
            ("over-count", row.over_input + row.over_output),
        ):
            series[name][row.day] = series[name].get(row.day, 0) + value
    chart = charts.grouped_bars(
        "upstream tokens per day: matched, leaked (no billed call), over-count (billed beyond)",
        days,
        [(name, [per_day.get(day, 0) for day in days]) for name, per_day in series.items()],
    )
    columns = upstream_section.COLUMNS
    head = "".join(f"<th>{escape(label)}</th>" for _, label in upstream_section.KEY_COLUMNS)
    head += "".join(f"<th>{escape(c.label)}{' (USD)' if c.money else ''}</th>" for c in columns)
    body = []
    for row in found.rows:
        figures = upstream_section.values(row)
        keys = "".join(f"<td>{escape(k)}</td>" for k in upstream_section.row_keys(row))
        cells = "".join(
            f'<td class="n">{upstream_section.shown(figures[c.name], c.money)}</td>'
            for c in columns
        )
        body.append(f"<tr{' class=leak' if row.leaks else ''}>{keys}{cells}</tr>")
    summed = upstream_section.totals(found)
    foot = "<td>total</td>" + "<td></td>" * (len(upstream_section.KEY_COLUMNS) - 1)
    for c in columns:
        value = summed[c.name]
        micros = f' data-micros="{value}"' if c.money and value is not None else ""
        foot += (
            f'<td class="n" data-upstream-total="{c.name}"{micros}>'
            f"{upstream_section.shown(value, c.money)}</td>"
        )
    margins = "".join(
        f"<tr><td>{escape(m.day)}</td><td>{escape(m.provider)}</td>"
        f"<td>{escape(m.model or '(no model)')}</td>"
        + "".join(
            f'<td class="n">{upstream_section.shown(v, True)}</td>'
            for v in upstream_section.margin_values(m).values()
        )
        + "</tr>"
        for m in found.margins
    )
    margin_total = "".join(
        f'<td class="n" data-margin-total="{name}">{upstream_section.shown(v, True)}</td>'
        for name, v in upstream_section.margin_totals(found).items()
    )
    missing = (
        "".join(
            f"<p>No export imported for provider {escape(p)} ({n} calls).</p>"
            for p, n in found.not_imported
        )
        + "".join(
            f'<p class="incomplete">{escape(line)}</p>'
            for line in upstream_section.incomplete_lines(found)
        )
        + "".join(
            f'<p class="unpriced">{escape(line)}</p>'
            for line in upstream_section.unpriced_lines(found)
        )
    )
    return (
        "<h2>Upstream: the providers' exports against the ledger</h2>"
        f"{chart}"
        '<div class="scroll"><table id="upstream"><thead><tr>' + head + "</tr></thead><tbody>"
        + "".join(body) + "</tbody><tfoot><tr>" + foot + "</tr></tfoot></table></div>"
        "<h2>Gross margin: charged against the providers' costs</h2>"
        '<table id="margins"><thead><tr><th>day</th><th>provider</th><th>model</th>'
        "<th>charged (USD)</th><th>upstream cost (USD)</th><th>margin (USD)</th></tr></thead>"
        f"<tbody>{margins}</tbody><tfoot><tr><td>total</td><td></td><td></td>{margin_total}"
        f"</tr></tfoot></table>{missing}"
    )  # fmt: skip
