"""One report, four formats, the same numbers; hostile names stay text; HTML in real Chromium."""

from __future__ import annotations

import html
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from reports.book import SINCE, UNTIL, post, scenario
from reports.formats import LABEL_TO_FIELD, csv_rows, from_html, from_json, table_total
from worker.reports.model import COUNT_FIELDS, MONEY_FIELDS, Report
from worker.reports.query import build_report
from worker.reports.render_csv import render_csv
from worker.reports.render_html import render_html
from worker.reports.render_json import render_json
from worker.reports.render_table import render_table
from worker.reports.spec import ReportSpec

SCRIPT = "<script>document.title='pwned'</script>"
IMG = '"><img src=x onerror="document.title=\'pwned\'">'
FORMULA = '=HYPERLINK("http://x")&<b>'


@pytest.fixture
def report(session: Session) -> Report:
    prefix = uuid.uuid4().hex[:8]
    post(
        session, scenario(prefix, account_a=SCRIPT + prefix, account_b=FORMULA + prefix, model=IMG)
    )
    return build_report(session.connection(), ReportSpec(SINCE, UNTIL, ("day", "account", "model")))


def test_every_format_carries_the_same_totals(report: Report) -> None:
    data = from_json(render_json(report))
    total = data["total"]
    # CSV: the total row, micros and USD.
    (csv_total,) = csv_rows(render_csv(report, "total"))
    for name in COUNT_FIELDS:
        assert int(csv_total[name]) == total[name]
    for name in MONEY_FIELDS:
        assert int(csv_total[f"{name}_micros"]) == total[f"{name}_micros"]
        assert csv_total[f"{name}_usd"] == total[f"{name}_usd"]
    # Table: the total row of each table, USD with six decimals.
    cells = table_total(render_table(report))
    by_field = {LABEL_TO_FIELD[h]: v for h, v in cells.items() if h in LABEL_TO_FIELD}
    assert set(by_field) == set(COUNT_FIELDS) | set(MONEY_FIELDS)
    for name in COUNT_FIELDS:
        assert int(by_field[name]) == total[name]
    for name in MONEY_FIELDS:
        assert by_field[name] == total[f"{name}_usd"]
    assert cells["ties out"] == ("yes" if total["ties_out"] else cells["ties out"])
    # HTML: the marked total cells, and money's exact micros.
    page = from_html(render_html(report))
    for name in COUNT_FIELDS:
        assert int(page.totals[name]) == total[name]
    for name in MONEY_FIELDS:
        assert page.totals[name] == total[f"{name}_usd"]
        assert page.micros[name] == total[f"{name}_micros"]
    assert page.ties_out == ("true" if data["ties_out"] else "false")


def test_every_format_carries_the_same_group_rows(report: Report) -> None:
    data = from_json(render_json(report))
    groups = {(g["day"], g["account"], g["model"]): g for g in data["groups"]}
    assert len(groups) == len(report.groups)
    for row in csv_rows(render_csv(report, "groups")):
        account = row["account"][1:] if row["account"].startswith("'=") else row["account"]
        g = groups[(row["day"], account, row["model"])]
        assert {n: int(row[n]) for n in COUNT_FIELDS} == {n: g[n] for n in COUNT_FIELDS}
        assert {n: row[f"{n}_usd"] for n in MONEY_FIELDS} == {
            n: g[f"{n}_usd"] for n in MONEY_FIELDS
        }
    page = from_html(render_html(report))
    body = [r for r in page.group_rows[1:] if r and r[0] != "total"]
    assert len(body) == len(groups)
    for cells in body:
        g = groups[(cells[0], cells[1], cells[2])]
        values = cells[3 : 3 + len(COUNT_FIELDS) + len(MONEY_FIELDS)]
        assert values == [str(g[n]) for n in COUNT_FIELDS] + [g[f"{n}_usd"] for n in MONEY_FIELDS]


def test_drift_is_the_same_in_every_format(report: Report) -> None:
    data = from_json(render_json(report))
    drift = {d["model"]: d for d in data["drift"]["models"]}
    assert IMG in drift
    for row in csv_rows(render_csv(report, "drift")):
        d = drift[row["model"]]
        assert [float(row[p]) for p in ("p50", "p90", "p99")] == [d["p50"], d["p90"], d["p99"]]
    text = render_table(report)
    for d in drift.values():
        assert f"{d['p50']:.6f}" in text and f"{d['p99']:.6f}" in text


def test_hostile_names_are_escaped_in_html(report: Report) -> None:
    page = render_html(report)
    assert "<script" not in page.lower()
    assert "<img" not in page.lower()
    assert html.escape(SCRIPT) in page
    assert html.escape(IMG) in page
    parsed = from_html(page)
    assert parsed.scripts == 0
    assert parsed.fetching == []  # self-contained: no src or href anywhere


def test_csv_defuses_formulas(report: Report) -> None:
    accounts = [r["account"] for r in csv_rows(render_csv(report, "groups"))]
    assert any(a.startswith("'=HYPERLINK") for a in accounts)
    assert not any(a.startswith("=") for a in accounts)


def test_rich_markup_in_names_is_shown_verbatim(session: Session) -> None:
    prefix = uuid.uuid4().hex[:8]
    name = f"[bold red]acct[/bold red]{prefix}"
    post(session, scenario(prefix, account_a=name))
    report = build_report(session.connection(), ReportSpec(SINCE, UNTIL, ("account",)))
    assert name in render_table(report)


CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)  # fmt: skip


def chromium_dom(page: Path, profile: Path) -> str:
    binary = shutil.which("chromium")
    if binary is None:
        pytest.fail("chromium is not installed: run scripts/ensure-chromium (make test does)")
    done = subprocess.run(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_html_renders_in_chromium_with_the_json_totals(report: Report, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(render_html(report), encoding="utf-8")
    dom = from_html(chromium_dom(page, tmp_path / "profile"))
    data = from_json(render_json(report))
    assert dom.title.startswith("Billing report 2033-05-01T00:00:00Z")
    assert "pwned" not in dom.title
    assert dom.scripts == 0
    for name in COUNT_FIELDS:
        assert int(dom.totals[name]) == data["total"][name]
    for name in MONEY_FIELDS:
        assert dom.totals[name] == data["total"][f"{name}_usd"]
        assert dom.micros[name] == data["total"][f"{name}_micros"]
    assert dom.ties_out == "true"
    # The hostile account is on the page as text, in its own cell.
    assert any(row[1].startswith(SCRIPT) for row in dom.group_rows[1:] if len(row) > 1)
