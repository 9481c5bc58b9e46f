"""Issue 52, point 4: every bad input is one line on stderr and a non-zero exit, and nothing is
created: an account the ledger has never seen, a SQLite file under a folder that does not exist,
the demo's ``--help``; and the demo deletes no key it did not write.

Each command is the real ``billing`` script (or ``python -m devtools.demo``) in its own process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis

from worker.ledger.database import upgrade

BILLING = str(Path(sys.executable).parent / "billing")
ROOT = Path(__file__).resolve().parents[2]


def run(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, capture_output=True, text=True, timeout=120, env={**os.environ, **env}, check=False
    )


def test_balance_of_an_account_the_ledger_never_saw_is_refused_as_the_statement_is(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'billing.db'}"
    upgrade(url)
    for args in (["balance", "acct_nope"], ["statement", "acct_nope", "--month", "2026-11"]):
        done = run([BILLING, *args], DATABASE_URL=url)
        assert done.returncode == 2, (args, done.stdout)
        assert done.stdout == ""
        assert done.stderr.splitlines() == [
            f"billing {args[0]}: no account 'acct_nope': the ledger has never seen it"
        ]


@pytest.mark.parametrize(
    "args",
    [["balance"], ["balance", "acct"], ["show", "req-1"], ["unsettled", "list"],
     ["statement", "acct", "--month", "2026-11"],
     ["report", "--since", "2026-11-01", "--until", "2026-12-01"]],
)  # fmt: skip
def test_a_read_command_on_a_sqlite_file_that_does_not_exist_creates_nothing(
    tmp_path: Path, args: list[str]
) -> None:
    missing = tmp_path / "no" / "such" / "dir" / "billing.db"
    done = run([BILLING, *args], DATABASE_URL=f"sqlite:///{missing}")
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    command = " ".join(args[:2]) if args[0] == "unsettled" else args[0]
    assert line.startswith(f"billing {command}: ") and str(missing) in line
    assert "billing db upgrade" in line
    assert not (tmp_path / "no").exists()  # neither the file nor a folder of its path


def test_the_demos_help_is_help_and_runs_nothing(tmp_path: Path) -> None:
    for module in ("devtools.demo",):  # demo_gateway's argparse has always parsed its arguments
        done = subprocess.run(
            [sys.executable, "-m", module, "--help"], capture_output=True, text=True,
            timeout=60, cwd=tmp_path, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"usage: python -m {module}")
        assert not (tmp_path / "var").exists()  # no ledger made, no worker started
    bogus = run([sys.executable, "-m", "devtools.demo", "--bogus"], PYTHONPATH=str(ROOT))
    assert bogus.returncode == 2 and "unrecognized arguments: --bogus" in bogus.stderr


@pytest.mark.redis
def test_the_demo_deletes_no_key_it_did_not_write(
    tmp_path: Path, redis_client: redis.Redis
) -> None:
    from devtools.demo import PREFIX, fresh_run

    foreign = f"demo:{uuid.uuid4().hex}"  # a key of the old shared prefix, someone else's
    redis_client.set(foreign, "theirs", ex=300)
    broker = redis.Redis.from_url("redis://127.0.0.1:6379/13")
    broker.set(foreign, "theirs", ex=300)
    try:
        url = "redis://127.0.0.1:6379/0"
        _ledger, env = fresh_run(redis_client, url, tmp_path / "demo", PREFIX, broker_db=13)
        assert env["BILLING_PREFIX"] == PREFIX != "demo" and PREFIX.startswith("demo-")
        assert redis_client.get(foreign) == b"theirs"
        assert broker.get(foreign) == b"theirs"
    finally:
        redis_client.delete(foreign)
        broker.delete(foreign)


def test_a_report_error_is_its_one_line_and_nothing_before_it(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()  # a file that is no migrated ledger
    done = run(
        [BILLING, "report", "--since", "2026-11-01", "--until", "2026-12-01"],
        DATABASE_URL=f"sqlite:///{empty}",
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("billing report: database: ") and done.stderr.count("\n") == 1
