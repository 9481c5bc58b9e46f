"""One row of the results table, and the table rendered for a terminal (rich) and for BENCHMARKS.md."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table

COLUMNS = ("benchmark", "this project", "comparison", "ratio", "target", "result")


@dataclass
class Row:
    """A benchmark's verdict. ``passed`` is None when there is no target or no figure yet."""

    title: str
    ours: str
    theirs: str = "—"
    ratio: float | None = None
    target: str = "—"
    passed: bool | None = None
    notes: list[str] = field(default_factory=list)
    status: str | None = None  # "pending: …" or "error: …" replaces the figures

    @property
    def result(self) -> str:
        if self.status is not None:
            return self.status.split(":", 1)[0]
        if self.passed is None:
            return "—"
        return "pass" if self.passed else "miss"

    def cells(self) -> tuple[str, ...]:
        if self.status is not None:
            return (self.title, self.status, "—", "—", self.target, self.result)
        return (
            self.title,
            self.ours,
            self.theirs,
            ratio_text(self.ratio),
            self.target,
            self.result,
        )


def ratio_text(ratio: float | None) -> str:
    if ratio is None:
        return "—"
    if ratio >= 10:
        return f"{ratio:,.0f}x"
    if ratio >= 1:
        return f"{ratio:.1f}x"
    return f"{ratio:.3f}x"


def rate(value: float, unit: str) -> str:
    if value >= 100:
        return f"{value:,.0f} {unit}"
    if value >= 10:
        return f"{value:.1f} {unit}"
    return f"{value:.2f} {unit}"


def render(rows: Sequence[Row], console: Console | None = None, title: str | None = None) -> None:
    console = console or Console()
    table = Table(title=title, show_lines=True)
    for name in COLUMNS:
        table.add_column(name, justify="right" if name == "ratio" else "left", overflow="fold")
    styles = {"pass": "green", "miss": "bold red", "pending": "yellow", "error": "bold red"}
    for row in rows:
        cells = list(row.cells())
        style = styles.get(row.result)
        if style:
            cells[-1] = f"[{style}]{cells[-1]}[/{style}]"
        table.add_row(*cells)
    console.print(table)
    for row in rows:
        for note in row.notes:
            console.print(f"[dim]{row.title}:[/dim] {note}", highlight=False)


def markdown(rows: Sequence[Row]) -> str:
    def escape(cell: str) -> str:
        return cell.replace("|", "\\|").replace("\n", " ")

    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join("---:" if name == "ratio" else "---" for name in COLUMNS) + "|",
    ]
    lines += ["| " + " | ".join(escape(cell) for cell in row.cells()) + " |" for row in rows]
    return "\n".join(lines)
