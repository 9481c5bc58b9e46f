"""The report's upstream section (``billing report --upstream``): one table of columns that every
renderer reads, so every format shows the same figures (``worker.upstream.matching`` computes them).

Columns per (day, provider, model, upstream key, tier) row; money columns are integer micro-USD (shown in
USD by the renderers), the others counts. ``None`` is a figure the export does not have (Anthropic
counts no requests; a leak the price book cannot price at its tier has no leak cost, and
``unpriced_lines`` says why): empty in every format.
The total row sums each column over the rows, so leakage and over-count are never netted against
each other across grains.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from worker.core.money import Micros
from worker.upstream.matching import Margin, Reconciliation, Row


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    label: str
    value: Callable[[Row], int | None]
    money: bool = False


KEY_COLUMNS = (
    ("day", "day"),
    ("provider", "provider"),
    ("model", "model"),
    ("upstream_key", "key"),
    ("tier", "tier"),
)
COLUMNS = (
    Column("upstream_requests", "upstream requests", lambda r: r.upstream.requests),
    Column("upstream_input", "upstream input", lambda r: r.upstream.input_tokens),
    Column("upstream_cached", "of which cached", lambda r: r.upstream.cached_tokens),
    Column("upstream_output", "upstream output", lambda r: r.upstream.output_tokens),
    Column("calls", "ledger calls", lambda r: r.ledger.calls),
    Column("billed_calls", "billed", lambda r: r.ledger.billed_calls),
    Column("unsettled_calls", "unsettled", lambda r: r.ledger.unsettled_calls),
    Column("void_calls", "void", lambda r: r.ledger.void_calls),
    Column("ledger_input", "ledger input", lambda r: r.ledger.input_tokens),
    Column("ledger_output", "ledger output", lambda r: r.ledger.output_tokens),
    Column("matched_input", "matched input", lambda r: r.matched_input),
    Column("matched_output", "matched output", lambda r: r.matched_output),
    Column("leak_requests", "leaked requests", lambda r: r.leak_requests),
    Column("leak_input", "leaked input", lambda r: r.leak_input),
    Column("leak_output", "leaked output", lambda r: r.leak_output),
    Column("leak_cost", "leak at our prices", lambda r: r.leak_cost, money=True),
    Column("over_requests", "over-count requests", lambda r: r.over_requests),
    Column("over_input", "over-count input", lambda r: r.over_input),
    Column("over_output", "over-count output", lambda r: r.over_output),
    Column("charged", "charged", lambda r: r.ledger.charged, money=True),
    Column("open_exposure", "open exposure", lambda r: r.ledger.open_exposure, money=True),
    Column(
        "confirmed_exposure", "exposure upstream confirms", lambda r: r.confirmed_exposure, True
    ),
)
MARGIN_COLUMNS = (("charged", "charged"), ("upstream_cost", "upstream cost"), ("margin", "margin"))


def row_keys(row: Row) -> tuple[str, str, str, str, str]:
    return (row.day, row.provider, row.model, row.upstream_key, row.tier)


def _plain(value: int | None) -> int | None:
    """A plain int (``Micros`` prints as its repr in CSV), or None."""
    return None if value is None else int(value)


def values(row: Row) -> dict[str, int | None]:
    return {column.name: _plain(column.value(row)) for column in COLUMNS}


def totals(found: Reconciliation) -> dict[str, int | None]:
    """Each column summed over the rows; None only when no row has the figure."""
    summed: dict[str, int | None] = {}
    for column in COLUMNS:
        present = [v for v in (_plain(column.value(row)) for row in found.rows) if v is not None]
        summed[column.name] = sum(present) if present else None
    return summed


def margin_values(margin: Margin) -> dict[str, int | None]:
    return {
        "charged": int(margin.charged),
        "upstream_cost": None if margin.upstream_cost is None else int(margin.upstream_cost),
        "margin": None if margin.margin is None else int(margin.margin),
    }


def margin_totals(found: Reconciliation) -> dict[str, int | None]:
    """Charged and upstream cost summed over the margin rows, and the margin computed from them as
    each row's is: charged minus cost, so ``margin = charged - upstream_cost`` holds on the total
    row too. A row without a cost export leaves the total cost and margin unknown (None), never
    a margin of the costed rows beside a charge of all of them."""
    charged = sum(int(m.charged) for m in found.margins)
    if not found.margins or any(m.upstream_cost is None for m in found.margins):
        costed = [int(m.upstream_cost) for m in found.margins if m.upstream_cost is not None]
        return {"charged": charged, "upstream_cost": sum(costed) if costed else None,
                "margin": None}  # fmt: skip
    cost = sum(int(m.upstream_cost or 0) for m in found.margins)
    return {"charged": charged, "upstream_cost": cost, "margin": charged - cost}


def incomplete_lines(found: Reconciliation) -> list[str]:
    """One sentence per export known to be incomplete (a has_more page without its next)."""
    return [
        f"INCOMPLETE: the {gap.provider} {gap.kind} export is missing the pages after "
        f"{gap.after.isoformat()} ({gap.source} said has_more); its figures from then on are short"
        for gap in found.incomplete
    ]


def unpriced_lines(found: Reconciliation) -> list[str]:
    """One sentence per row whose leak has no cost at our prices, and why (never a guess)."""
    return [
        f"UNPRICED: {row.day} {row.provider} {row.model} key {row.upstream_key} tier {row.tier}: "
        f"{row.leak_input} input and {row.leak_output} output tokens leaked, not priced: "
        f"{row.unpriced}"
        for row in found.rows
        if row.unpriced is not None
    ]


def shown(value: int | None, money: bool) -> str:
    """A cell as text: USD with six decimals for money, the integer otherwise, '' for None."""
    if value is None:
        return ""
    return Micros(value).usd() if money else str(value)


def flat(figures: dict[str, int | None], money: set[str]) -> dict[str, object]:
    """Figures as JSON and CSV carry them: money as ``<name>_micros`` and ``<name>_usd``."""
    cells: dict[str, object] = {}
    for name, value in figures.items():
        if name in money:
            cells[f"{name}_micros"] = value
            cells[f"{name}_usd"] = None if value is None else Micros(value).usd()
        else:
            cells[name] = value
    return cells


MONEY_NAMES = {column.name for column in COLUMNS if column.money} | {
    name for name, _ in MARGIN_COLUMNS
}
FLAT_NAMES = tuple(
    cell
    for column in COLUMNS
    for cell in (
        (f"{column.name}_micros", f"{column.name}_usd") if column.money else (column.name,)
    )
)
MARGIN_FLAT_NAMES = tuple(
    cell for name, _ in MARGIN_COLUMNS for cell in (f"{name}_micros", f"{name}_usd")
)


def section_dict(found: Reconciliation) -> dict[str, object]:
    """The section as JSON: rows (with why a leak is unpriced, or None), total (column sums),
    margins, margin total, not imported, incomplete."""
    return {
        "rows": [
            {**dict(zip((k for k, _ in KEY_COLUMNS), row_keys(row), strict=True)),
             **flat(values(row), MONEY_NAMES), "unpriced": row.unpriced}
            for row in found.rows
        ],
        "total": flat(totals(found), MONEY_NAMES),
        "margins": [
            {"day": m.day, "provider": m.provider, "model": m.model,
             **flat(margin_values(m), MONEY_NAMES)}
            for m in found.margins
        ],
        "margin_total": flat(margin_totals(found), MONEY_NAMES),
        "not_imported": [{"provider": p, "calls": n} for p, n in found.not_imported],
        "incomplete": [
            {"provider": g.provider, "kind": g.kind, "after": g.after.isoformat(),
             "source": g.source}
            for g in found.incomplete
        ],
    }  # fmt: skip
