"""``make bench`` keeps working: the whole suite at its smoke size, as a subprocess.

Times are never asserted (a shared machine makes them noise); what is asserted is that every
benchmark ran against its comparison and produced its row, its ratio and its verdict.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROWS = [f"{n}. " for n in range(1, 14)]
RATIO = re.compile(r"^(?:[0-9][0-9,]*(?:\.[0-9]+)?x|—)$")


def test_every_benchmark_row_is_produced_at_smoke_size(tmp_path: Path) -> None:
    out = tmp_path / "BENCHMARKS.md"
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", "--output", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    table = [line for line in out.read_text().splitlines() if line.startswith("| ")][1:]
    cells = [[cell.strip() for cell in line.strip("|").split(" | ")] for line in table]
    titles = [row[0] for row in cells]
    for prefix in ROWS:
        assert any(title.startswith(prefix) for title in titles), f"no row {prefix!r}: {titles}"
    # The rows are run in another order (benchmarks.suite.BENCHMARKS), but tabled by number.
    numbers = [int(title.split(".")[0]) for title in titles if title[0].isdigit()]
    assert numbers == sorted(numbers), titles
    for title, ours, peer, ratio, target, result in cells:
        assert RATIO.match(ratio), f"{title}: ratio {ratio!r}"
        if target not in ("—", "info", "report"):
            assert result in ("pass", "miss"), f"{title}: {result!r}"
            assert ours != "—" and peer != "—", title
    # The committed BENCHMARKS.md is never touched by a smoke run.
    assert "--smoke" not in (ROOT / "BENCHMARKS.md").read_text()
