"""``billing report`` end to end against a SQLite file; errors are one line and exit 2."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from reports.book import SINCE, UNTIL, expected, post, scenario
from worker.cli import main
from worker.ledger.database import make_engine, session_factory, upgrade

WINDOW = ["--since", "2033-05-01", "--until", "2033-05-03T00:00:00Z"]


@pytest.fixture
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list:
    url = f"sqlite:///{tmp_path / 'billing.db'}"
    upgrade(url)
    engine = make_engine(url)
    calls = scenario(uuid.uuid4().hex[:8])
    with session_factory(engine)() as session, session.begin():
        post(session, calls)
    engine.dispose()
    monkeypatch.setenv("DATABASE_URL", url)
    return calls


@pytest.mark.parametrize("fmt", ["table", "csv", "json", "html"])
def test_report_writes_every_format(database: list, tmp_path: Path, fmt: str) -> None:
    out = tmp_path / "out" / f"report.{fmt}"
    result = CliRunner().invoke(main, ["report", *WINDOW, "--format", fmt, "--out", str(out)])
    assert result.exit_code == 0, result.output
    if fmt == "csv":  # a directory of tidy files, one per section (issue 39)
        assert {p.name for p in out.iterdir()} >= {"groups.csv", "total.csv", "drift.csv"}
        return
    assert out.is_file() and out.stat().st_size > 0


def test_json_to_stdout_matches_the_book(database: list) -> None:
    result = CliRunner().invoke(main, ["report", *WINDOW, "--by", "account", "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    want = expected(database, ())[()]
    assert data["total"]["calls"] == want.counts["calls"]
    assert data["total"]["charged_micros"] == int(want.money["charged"])
    assert data["ties_out"] is True
    assert data["window"] == {"since": "2033-05-01T00:00:00Z", "until": "2033-05-03T00:00:00Z"}
    assert SINCE.isoformat().startswith(data["days"][0]["day"]) and UNTIL > SINCE


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--since", "yesterday", "--until", "2033-05-03"], "not an RFC 3339"),
        (["--since", "2033-05-01T00:00:00", "--until", "2033-05-03"], "not an RFC 3339"),
        (["--since", "2033-02-30", "--until", "2033-05-03"], "day is out of range"),
        (["--since", "2033-05-03", "--until", "2033-05-03"], "must be before"),
        (["--since", "2033-05-04", "--until", "2033-05-03"], "must be before"),
        (["--until", "2033-05-03"], "both --since and --until"),
        ([*WINDOW, "--by", "day,region"], "unknown --by key 'region'"),
        ([*WINDOW, "--by", "day,day"], "repeats a key"),
        ([*WINDOW, "--format", "pdf"], "unknown --format 'pdf'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(database: list, args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["report", *args])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("billing report: ")
    assert message in lines[0]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgresql://postgres@127.0.0.1:1/nothing", "database: "),
        ("sqlite:///{tmp}/missing.db", "does not exist"),
        ("sqlite:///{tmp}/empty.db", "run `billing db upgrade`"),
        ("nonsense://", "DATABASE_URL: nonsense:// is not supported"),
    ],
)
def test_unreachable_or_unmigrated_database_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, message: str
) -> None:
    (tmp_path / "empty.db").write_bytes(b"")
    monkeypatch.setenv("DATABASE_URL", url.format(tmp=tmp_path))
    result = CliRunner().invoke(main, ["report", *WINDOW])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


def test_unwritable_out_is_one_line(database: list, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = CliRunner().invoke(main, ["report", *WINDOW, "--out", str(blocker / "r.html")])
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1
