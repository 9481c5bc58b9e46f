"""The report as text tables for a terminal (rich, ASCII borders so it also pipes and greps).

Three tables per group row plus a ``total`` row: calls, unsettled and resolved, money (USD, six
decimals); then the tie-out line, drift per model, parity, anomalies and the unpriced components.
"""

from __future__ import annotations

import io

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from worker.core.calibration import format_factor
from worker.core.terminal import printable
from worker.reports import upstream as upstream_section
from worker.reports.model import (
    COUNTS,
    MONEY,
    PARITY_FIELDS,
    PROVIDER_HEADERS,
    Report,
    Tally,
    percent_ppm,
    ratio,
)
from worker.upstream.matching import Reconciliation

CALL_COLUMNS = tuple(c for c in COUNTS if not c[0].startswith(("unsettled_", "resolved_")))
UNSETTLED_COLUMNS = tuple(c for c in COUNTS if c[0].startswith(("unsettled_", "resolved_")))


def _cell(text: str) -> str:
    """Text from the ledger (account ids, model names, kinds) as a cell: terminal controls escaped
    (``worker.core.terminal``), then rich markup escaped."""
    return escape(printable(text))


def _when(value: object) -> str:
    return value.isoformat().replace("+00:00", "Z")  # type: ignore[attr-defined]


def _table(report: Report, title: str, cells: list[tuple[str, object]]) -> Table:
    """``cells``: (header, function of a Tally returning the cell text)."""
    table = Table(title=title, box=box.ASCII, title_justify="left")
    for key in report.by or ("",):
        table.add_column(key or "", no_wrap=True)
    for header, _ in cells:
        table.add_column(header, justify="right", no_wrap=True)

    def add(key: tuple[str, ...], tally: Tally, *, last: bool = False) -> None:
        values = [fn(tally) for _, fn in cells]  # type: ignore[operator]
        table.add_row(*(_cell(k) for k in key), *values, end_section=last)

    for row in report.groups:
        add(row.key or ("all",), row.tally)
    if report.groups:
        table.rows[-1].end_section = True
    total_key = ("total", *([""] * (max(len(report.by), 1) - 1)))
    add(total_key, report.total)
    return table


def _verdict(tally: Tally) -> str:
    return "yes" if tally.ties_out else f"DIFFERS {tally.tie_out_difference.usd()}"


def render_table(report: Report, width: int = 1000) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, highlight=False, soft_wrap=False)
    console.print(
        f"billing report  {_when(report.since)} .. {_when(report.until)} (UTC, half-open)"
        f"  by {','.join(report.by) or 'nothing (totals)'}  generated {_when(report.generated_at)}"
    )
    for title, columns in (("calls", CALL_COLUMNS), ("unsettled and resolved", UNSETTLED_COLUMNS)):
        counts = [(label, lambda t, n=name: str(t.counts[n])) for name, label in columns]
        console.print(_table(report, title, counts))  # type: ignore[arg-type]
    money = [(f"{label} (USD)", lambda t, n=name: t.money[n].usd()) for name, label in MONEY]
    money.append(("ties out", _verdict))
    console.print(_table(report, "money", money))  # type: ignore[arg-type]
    verdict = (
        "ties out"
        if report.ties_out
        else f"DIFFERS by {report.total.tie_out_difference.usd()} USD overall"
    )
    console.print(f"held = charged from holds + released + still held: {verdict}")
    console.print(
        "drift of streamed calls, (visible - estimated) / estimated completion tokens, per model"
        f" ({report.drift_method})"
    )
    drift = Table(box=box.ASCII)
    for header in ("model", "calls", "p50", "p90", "p99"):
        drift.add_column(header, justify="left" if header == "model" else "right", no_wrap=True)
    for d in report.drift:
        drift.add_row(_cell(d.model), str(d.calls), ratio(d.p50), ratio(d.p90), ratio(d.p99))
    console.print(
        drift if report.drift else "drift: no streamed calls with reported usage and an estimate"
    )
    if report.parity is not None:
        p = report.parity
        fields = ", ".join(f"{name} {p.mismatched_fields[name]}" for name in PARITY_FIELDS)
        console.print(
            f"parity pairs {p.pairs}: matches {p.matches}, mismatches {p.mismatches} ({fields})"
        )
    if report.anomalies is not None:
        listed = ", ".join(f"{k} {v}" for k, v in report.anomalies.items()) or "none"
        console.print(f"anomalies: {_cell(listed)}")
    _unpriced(console, report)
    console.print(
        "providers: calls with a usage record by usage shape; ours vs the provider's own cost"
    )
    providers = Table(box=box.ASCII)
    for header in PROVIDER_HEADERS:
        left = header in ("provider", "usage shape")
        providers.add_column(header, justify="left" if left else "right", no_wrap=True)
    for p in report.providers:
        drift = "" if p.cost_drift is None else ratio(p.cost_drift)
        providers.add_row(
            _cell(p.provider), _cell(p.usage_shape), str(p.calls), p.charged.usd(),
            str(p.costed_calls), p.charged_costed.usd(), p.provider_cost.usd(), drift,
        )  # fmt: skip
    console.print(providers if report.providers else "providers: no calls with a usage record")
    _calibration(console, report)
    if report.upstream is not None:
        _upstream(console, report.upstream)
    return out.getvalue()


def _calibration(console: Console, report: Report) -> None:
    """The current calibration factors per (provider, model), and on the calls held out of their
    fit the estimate's error before and after (``worker.core.calibration``)."""
    if not report.calibration:
        console.print("calibration: no factors learnt yet")
        return
    console.print(
        "calibration of estimates (current factors): factor, fit sample, and on held-out calls"
        " the estimate's error uncalibrated -> calibrated"
    )
    table = Table(box=box.ASCII)
    headers = ("provider", "model", "v", "held out", "prompt", "n", "error", "completion", "n",
               "error")  # fmt: skip
    for header in headers:
        left = header in ("provider", "model")
        table.add_column(header, justify="left" if left else "right", no_wrap=True)
    for c in report.calibration:
        table.add_row(
            _cell(c.provider or "-"), _cell(c.model) + (" (exact)" if c.exact else ""),
            str(c.version), str(c.held_out),
            format_factor(c.prompt_factor_ppm), str(c.prompt_samples),
            f"{percent_ppm(c.prompt_error_raw_ppm)} -> {percent_ppm(c.prompt_error_calibrated_ppm)}",
            format_factor(c.completion_factor_ppm), str(c.completion_samples),
            f"{percent_ppm(c.completion_error_raw_ppm)} -> {percent_ppm(c.completion_error_calibrated_ppm)}",
        )  # fmt: skip
    console.print(table)


def _unpriced(console: Console, report: Report) -> None:
    """Calls unsettled ``unpriced_component`` per model and usage field: the prices to add."""
    if not report.unpriced_components:
        console.print("unpriced components: none")
        return
    console.print(
        "unpriced components: calls unsettled unpriced_component by model and the usage field the"
        " book has no price for (a call naming two fields counts under each)"
    )
    table = Table(box=box.ASCII)
    for header in ("model", "usage field", "calls unsettled"):
        table.add_column(header, justify="right" if header.startswith("calls") else "left")
    for row in report.unpriced_components:
        table.add_row(_cell(row.model), _cell(row.usage_field), str(row.calls))
    console.print(table)


# The columns ``make demo`` shows: what leaked and what was over-counted, beside both sides' counts.
COMPACT = (
    "upstream_requests", "calls", "leak_requests", "leak_input", "leak_output", "leak_cost",
    "over_requests", "over_input", "over_output",
)  # fmt: skip


def render_upstream(found: Reconciliation, width: int = 1000, *, compact: bool = False) -> str:
    """The upstream section alone, as text tables; ``compact``: the leak and over-count columns
    only, and no margins (what ``make demo`` prints)."""
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, highlight=False, soft_wrap=False)
    _upstream(console, found, COMPACT if compact else None)
    return out.getvalue()


def _upstream(
    console: Console, found: Reconciliation, names: tuple[str, ...] | None = None
) -> None:
    """The upstream reconciliation: a row per (day, provider, model, key, tier) and a total row, then
    the margin per (day, provider, model)."""
    console.print(
        "upstream: the providers' exports against the ledger (tokens; money in USD); leaked = "
        "upstream beyond the ledger, over-count = the ledger beyond upstream"
    )
    columns = [c for c in upstream_section.COLUMNS if names is None or c.name in names]
    table = Table(box=box.ASCII)
    for _, label in upstream_section.KEY_COLUMNS:
        table.add_column(label, no_wrap=True)
    for column in columns:
        table.add_column(column.label, justify="right", no_wrap=True)
    for row in found.rows:
        figures = upstream_section.values(row)
        table.add_row(
            *(_cell(k) for k in upstream_section.row_keys(row)),
            *(upstream_section.shown(figures[c.name], c.money) for c in columns),
        )
    if found.rows:
        table.rows[-1].end_section = True
    summed = upstream_section.totals(found)
    blank = [""] * (len(upstream_section.KEY_COLUMNS) - 1)
    table.add_row(
        "total", *blank, *(upstream_section.shown(summed[c.name], c.money) for c in columns)
    )
    console.print(table if found.rows else "upstream: no export imported for the window")
    if names is not None:
        return
    margins = Table(box=box.ASCII)
    for header in ("day", "provider", "model"):
        margins.add_column(header, no_wrap=True)
    for _, label in upstream_section.MARGIN_COLUMNS:
        margins.add_column(f"{label} (USD)", justify="right", no_wrap=True)
    for margin in found.margins:
        figures = upstream_section.margin_values(margin)
        margins.add_row(
            _cell(margin.day), _cell(margin.provider), _cell(margin.model or "(no model)"),
            *(upstream_section.shown(figures[n], True) for n, _ in upstream_section.MARGIN_COLUMNS),
        )  # fmt: skip
    summed = upstream_section.margin_totals(found)
    margins.add_row(
        "total", "", "",
        *(upstream_section.shown(summed[n], True) for n, _ in upstream_section.MARGIN_COLUMNS),
    )  # fmt: skip
    console.print("gross margin: charged against the providers' costs, per day, provider, model")
    console.print(margins)
    for provider, calls in found.not_imported:
        console.print(
            f"upstream: no export imported for provider {_cell(provider)} ({calls} calls)"
        )
    for line in (
        *upstream_section.incomplete_lines(found),
        *upstream_section.unpriced_lines(found),
    ):
        console.print(f"upstream: {_cell(line)}")
