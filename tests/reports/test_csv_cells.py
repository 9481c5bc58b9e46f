"""The report's CSV cells: numbers stay numbers a spreadsheet sums, text never runs as a formula
(issue 39: a negative margin was written ``'-0.000041``, text, so sums skipped it)."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.core.money import Micros
from worker.reports.render_csv import FORMULA_STARTS, table_text

COLUMNS = ("account", "model", "margin_micros", "margin_usd", "calls")


def _read(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text, newline="")))


@settings(max_examples=40, deadline=None)
@given(
    account=st.text(alphabet="=+-@\t\r a1'\"", max_size=8),
    model=st.sampled_from(["=cmd|' /C calc'!A0", "-gpt", "+1", "@x", "gpt-4o"]),
    margin=st.integers(min_value=-(10**12), max_value=10**12),
    calls=st.integers(min_value=0, max_value=10**9),
)
def test_numbers_read_back_as_numbers_and_text_is_defused(
    account: str, model: str, margin: int, calls: int
) -> None:
    row = {
        "account": account,
        "model": model,
        "margin_micros": margin,
        "margin_usd": Micros(margin).usd(),
        "calls": calls,
    }
    (read,) = _read(table_text((COLUMNS, [row])))
    # numbers: read back exactly, by Decimal (what a spreadsheet's number parser accepts)
    assert int(read["margin_micros"]) == margin
    assert Decimal(read["margin_usd"]) * 1_000_000 == margin
    assert int(read["calls"]) == calls
    # text: never starts like a formula; the original is the cell without the one quote added
    for name in ("account", "model"):
        cell = read[name]
        assert not cell.startswith(FORMULA_STARTS)
        original = row[name]
        assert cell == ("'" + original if original.startswith(FORMULA_STARTS) else original)


def test_a_negative_margin_is_a_number() -> None:
    text = table_text((("model", "margin_usd"), [{"model": "m", "margin_usd": "-0.000041"}]))
    assert text.split("\r\n")[1] == "m,-0.000041"


def test_text_in_a_number_column_is_refused() -> None:
    import pytest

    from worker.reports.spec import ReportError

    with pytest.raises(ReportError, match="margin_usd"):
        table_text((("margin_usd",), [{"margin_usd": "=1+1"}]))
