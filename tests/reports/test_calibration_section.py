"""The report's calibration section in the table, JSON and HTML formats: the same figures, a
hostile model name kept as text."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson

from worker.reports.model import Calibration, Report, Tally
from worker.reports.render_html import render_html
from worker.reports.render_json import render_json
from worker.reports.render_table import render_table

AT = datetime(2026, 12, 7, tzinfo=UTC)
NAME = "<img src=x onerror=alert(1)>"
ROW = Calibration(
    provider="anthropic", model=NAME, version=3, exact=False, held_out=35,
    prompt_factor_ppm=1_185_366, prompt_samples=140,
    prompt_error_raw_ppm=-146_612, prompt_error_calibrated_ppm=11_180,
    completion_factor_ppm=1_000_000, completion_samples=12,
    completion_error_raw_ppm=None, completion_error_calibrated_ppm=None,
)  # fmt: skip


def _report(*rows: Calibration) -> Report:
    return Report(AT, AT, AT, ("day",), (), (), Tally(), (), "window", calibration=rows)


def test_the_section_in_every_format() -> None:
    report = _report(ROW)
    table = render_table(report)
    [line] = [text for text in table.splitlines() if "anthropic" in text]
    for cell in ("1.185366", "140", "-14.66% -> +1.11%", "1.000000", "- -> -", "| 3 ", "35"):
        assert cell in line
    [row] = orjson.loads(render_json(report))["calibration"]
    assert row["prompt_factor_ppm"] == 1_185_366 and row["completion_error_raw_ppm"] is None
    page = render_html(report)
    assert NAME not in page and "&lt;img src=x" in page
    assert "1.185366" in page and "-14.66% &rarr; +1.11%" in page


def test_no_factors_yet() -> None:
    assert "calibration: no factors learnt yet" in render_table(_report())
    assert orjson.loads(render_json(_report()))["calibration"] == []
    assert "No calibration factors learnt yet." in render_html(_report())
