"""Issue 39, point 5: a bad ``DATABASE_URL`` or ``REDIS_URL`` is one line on stderr and exit 2 from
every ``billing`` command, never a traceback, never the password it held.

Each case is the real command line run in its own process: the ``celery`` command of the compose
file itself (the ``billing`` script is run so by tests/deploy/test_redaction.py), and for the table (every command, every bad value) a process forked from one interpreter that
has imported the commands once (``FORKED``; a fresh interpreter per case costs a second or two,
the whole table would take minutes). The child runs ``main`` with the case's arguments and
environment and exits as the script would, an uncaught exception printed as the interpreter prints
it. Only ``billing doctor`` answers otherwise: it is the report of every check, and names the bad
setting on its ``config`` line (exit 1).

The oracle of the property test is SQLAlchemy itself: whatever the settings accept as a database
URL, SQLAlchemy builds an engine for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worker.config import DATABASE_SCHEMES, check_url

SECRET = "Pw7secretXq"  # a password in every bad URL: it must never be printed

BAD_DATABASE_URLS = [
    "notaurl",
    f"postgres:{SECRET}@db:5432/billing",  # the // forgotten
    f"mysql://billing:{SECRET}@db:3306/billing",  # a database this worker does not run on
    f"postgresql+psycopg2://billing:{SECRET}@db/billing",  # a driver that is not installed
    f"postgresql://billing:{SECRET}@db:port/billing",
    f"postgresql://billing:{SECRET}@db:99999/billing",
    f"postgresql://billing:{SECRET}@[::1/billing",  # an unclosed IPv6 address
    f"sqlite://billing:{SECRET}@host/billing.db",  # SQLite names a file, not a server
]
BAD_REDIS_URLS = [
    "notaurl",
    f"http://:{SECRET}@redis:6379/0",
    f"redis://:{SECRET}@redis:port/0",
    f"redis://:{SECRET}@redis:0/0",
    f"redis://:{SECRET}@[::1:6379/0",
    f"redis://:{SECRET}@redis:6379/zero",  # Celery reads the path as the database number
]
CASES = [("DATABASE_URL", url) for url in BAD_DATABASE_URLS] + [
    ("REDIS_URL", url) for url in BAD_REDIS_URLS
]
# Every command that reads the settings, with arguments that get it that far.
COMMANDS = [
    ["balance"],
    ["show", "req-1"],
    ["statement", "acct-1", "--month", "2026-11"],
    ["unsettled", "list"],
    ["unsettled", "expire"],
    ["unsettled", "resolve", "req-1", "--release", "--note", "n"],
    ["prices", "list"],
    ["prices", "which", "gpt-4o"],
    ["report", "--since", "2026-11-01", "--until", "2026-11-02"],
    ["credit", "add", "acct-1", "1", "--note", "n", "--key", "k"],
    ["account", "limit", "acct-1", "1", "--note", "n"],
    ["db", "upgrade"],
    ["db", "check"],
    ["alerts", "list"],
    ["alerts", "deliver"],
    ["metrics", "serve", "--port", "0"],
    ["simulate", "-n", "1"],
    ["worker"],
]

FORKED = """
import json, os, sys, traceback, importlib
from worker.cli import COMMANDS, main
for module, _ in COMMANDS.values():
    importlib.import_module(module)
import sqlalchemy, redis, celery  # what the commands import when they run
results = []
for case in json.loads(sys.argv[1]):
    out, err = os.open(case["out"], os.O_WRONLY | os.O_CREAT, 0o600), os.open(case["err"], os.O_WRONLY | os.O_CREAT, 0o600)
    pid = os.fork()
    if pid == 0:
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.environ.update(case["env"])
        code = 0
        try:
            main(case["args"], prog_name="billing")
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    os.close(out)
    os.close(err)
    _, status = os.waitpid(pid, 0)
    results.append(os.waitstatus_to_exitcode(status))
print(json.dumps(results))
"""


def clean_env(tmp_path: Path) -> dict[str, str]:
    """The environment of the tests minus every billing setting: each case sets its own."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.pop("CELERY_BROKER_URL", None)
    env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path / "prometheus")
    return env


def assert_one_line(stderr: str, what: str) -> None:
    assert "Traceback" not in stderr, f"{what}: {stderr}"
    assert SECRET not in stderr, f"{what} echoed the password: {stderr}"
    assert len(stderr.splitlines()) == 1, f"{what}: {stderr!r}"
    assert stderr.startswith("billing"), f"{what}: {stderr!r}"


def run_forked(tmp_path: Path, cases: list[tuple[list[str], dict[str, str]]]) -> list[Case]:
    """Run every (arguments, environment) case, each in a process forked from one interpreter."""
    runs = [
        {
            "args": args,
            "env": env,
            "out": str(tmp_path / f"{i}.out"),
            "err": str(tmp_path / f"{i}.err"),
        }
        for i, (args, env) in enumerate(cases)
    ]
    done = subprocess.run(
        [sys.executable, "-c", FORKED, json.dumps(runs)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
        env=clean_env(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    codes = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(codes) == len(runs)
    return [
        Case(
            f"billing {' '.join(run['args'])} with {run['env']}",
            code,
            Path(run["out"]).read_text(),
            Path(run["err"]).read_text(),
        )
        for run, code in zip(runs, codes, strict=True)
    ]


class Case(NamedTuple):
    what: str
    code: int
    stdout: str
    stderr: str


def test_every_command_refuses_every_bad_url_in_one_line(tmp_path: Path) -> None:
    """Every bad value through two commands (one that opens the ledger, and the worker), and every
    command with one bad value of each variable: the check is one, at the settings, whatever the
    command."""
    table = [
        (args, {variable: url}) for variable, url in CASES for args in (["balance"], ["worker"])
    ]
    table += [
        (args, {variable: url})
        for args in COMMANDS
        for variable, url in (
            ("DATABASE_URL", BAD_DATABASE_URLS[4]),
            ("REDIS_URL", BAD_REDIS_URLS[0]),
        )
    ]
    month = ["statement", "acct-1", "--month", "9999-12"]
    table.append((month, {"DATABASE_URL": f"sqlite:///{tmp_path / 'b.db'}"}))
    doctor = ["doctor", "--only", "config"]
    table.append((doctor, {"DATABASE_URL": BAD_DATABASE_URLS[4]}))
    *refused, month_case, doctor_case = run_forked(tmp_path, table)
    for (_, env), case in zip(table, refused, strict=False):
        assert case.code == 2, f"{case.what}: exit {case.code}: {case.stderr}"
        assert_one_line(case.stderr, case.what)
        assert next(iter(env)) in case.stderr, f"{case.what} does not name it: {case.stderr}"
        assert case.stdout == "", case.what
    assert not (tmp_path / "var").exists(), "a refused command created var/"

    assert month_case.code == 2, month_case.stderr
    assert_one_line(month_case.stderr, month_case.what)
    assert "9999-12" in month_case.stderr

    # The doctor reports every check (exit 1): the bad setting is named on its config line.
    assert doctor_case.code == 1, doctor_case.stdout + doctor_case.stderr
    assert doctor_case.stdout.startswith("PROBLEM  config"), doctor_case.stdout
    assert "DATABASE_URL" in doctor_case.stdout.splitlines()[0]
    assert SECRET not in doctor_case.stdout + doctor_case.stderr
    assert "Traceback" not in doctor_case.stdout + doctor_case.stderr


# -- the check itself, against SQLAlchemy, redis-py and Celery's transport -----------------------

# Around a password-like token that may land anywhere: user, password, host, port, path or query.
URL_TEXT = st.text(alphabet=st.sampled_from("abz09:/@?&=[]%.+-_#! "), max_size=15)
AROUND = st.tuples(URL_TEXT, URL_TEXT)


@pytest.mark.filterwarnings("ignore:Query string argument")  # SQLite ignores it, and says so
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scheme=st.sampled_from([*DATABASE_SCHEMES, "mysql", "Postgresql"]), around=AROUND)
def test_a_database_url_accepted_is_one_sqlalchemy_builds(
    scheme: str, around: tuple[str, str]
) -> None:
    from sqlalchemy import create_engine

    from worker.db.engine import normalize_url

    raw = f"{scheme}://{around[0]}{SECRET}{around[1]}"
    try:
        check_url("DATABASE_URL", raw, DATABASE_SCHEMES)
    except ValueError as exc:
        message = str(exc)
        assert "\n" not in message and message.startswith("DATABASE_URL")
        assert SECRET not in message
        return
    # Built, not connected: parsing, the dialect, the driver's import and its arguments.
    create_engine(normalize_url(raw)).dispose()


@settings(max_examples=300, deadline=None)
@given(scheme=st.sampled_from(["redis", "rediss", "unix", "REDIS", "http"]), around=AROUND)
def test_a_redis_url_accepted_is_one_redis_and_celery_read(
    scheme: str, around: tuple[str, str]
) -> None:
    import redis
    from kombu.utils.url import url_to_parts

    raw = f"{scheme}://{around[0]}{SECRET}{around[1]}"
    try:
        check_url("REDIS_URL", raw, ("redis", "rediss", "unix"))
    except ValueError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("REDIS_URL")
        assert SECRET not in str(exc)
        return
    redis.Redis.from_url(raw).close()  # parses, does not connect
    database = url_to_parts(raw).path  # Celery's Redis transport makes it an int, as here
    if scheme.lower() != "unix" and database not in (None, "/"):
        int(database.removeprefix("/"))


def test_the_celery_command_of_the_compose_file(tmp_path: Path) -> None:
    """``celery -A worker.service.app worker`` (docker-compose.yml) says it the same way."""
    celery = Path(sys.executable).parent / "celery"
    env = {**clean_env(tmp_path), "REDIS_URL": BAD_REDIS_URLS[2]}
    done = subprocess.run(
        [str(celery), "-A", "worker.service.app", "worker"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert_one_line(done.stderr, "celery -A worker.service.app worker")
    assert "REDIS_URL" in done.stderr
