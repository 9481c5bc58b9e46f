"""The ledger commands against a SQLite file, through click's CliRunner."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledger.factories import make_meta, settled, unsettled
from worker.cli import main
from worker.ledger.database import make_engine, session_factory
from worker.ledger.operations import apply_result, hold

GRACE = timedelta(hours=1)


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    runner = CliRunner()
    result = runner.invoke(main, ["db", "upgrade"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "var" / "billing.db").is_file()
    return runner


def _seed(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'var' / 'billing.db'}")
    now = datetime.now(UTC)
    with session_factory(engine)() as session, session.begin():
        hold(session, make_meta("req-ok", reserved=10_000), now=now)
        apply_result(session, settled("req-ok", charge=4_000), now=now, grace=GRACE)
        hold(session, make_meta("req-bad", reserved=5_000), now=now)
        apply_result(
            session, unsettled("req-bad", reserved=5_000, exposure=3_000), now=now, grace=GRACE
        )
    engine.dispose()


def test_prices_import_errors_are_one_line(runner: CliRunner, tmp_path: Path) -> None:
    missing = runner.invoke(main, ["prices", "import", str(tmp_path / "nope.toml")])
    assert missing.exit_code == 2 and missing.stderr.count("\n") == 1
    bad = tmp_path / "bad.toml"
    bad.write_text("[[price]]\nmodel = 3\n")
    result = runner.invoke(main, ["prices", "import", str(bad)])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1


def test_balance_show_and_unsettled(runner: CliRunner, tmp_path: Path) -> None:
    _seed(tmp_path)
    result = runner.invoke(main, ["balance", "acct-1", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["available_micros"] == -9_000
    assert data["held_micros"] == 5_000
    assert data["charged_micros"] == 4_000
    assert data["charged_usd"] == "0.004000"
    assert "0.004000" in runner.invoke(main, ["balance", "acct-1"]).output

    shown = json.loads(runner.invoke(main, ["show", "req-ok", "--json"]).output)
    assert shown["request_id"] == "req-ok"
    assert (shown["status"], shown["outcome"], shown["reason"]) == ("settled", "settled", None)
    assert shown["usage_source"] == "reported"
    assert shown["usage"]["prompt_tokens"] == 100
    assert (shown["reserved_micros"], shown["charge_micros"]) == (10_000, 4_000)
    assert [e["kind"] for e in shown["entries"]] == ["hold", "hold", "charge", "charge", "charge"]
    # Support has the completion id the client saw: it finds the same call, when it names one.
    # (The unsettled req-bad has no usage row: chatcmpl-1 names req-ok alone.)
    by_completion = runner.invoke(main, ["show", "chatcmpl-1", "--json"])
    assert by_completion.exit_code == 0, by_completion.output
    assert json.loads(by_completion.output)["request_id"] == "req-ok"
    text = runner.invoke(main, ["show", "req-bad"])
    assert text.exit_code == 0 and "error_finish" in text.output

    listed = json.loads(runner.invoke(main, ["unsettled", "list", "--json"]).output)
    assert [row["request_id"] for row in listed] == ["req-bad"]
    assert listed[0]["exposure_micros"] == 3_000

    neither = runner.invoke(main, ["unsettled", "resolve", "req-bad", "--note", "x"])
    assert neither.exit_code == 2
    args = ["unsettled", "resolve", "req-bad", "--charge-estimate", "--note", "ok", "--by", "ana"]
    done = runner.invoke(main, args)
    assert done.exit_code == 0, done.output
    assert "settled_from_estimate" in done.output
    # The same command again is a no-op that succeeds, as a repeated credit does (issue 39);
    # another action on a resolved failure is an error.
    again = runner.invoke(main, args)
    assert again.exit_code == 0 and "already settled_from_estimate" in again.output
    other = runner.invoke(main, ["unsettled", "resolve", "req-bad", "--release", "--note", "x"])
    assert other.exit_code == 2 and "already resolved" in other.stderr
    assert other.stderr.count("\n") == 1
    assert json.loads(runner.invoke(main, ["unsettled", "list", "--json"]).output) == []
    shown = json.loads(runner.invoke(main, ["show", "req-bad", "--json"]).output)
    assert shown["failure"]["resolution"]["resolved_by"] == "ana"
    assert shown["charge_micros"] == 3_000
    assert json.loads(runner.invoke(main, ["balance", "acct-1", "--json"]).output)[
        "charged_micros"
    ] == (7_000)


def test_show_unknown_request(runner: CliRunner) -> None:
    result = runner.invoke(main, ["show", "nope"])
    assert result.exit_code == 2
    assert result.stderr == "billing show: nope: no such request, completion or client request id\n"


def test_unmigrated_database_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'empty.db'}")
    result = CliRunner().invoke(main, ["unsettled", "list"])
    assert result.exit_code == 2
    assert "billing db upgrade" in result.stderr and result.stderr.count("\n") == 1


def test_show_finds_calls_by_the_clients_x_request_id(runner: CliRunner, tmp_path: Path) -> None:
    """A client reference carried by one call shows it; reused by two, ``show`` lists both (each
    its own call) and asks for one of them."""
    from dataclasses import replace

    engine = make_engine(f"sqlite:///{tmp_path / 'var' / 'billing.db'}")
    now = datetime.now(UTC)
    with session_factory(engine)() as session, session.begin():
        for rid, ref in (("req-a", "mine-1"), ("req-b", "mine-2"), ("req-c", "mine-2")):
            hold(session, replace(make_meta(rid), client_request_id=ref), now=now)
    engine.dispose()
    one = json.loads(runner.invoke(main, ["show", "mine-1", "--json"]).output)
    assert (one["request_id"], one["client_request_id"]) == ("req-a", "mine-1")
    assert "client id mine-1" in runner.invoke(main, ["show", "req-a"]).output
    both = runner.invoke(main, ["show", "mine-2"])
    assert both.exit_code != 0
    assert "mine-2: the client X-Request-Id of 2 calls: req-b, req-c" in both.stderr
