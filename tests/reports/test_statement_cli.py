"""``billing statement`` against a SQLite file: every format carries the same figures, bad input
is one line and exit 2."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from ledger.factories import make_meta, make_result

from worker.cli import main
from worker.ledger.database import make_engine, session_factory
from worker.ledger.operations import apply_result, hold

NOW = datetime.now(UTC)
MONTH = f"{NOW:%Y-%m}"


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    runner = CliRunner()
    assert runner.invoke(main, ["db", "upgrade"]).exit_code == 0
    assert (
        runner.invoke(
            main, ["credit", "acct=1", "5", "--note", "=x", "--key", "k", "--new-account"]
        ).exit_code
        == 0
    )
    engine = make_engine(f"sqlite:///{tmp_path / 'var' / 'billing.db'}")
    with session_factory(engine)() as session, session.begin():
        meta = make_meta("r1", account_id="acct=1", reserved=10_000, created_at=NOW)
        hold(session, meta, now=NOW)
        apply_result(session, make_result("r1", account_id="acct=1", charge=4_000,
                                          created_at=NOW), now=NOW, grace=timedelta(hours=1))  # fmt: skip
    engine.dispose()
    return runner


def test_every_format_carries_the_same_figures(runner: CliRunner, tmp_path: Path) -> None:
    out = {}
    for fmt in ("table", "csv", "json", "html"):
        result = runner.invoke(main, ["statement", "acct=1", "--month", MONTH, "--format", fmt])
        assert result.exit_code == 0, result.output
        out[fmt] = result.output
    data = json.loads(out["json"])
    assert data["ties_out"] is True and data["complete"] is False
    assert data["credited"]["micros"] == 5_000_000 and data["charged"]["micros"] == 4_000
    assert data["closing"]["available"]["micros"] == 4_996_000
    assert data["closing"]["balance"]["usd"] == "4.996000"
    rows = list(csv.DictReader(io.StringIO(out["csv"])))
    closing = {row["label"]: int(row["micros"]) for row in rows if row["section"] == "closing"}
    assert closing["available"] == 4_996_000 and closing["balance"] == 4_996_000
    [credit_row] = [row for row in rows if row["section"] == "credit"]
    assert credit_row["detail"] == "k: =x"  # not a formula start: the key comes first
    assert "4.996000" in out["table"] and "ties out" in out["table"]
    assert 'data-ties-out="true"' in out["html"]
    micros = [int(m) for m in re.findall(r'data-micros="(-?\d+)"', out["html"])]
    assert micros == [int(row["micros"]) for row in rows if row["micros"] != ""]
    written = runner.invoke(main, ["statement", "acct=1", "--month", MONTH, "--format", "html",
                                   "--out", str(tmp_path / "s.html")])  # fmt: skip
    page = (tmp_path / "s.html").read_text()
    assert written.exit_code == 0 and 'data-ties-out="true"' in page
    assert [int(m) for m in re.findall(r'data-micros="(-?\d+)"', page)] == micros


@pytest.mark.parametrize(
    ("args", "said"),
    [(["--month", "2026-13"], "YYYY-MM"), (["--month", MONTH, "--format", "pdf"], "unknown --format"),
     (["--month", "2999-01"], "has not begun")],
)  # fmt: skip
def test_bad_input_is_one_line(runner: CliRunner, args: list[str], said: str) -> None:
    result = runner.invoke(main, ["statement", "acct=1", *args])
    assert result.exit_code == 2 and said in result.stderr and result.stderr.count("\n") == 1
