"""``billing upstream import`` and ``billing report --upstream`` end to end on a SQLite file: the
import is idempotent, raises the leakage alert once, and every format shows the same figures."""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from ledger.factories import make_meta, settled, unsettled, voided
from sqlalchemy import select

from models import OutboxAlert
from worker.alerts.collect import collect
from worker.alerts.config import AlertConfig
from worker.cli import main
from worker.core.prices import load_price_book
from worker.core.result import Estimate, Usage
from worker.ledger.database import make_engine, session_factory, upgrade
from worker.ledger.operations import apply_result, hold
from worker.upstream.routes import record_routes

T = datetime(2031, 3, 4, 10, tzinfo=UTC)
WINDOW = ["--since", "2031-03-04", "--until", "2031-03-05"]
DAY = int(datetime(2031, 3, 4, tzinfo=UTC).timestamp())
# The ledger: one settled call (100 in, 50 out), one unsettled (estimate 98 in, 52 out), one void.
# The export: 5 requests, 598 in, 162 out: 2 requests, 400 input and 60 output tokens leaked.
LEAK = (2, 400, 60)


def _page(results: list[dict]) -> dict:
    return {
        "object": "page", "has_more": False, "next_page": None,
        "data": [{"object": "bucket", "start_time": DAY, "end_time": DAY + 86400, "results": results}],
    }  # fmt: skip


USAGE = _page([{
    "object": "organization.usage.completions.result", "input_tokens": 598, "output_tokens": 162,
    "input_cached_tokens": 20, "num_model_requests": 5, "project_id": "proj_1",
    "api_key_id": "key_a", "model": "gpt-4o-mini-2024-07-18", "batch": False,
    "service_tier": "default", "user_id": None,
}])  # fmt: skip
COSTS = _page([
    {"object": "organization.costs.result", "amount": {"value": Decimal("0.0012345"), "currency": "usd"},
     "line_item": "gpt-4o-mini-2024-07-18, input", "project_id": "proj_1"},
    {"object": "organization.costs.result", "amount": {"value": "0.002", "currency": "usd"},
     "line_item": "gpt-4o-mini-2024-07-18, output", "project_id": "proj_1"},
])  # fmt: skip


@pytest.fixture
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    url = f"sqlite:///{tmp_path / 'billing.db'}"
    upgrade(url)
    engine = make_engine(url)
    estimate = Estimate(prompt_tokens=98, completion_tokens=52, approximate=False)
    results = [
        settled("a", usage=Usage(100, 50, 20), charge=4000, created_at=T, provider="openai"),
        unsettled("b", estimate=estimate, exposure=3000, created_at=T, provider="openai"),
        voided("c", created_at=T, provider="openai"),
    ]
    with session_factory(engine)() as session, session.begin():
        for result in results:
            meta = replace(
                make_meta(result.request_id, created_at=T), provider="openai", upstream_key="key_a"
            )
            hold(session, meta, now=T)
            record_routes(session, [meta])
            apply_result(session, result, now=T, grace=timedelta(hours=1))
    engine.dispose()
    monkeypatch.setenv("DATABASE_URL", url)
    (tmp_path / "usage.json").write_bytes(orjson.dumps(USAGE, default=str))
    (tmp_path / "costs.json").write_text(
        json.dumps(COSTS, default=str).replace('"0.0012345"', "0.0012345")
    )
    return tmp_path


def _import(*files: Path) -> str:
    result = CliRunner().invoke(
        main, ["upstream", "import", "--provider", "openai", *map(str, files)]
    )
    assert result.exit_code == 0, result.output
    return result.output


def _collect(database: Path, at: datetime) -> int:
    """One alert run's aggregation (the beat job's), at ``at``; returns the outbox rows it added."""
    engine = make_engine(f"sqlite:///{database / 'billing.db'}")
    try:
        with session_factory(engine)() as session, session.begin():
            # page on any exposure, so the finding's own window pages (no digest to wait for)
            return collect(session, AlertConfig(exposure_page_micros=1), at)
    finally:
        engine.dispose()


def test_import_is_idempotent_and_alerts_once(database: Path) -> None:
    files = (database / "usage.json", database / "costs.json")
    first = _import(*files)
    assert "3 added, 0 unchanged, 0 replaced" in first and "1 cost rows rounded" in first
    later = datetime.now(UTC) + timedelta(minutes=6)  # the import's alert window has closed
    # The page; and its resolved notice when the import fell in the last half minute of its window
    # (the next window has closed by then too). That it pages once is checked below.
    assert _collect(database, later) in (1, 2)
    again = _import(*files)
    assert "0 added, 3 unchanged, 0 replaced" in again
    _collect(database, later + timedelta(minutes=5))  # may add the resolved notice, no page
    engine = make_engine(f"sqlite:///{database / 'billing.db'}")
    with session_factory(engine)() as session:
        pages = session.scalars(
            select(OutboxAlert).where(OutboxAlert.kind == "upstream_leakage")
        ).all()
    engine.dispose()
    fields = [json.loads(page.payload) for page in pages]
    leaks = [f for f in fields if f["severity"] == "page"]
    assert len(leaks) == 1, fields
    assert str(LEAK[1] + LEAK[2]) in leaks[0]["text"].replace(",", "")


def _expected_leak_cost() -> int:
    """The leaked share of the export's value at the book's gpt-4o-mini row (USD per 1M =
    micro-USD per token): the export's 598 input tokens are 578 uncached and 20 cached (at the
    cached rate), its 162 output tokens all output; 400 of the input and 60 of the output leaked.
    Rounded half-up once."""
    price = load_price_book().price_for("gpt-4o-mini-2024-07-18", T)
    assert price is not None
    input_value = Fraction(578 * price.input + 20 * price.cached_input)
    exact = input_value * LEAK[1] / 598 + Fraction(162 * price.output) * LEAK[2] / 162
    return int(exact + Fraction(1, 2))


def test_every_format_shows_the_same_reconciliation(database: Path) -> None:
    _import(database / "usage.json", database / "costs.json")
    runner = CliRunner()
    out = {
        fmt: runner.invoke(main, ["report", *WINDOW, "--upstream", "--format", fmt])
        for fmt in ("json", "csv", "table", "html")
    }
    for fmt, result in out.items():
        assert result.exit_code == 0, (fmt, result.output)
    cost = _expected_leak_cost()
    data = json.loads(out["json"].stdout)["upstream"]
    total = data["total"]
    assert (total["leak_requests"], total["leak_input"], total["leak_output"]) == LEAK
    assert (
        total["calls"],
        total["billed_calls"],
        total["unsettled_calls"],
        total["void_calls"],
    ) == (3, 1, 1, 1)
    assert (total["ledger_input"], total["ledger_output"]) == (198, 102)
    assert total["leak_cost_micros"] == cost
    assert total["confirmed_exposure_micros"] == 3000  # upstream counted all 3 calls and more
    assert [r["upstream_key"] for r in data["rows"]] == ["key_a"]
    assert data["rows"][0]["model"] == "gpt-4o-mini"
    margin = data["margin_total"]
    assert (margin["charged_micros"], margin["upstream_cost_micros"], margin["margin_micros"]) == (
        4000,
        3234,
        766,
    )
    # CSV: one tidy file per section (issue 39); standard output holds the one --section names.
    folder = database / "csv"
    written = runner.invoke(
        main, ["report", *WINDOW, "--upstream", "--format", "csv", "--out", str(folder)]
    )
    assert written.exit_code == 0, written.output
    assert "upstream_total.csv" in {p.name for p in folder.iterdir()}
    (csv_total,) = list(csv.DictReader((folder / "upstream_total.csv").open()))
    assert (csv_total["leak_requests"], csv_total["leak_input"], csv_total["leak_output"]) == tuple(
        map(str, LEAK)
    )
    assert csv_total["leak_cost_micros"] == str(cost)
    (csv_margin,) = list(csv.DictReader((folder / "margin_total.csv").open()))
    assert csv_margin["margin_micros"] == "766"
    one = runner.invoke(
        main, ["report", *WINDOW, "--upstream", "--format", "csv", "--section", "margin_total"]
    )
    assert list(csv.DictReader(io.StringIO(one.stdout))) == [csv_margin]
    html = out["html"].stdout
    cell = re.search(r'data-upstream-total="leak_input"[^>]*>([^<]*)<', html)
    assert cell is not None and cell.group(1) == str(LEAK[1])
    assert f'data-upstream-total="leak_cost" data-micros="{cost}"' in html
    assert "upstream tokens per day" in html and "<svg" in html
    table = _table_total(out["table"].stdout, "leaked input")
    assert (table["leaked requests"], table["leaked input"], table["leaked output"]) == tuple(
        map(str, LEAK)
    )
    assert table["leak at our prices"] == f"0.{cost:06d}"


def _table_total(text: str, column: str) -> dict[str, str]:
    """The total row of the ASCII table whose header names ``column``, as header -> cell."""
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("|") and f" {column} " in line)
    headers = [cell.strip() for cell in lines[head].strip("|").split("|")]
    row = next(line for line in lines[head:] if line.startswith("| total"))
    return dict(zip(headers, (cell.strip() for cell in row.strip("|").split("|")), strict=True))


def test_a_bad_file_is_one_line_naming_file_and_path(database: Path) -> None:
    bad = database / "bad.json"
    row = {"object": "organization.usage.completions.result", "input_tokens": 1, "model": "gpt-4o"}
    bad.write_bytes(orjson.dumps(_page([row])))
    result = CliRunner().invoke(main, ["upstream", "import", "--provider", "openai", str(bad)])
    assert result.exit_code == 2
    assert f"{bad}: $.data[0].results[0].num_model_requests: missing" in result.output
    assert len(result.output.strip().splitlines()) == 1
