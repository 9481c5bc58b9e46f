"""``billing export calls``: one row per call, the same values in CSV, JSON Lines and Parquet, a
batch at a time (issue 39, point 2). The oracle is what the test seeded, per call."""

from __future__ import annotations

import csv
import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from ledger.factories import make_meta, settled, unsettled, voided
from sqlalchemy.orm import Session

from worker.cli import main
from worker.core.prices import load_price_book
from worker.core.result import Usage
from worker.ledger.database import make_engine, session_factory, upgrade
from worker.ledger.operations import apply_result, hold, resolve
from worker.reports import export

GRACE = timedelta(hours=1)
DAY1 = datetime(2047, 6, 1, 23, 59, 59, tzinfo=UTC)
DAY2 = datetime(2047, 6, 2, 0, 0, 1, tzinfo=UTC)
SINCE, UNTIL = datetime(2047, 6, 1, tzinfo=UTC), datetime(2047, 6, 3, tzinfo=UTC)
USAGE = Usage(prompt_tokens=1_000, completion_tokens=300, cached_tokens=400, reasoning_tokens=100)


def _seed(session: Session, prefix: str) -> dict[str, dict[str, Any]]:
    """Four calls over two days; returns what each row must say."""
    book = load_price_book()
    charge = book.charge("gpt-4o-mini", USAGE, DAY1)
    quote = book.quote("gpt-4o-mini", USAGE, DAY1)
    assert charge is not None and quote is not None
    account = f"=acct-{prefix}"  # exact in the export: a loader's file, not a spreadsheet's
    ids = {name: f"{prefix}-{name}" for name in ("ok", "bad", "est", "void")}
    for name, at in (("ok", DAY1), ("bad", DAY1), ("est", DAY2), ("void", DAY2)):
        hold(session, make_meta(ids[name], account_id=account, created_at=at), now=at)
    apply_result(session, settled(ids["ok"], account_id=account, usage=USAGE, charge=int(charge),
                                  created_at=DAY1, unit_prices=json.dumps(quote)),
                 now=DAY1, grace=GRACE)  # fmt: skip
    apply_result(session, unsettled(ids["bad"], account_id=account, created_at=DAY1, exposure=3_000),
                 now=DAY1, grace=GRACE)  # fmt: skip
    apply_result(session, unsettled(ids["est"], account_id=account, created_at=DAY2, exposure=2_500),
                 now=DAY2, grace=GRACE)  # fmt: skip
    resolve(session, ids["est"], "charge_estimate", who="ops", note="n", now=DAY2)
    apply_result(session, voided(ids["void"], account_id=account, created_at=DAY2), now=DAY2,
                 grace=GRACE)  # fmt: skip
    session.flush()
    common = {"account_id": account, "model": "gpt-4o-mini", "hold_micros": 10_000}
    return {
        ids["ok"]: {**common, "status": "settled", "outcome": "settled", "reason": None,
                    "prompt_tokens": 1_000, "cached_tokens": 400, "reasoning_tokens": 100,
                    "completion_tokens": 300, "charge_micros": int(charge),
                    "price_input": quote["input"], "price_cached_input": quote["cached_input"],
                    "price_output": quote["output"], "rates": "row", "created_at": DAY1},
        ids["bad"]: {**common, "status": "unsettled", "outcome": "unsettled",
                     "reason": "error_finish", "charge_micros": None, "exposure_micros": 3_000,
                     "prompt_tokens": None, "price_input": None, "created_at": DAY1},
        ids["est"]: {**common, "status": "settled_from_estimate", "outcome": "unsettled",
                     "resolution": "charge_estimate", "charge_micros": 2_500,
                     "exposure_micros": 2_500, "created_at": DAY2},
        ids["void"]: {**common, "status": "voided", "outcome": "void", "charge_micros": 0,
                      "created_at": DAY2},
    }  # fmt: skip


def _typed(name: str, cell: str) -> Any:
    """A CSV cell back as the value it stands for (the oracle's types)."""
    kind = dict(export.COLUMNS)[name]
    if cell == "":
        return None
    if kind == "int":
        return int(cell)
    if kind == "time":
        return datetime.fromisoformat(cell.replace("Z", "+00:00"))
    if kind == "bool":
        return cell == "true"
    return cell


def _mine(rows: list[dict[str, Any]], want: dict[str, Any]) -> list[dict[str, Any]]:
    return [row for row in rows if row["request_id"] in want]


def _check(rows: list[dict[str, Any]], want: dict[str, dict[str, Any]]) -> None:
    assert [row["request_id"] for row in rows] == list(want)  # (created_at, id) order
    for row in rows:
        assert list(row) == list(export.NAMES)
        for name, value in want[row["request_id"]].items():
            assert row[name] == value, (row["request_id"], name)


@pytest.mark.parametrize("fmt", export.FORMATS)
def test_every_format_holds_the_same_rows(
    session: Session, tmp_path: Path, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(export, "BATCH", 3)  # several batches, one Parquet row group each
    want = _seed(session, uuid.uuid4().hex[:8])
    out = tmp_path / f"calls.{fmt}"
    written = export.export_calls(session.connection(), SINCE, UNTIL, fmt, out, per_day=False)
    assert written.files == 1 and written.calls >= len(want)
    if fmt == "csv":
        with out.open(newline="", encoding="utf-8") as f:
            rows = [{k: _typed(k, v) for k, v in r.items()} for r in csv.DictReader(f)]
    elif fmt == "jsonl":
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        for row in rows:
            for name, kind in export.COLUMNS:
                if kind == "time" and row[name] is not None:
                    assert row[name].endswith("Z")
                    row[name] = datetime.fromisoformat(row[name].replace("Z", "+00:00"))
    else:
        parquet = pq.ParquetFile(out)
        assert parquet.metadata.num_row_groups == -(-written.calls // 3)
        rows = parquet.read().to_pylist()
    _check(_mine(rows, want), want)
    assert not list(tmp_path.glob(".*partial"))


def test_per_day_files(session: Session, tmp_path: Path) -> None:
    want = _seed(session, uuid.uuid4().hex[:8])
    out = tmp_path / "days"
    export.export_calls(session.connection(), SINCE, UNTIL, "jsonl", out, per_day=True)
    files = sorted(p.name for p in out.iterdir())
    assert files == ["calls-2047-06-01.jsonl", "calls-2047-06-02.jsonl"]
    for name, day in zip(files, (DAY1, DAY2), strict=True):
        ids = [json.loads(line)["request_id"] for line in (out / name).read_text().splitlines()]
        assert [i for i in ids if i in want] == [
            i for i, row in want.items() if row["created_at"] == day
        ]


def test_cli_exports_and_refuses_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'billing.db'}"
    upgrade(url)
    engine = make_engine(url)
    with session_factory(engine)() as session, session.begin():
        want = _seed(session, "cli")
    engine.dispose()
    monkeypatch.setenv("DATABASE_URL", url)
    runner = CliRunner()
    out = tmp_path / "calls.parquet"
    args = ["export", "calls", "--since", "2047-06-01", "--until", "2047-06-03"]
    done = runner.invoke(main, [*args, "--format", "parquet", "--out", str(out)])
    assert done.exit_code == 0, done.output
    assert "exported 4 calls" in done.stderr
    _check(pq.read_table(out).to_pylist(), want)
    for bad in (
        ["export", "calls", "--since", "June", "--until", "2047-06-03", "--out", str(out)],
        ["export", "calls", "--since", "2047-06-03", "--until", "2047-06-01", "--out", str(out)],
        [*args, "--out", str(tmp_path)],  # a directory without --per-day
    ):
        result = runner.invoke(main, bad)
        assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
