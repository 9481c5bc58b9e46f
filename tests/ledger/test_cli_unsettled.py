"""``billing unsettled list`` and ``resolve`` by filters, against a SQLite file (issue 39, point 4).

The oracle is the seeded list itself, filtered in plain Python: which failures each filter must
select is decided here, not by the query under test.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledger.factories import make_meta, unsettled
from worker.cli import main
from worker.core.result import Reason
from worker.ledger.database import make_engine, session_factory
from worker.ledger.operations import apply_result, hold

GRACE = timedelta(hours=1)
T = datetime(2026, 11, 3, 12, tzinfo=UTC)
# (request id, account, model, reason, detected at, exposure)
SEEDED = [
    ("u-1", "acct-a", "gpt-4o", Reason.ERROR_FINISH, T, 3_000),
    ("u-2", "acct-a", "gpt-4o-mini", Reason.INCOMPLETE, T + timedelta(days=1), 2_000),
    ("u-3", "acct-b", "gpt-4o", Reason.INCOMPLETE, T + timedelta(days=2), 1_000),
    ("u-4", "acct-b", "gpt-4o-mini", Reason.ERROR_FINISH, T + timedelta(days=3), 4_000),
    ("u-5", "acct-a", "gpt-4o", Reason.INCOMPLETE, T + timedelta(days=4), 5_000),
]


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    runner = CliRunner()
    assert runner.invoke(main, ["db", "upgrade"]).exit_code == 0
    engine = make_engine(f"sqlite:///{tmp_path / 'var' / 'billing.db'}")
    with session_factory(engine)() as session, session.begin():
        for rid, account, model, reason, at, exposure in SEEDED:
            hold(session, make_meta(rid, account_id=account, model=model, created_at=at), now=at)
            result = unsettled(
                rid, account_id=account, model=model, reason=reason, exposure=exposure,
                created_at=at, finish_reason="length" if reason == Reason.INCOMPLETE else "error",
            )  # fmt: skip
            apply_result(session, result, now=at, grace=GRACE)
    engine.dispose()
    return runner


def _listed(runner: CliRunner, *args: str) -> list[str]:
    result = runner.invoke(main, ["unsettled", "list", "--json", *args])
    assert result.exit_code == 0, result.output
    return [row["request_id"] for row in json.loads(result.output)]


def _expected(**want: object) -> list[str]:
    since, until = want.pop("since", None), want.pop("until", None)
    limit = want.pop("limit", None)
    chosen = [
        rid
        for rid, account, model, reason, at, _ in SEEDED
        if all(
            {"account": account, "model": model, "reason": reason}[k] == v for k, v in want.items()
        )
        and (since is None or at >= since)
        and (until is None or at < until)
    ]
    return chosen[:limit] if limit is not None else chosen


def test_list_filters(runner: CliRunner) -> None:
    assert _listed(runner) == _expected()
    assert _listed(runner, "--account", "acct-a") == _expected(account="acct-a")
    assert _listed(runner, "--reason", "incomplete") == _expected(reason="incomplete")
    assert _listed(runner, "--model", "gpt-4o") == _expected(model="gpt-4o")
    window = ["--since", "2026-11-04", "--until", "2026-11-06T12:00:00Z"]
    assert _listed(runner, *window) == _expected(
        since=datetime(2026, 11, 4, tzinfo=UTC), until=datetime(2026, 11, 6, 12, tzinfo=UTC)
    )
    both = ["--account", "acct-a", "--reason", "incomplete", "--limit", "1"]
    assert _listed(runner, *both) == _expected(account="acct-a", reason="incomplete", limit=1)
    bad = runner.invoke(main, ["unsettled", "list", "--since", "yesterday"])
    assert bad.exit_code == 2 and bad.stderr.count("\n") == 1 and "--since" in bad.stderr


def test_resolve_by_filters_dry_run_then_again(runner: CliRunner) -> None:
    args = ["unsettled", "resolve", "--account", "acct-a", "--reason", "incomplete"]
    chosen = _expected(account="acct-a", reason="incomplete")
    dry = runner.invoke(main, [*args, "--release", "--note", "n", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert [line.split()[0] for line in dry.stdout.splitlines()] == chosen
    assert _listed(runner) == _expected()  # nothing written
    done = runner.invoke(main, [*args, "--release", "--note", "n", "--by", "ana"])
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines() == [f"{rid}: released" for rid in chosen]
    assert _listed(runner) == [rid for rid in _expected() if rid not in chosen]
    again = runner.invoke(main, [*args, "--release", "--note", "n", "--by", "ana"])
    assert again.exit_code == 0 and again.stdout == ""
    assert "resolved 0" in again.stderr
    balance = json.loads(runner.invoke(main, ["balance", "acct-a", "--json"]).output)
    held_left = [rid for rid in _expected(account="acct-a") if rid not in chosen]
    assert balance["held_micros"] == 10_000 * len(held_left)
    nothing = runner.invoke(main, ["unsettled", "resolve", "--release", "--note", "n"])
    assert nothing.exit_code == 2 and nothing.stderr.count("\n") == 1
    both = runner.invoke(
        main, ["unsettled", "resolve", "u-4", "--account", "x", "--release", "--note", "n"]
    )
    assert both.exit_code == 2 and both.stderr.count("\n") == 1
