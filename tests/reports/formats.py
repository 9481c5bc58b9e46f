"""Reading each format back into numbers, so the tests can compare them across formats."""

from __future__ import annotations

import csv
import io
import json
from html.parser import HTMLParser
from typing import Any

from worker.reports.model import COUNTS, MONEY


def from_json(text: str) -> dict[str, Any]:
    return json.loads(text)


def csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def table_total(text: str) -> dict[str, str]:
    """Header → cell of the ``total`` row of every ASCII table in the text output."""
    found: dict[str, str] = {}
    header: list[str] | None = None
    expect_header = False
    for line in text.splitlines():
        if line.startswith("+"):
            expect_header = True
            continue
        if not line.startswith("|") or line.startswith("|-"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if expect_header:
            header, expect_header = cells, False
        elif cells[0] == "total" and header is not None:
            found.update(zip(header, cells, strict=True))
    return found


LABEL_TO_FIELD = {label: name for name, label in COUNTS} | {
    f"{label} (USD)": name for name, label in MONEY
}


class DataCells(HTMLParser):
    """Collects ``data-*`` marked elements: totals, cards, drift rows, parity and anomalies."""

    def __init__(self) -> None:
        super().__init__()
        self.totals: dict[str, str] = {}
        self.micros: dict[str, int] = {}
        self.ties_out: str | None = None
        self.title = ""
        self.scripts = 0
        self.fetching: list[str] = []
        self.group_rows: list[list[str]] = []
        self._open: tuple[str, str] | None = None
        self._text: list[str] = []
        self._in_groups_body = False
        self._row: list[str] | None = None
        self._cell = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "script":
            self.scripts += 1
        self.fetching += [f"{tag} {k}" for k in a if k in ("src", "href") or k.startswith("on")]
        if tag == "title" and self._open is None:
            self._open, self._text = ("title", ""), []
        if "data-total" in a:
            self._open, self._text = ("total", a["data-total"] or ""), []
            if "data-micros" in a:
                self.micros[a["data-total"] or ""] = int(a["data-micros"] or 0)
        if "data-ties-out" in a:
            self.ties_out = a["data-ties-out"]
        if tag == "table" and a.get("id") == "groups":
            self._in_groups_body = True
        if self._in_groups_body and tag == "tr":
            self._row = []
        if self._row is not None and tag in ("td", "th"):
            self._cell, self._text_cell = True, []

    def handle_endtag(self, tag: str) -> None:
        if self._open and tag in ("td", "title"):
            kind, name = self._open
            text = "".join(self._text)
            if kind == "title":
                self.title = self.title or text
            else:
                self.totals[name] = text
            self._open = None
        if self._row is not None and tag in ("td", "th"):
            self._row.append("".join(self._text_cell))
            self._cell = False
        if self._row is not None and tag == "tr":
            self.group_rows.append(self._row)
            self._row = None
        if tag == "table":
            self._in_groups_body = False

    def handle_data(self, data: str) -> None:
        if self._open:
            self._text.append(data)
        if self._cell:
            self._text_cell.append(data)


def from_html(text: str) -> DataCells:
    parser = DataCells()
    parser.feed(text)
    return parser
