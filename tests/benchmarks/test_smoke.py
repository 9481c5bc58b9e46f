"""``make bench`` keeps working: every benchmark at its smoke size, as subprocesses.

The smoke runs (marker ``bench_smoke``) are the first step of ``make bench``, not of ``make test``
(about 150 s of one core, which ``make test``'s ten minutes no longer had); the check that the
groups cover every row once runs in both.

Times are never asserted (a shared machine makes them noise); what is asserted is that every
benchmark ran against its comparison and produced its row, its ratio and its verdict.

The suite runs in a few groups (``--only``), one test each, so that xdist can run them side by side
instead of one subprocess of some two minutes on one worker. A group holds the rows that need each
other's figures (``suite.Context``: rows 3 and 4 use row 2's rate, row 12 models rows 2, 4 and 9),
so that no group measures another's rows again, except row 3's, which measures row 2 for its rate.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RATIO = re.compile(r"^(?:[0-9][0-9,]*(?:\.[0-9]+)?x|—)$")

# The groups, the longest first (xdist starts them in this order), each with the row numbers it
# must produce.
GROUPS: dict[str, set[int]] = {
    "e2e,latency,scaling,capacity": {2, 4, 9, 12},
    "naive": {3},
    "memory,spaceless": {8},
    "ledger": {6},
    "report,gateway,spend": {7, 11, 13},
    "assembly,estimate,cli": {1, 5, 10},
    "reads,export": {14, 15},
    "reads_pg": {16},
}


def test_the_groups_cover_every_benchmark_and_every_row_once() -> None:
    # In a subprocess: this package (tests/benchmarks) hides the suite's own under its name.
    listed = subprocess.run(
        [sys.executable, "-c", "from benchmarks import suite; print(*suite.BENCHMARKS)"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    names = [name for group in GROUPS for name in group.split(",")]
    assert sorted(names) == sorted(listed.stdout.split())
    rows = [number for numbers in GROUPS.values() for number in numbers]
    assert sorted(rows) == list(range(1, 17))


@pytest.mark.bench_smoke
@pytest.mark.parametrize("only", list(GROUPS))
def test_every_benchmark_row_is_produced_at_smoke_size(only: str, tmp_path: Path) -> None:
    out = tmp_path / "BENCHMARKS.md"
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", "--only", only, "--output", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    table = [line for line in out.read_text().splitlines() if line.startswith("| ")][1:]
    cells = [[cell.strip() for cell in line.strip("|").split(" | ")] for line in table]
    titles = [row[0] for row in cells]
    for number in GROUPS[only]:
        assert any(title.startswith(f"{number}. ") for title in titles), (
            f"no row {number}: {titles}"
        )
    # The rows are run in another order (benchmarks.suite.BENCHMARKS), but tabled by number.
    numbers = [int(title.split(".")[0]) for title in titles if title[0].isdigit()]
    assert numbers == sorted(numbers), titles
    # --only tables the rows asked for, and none of the rows a group needs but did not ask for.
    assert set(numbers) == GROUPS[only], titles
    for title, ours, peer, ratio, target, result in cells:
        assert RATIO.match(ratio), f"{title}: ratio {ratio!r}"
        if target not in ("—", "info", "report"):
            assert result in ("pass", "miss"), f"{title}: {result!r}"
            assert ours != "—" and peer != "—", title
    # The committed BENCHMARKS.md is never touched by a smoke run.
    assert "--smoke" not in (ROOT / "BENCHMARKS.md").read_text()
