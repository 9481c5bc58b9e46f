"""Gateway text on an operator's terminal: every command writes control characters as visible escapes.

``worker.core.terminal.printable`` alone (a property), then the commands that print ledger text (show,
unsettled list, report's table, balance, alerts list, a one-line error) against a fresh database of
each engine holding calls whose model and account carry an ESC sequence, a BEL, an OSC title change
and Slack syntax.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import create_pg_database, drop_pg_database
from hypothesis import given
from hypothesis import strategies as st
from ledger.factories import T0, make_meta, settled, unsettled

from models import AlertKind
from worker.alerts.aggregation import Alert
from worker.alerts.outbox import enqueue
from worker.cli import main
from worker.config import ENV_VARS
from worker.core.terminal import printable
from worker.ledger.database import make_engine, session_factory, upgrade
from worker.ledger.operations import apply_result, hold

MODEL = "gpt\x1b[2J\x07<!channel>"
ACCOUNT = "acct\x1b]0;pwned\x07<http://x|click>"
REQUEST = "req-\x9b31m\u202eevil"
BILLING = str(Path(sys.executable).parent / "billing")
GRACE = timedelta(hours=1)


@given(st.text())
def test_printable_leaves_nothing_a_terminal_interprets(text: str) -> None:
    shown = printable(text)
    assert shown.isprintable()
    assert "\x1b" not in shown and "\x07" not in shown and "\n" not in shown


@given(st.text().filter(str.isprintable))
def test_printable_text_is_unchanged(text: str) -> None:
    assert printable(text) == text


def test_controls_are_shown_as_escapes() -> None:
    assert printable("gpt\x1b[2J\x07") == "gpt\\x1b[2J\\x07"
    assert printable("a\u202eb\x9bc\r\n") == "a\\u202eb\\x9bc\\r\\n"
    assert printable("<!channel> é") == "<!channel> é"  # harmless on a terminal


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def hostile_ledger(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A fresh database whose calls carry hostile names: one settled, one unsettled, one alert."""
    name = None
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('terminal') / 'billing.db'}"
    else:
        name = f"billing_terminal_{uuid.uuid4().hex[:10]}"
        url = create_pg_database(name)
    upgrade(url)
    engine = make_engine(url)
    with session_factory(engine)() as session, session.begin():
        for rid, result in (
            (REQUEST, unsettled(REQUEST, account_id=ACCOUNT, model=MODEL, reserved=5_000)),
            ("req-ok", settled("req-ok", account_id=ACCOUNT, model=MODEL, charge=4_000)),
        ):
            reserved = int(result.reserved_micros)
            hold(
                session, make_meta(rid, account_id=ACCOUNT, model=MODEL, reserved=reserved), now=T0
            )
            apply_result(session, result, now=T0, grace=GRACE)
        alert = Alert(
            AlertKind.UNSETTLED, ACCOUNT, MODEL, "error_finish", T0, T0 + timedelta(minutes=5),
            f"1 stream unsettled (error_finish) for {ACCOUNT} on {MODEL}",
        )  # fmt: skip
        enqueue(session, [alert], T0)
    engine.dispose()
    yield url
    if name is not None:
        drop_pg_database(name)


def run(url: str, *args: str) -> tuple[int, str]:
    env: dict[str, str | None] = dict.fromkeys(ENV_VARS) | {"DATABASE_URL": url}
    result = CliRunner().invoke(main, list(args), env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


def assert_terminal_safe(output: str) -> None:
    for line in output.splitlines():
        assert line.isprintable(), repr(line)
    assert "\x1b" not in output and "\x07" not in output and "\r" not in output


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["show", REQUEST], "gpt\\x1b[2J\\x07<!channel>"),
        (["show", "req-ok"], "acct\\x1b]0;pwned\\x07<http://x|click>"),
        (["unsettled", "list"], "req-\\x9b31m\\u202eevil"),
        (["balance", ACCOUNT], "acct\\x1b]0;pwned\\x07"),
        (["alerts", "list"], "on gpt\\x1b[2J\\x07<!channel>"),
        (
            ["report", "--since", "2025-03-01", "--until", "2025-03-02", "--by", "account,model"],
            "gpt\\x1b[2J\\x07<!channel>",
        ),
        (["show", "nope\x1b[2J"], "nope\\x1b[2J: no such request"),
    ],
    ids=["show-unsettled", "show-settled", "unsettled", "balance", "alerts", "report", "error"],
)
def test_commands_print_gateway_text_escaped(
    hostile_ledger: str, args: list[str], expected: str
) -> None:
    code, output = run(hostile_ledger, *args)
    assert code in (0, 2), output
    assert_terminal_safe(output)
    assert expected in output, output


def test_the_json_forms_keep_the_exact_text(hostile_ledger: str) -> None:
    """Machine output is data, not terminal text: JSON escapes controls itself and keeps them."""
    code, output = run(hostile_ledger, "show", REQUEST, "--json")
    assert code == 0 and "\x1b" not in output
    assert json.loads(output)["model"] == MODEL


def test_report_table_of_a_file_is_escaped_too(hostile_ledger: str, tmp_path: Path) -> None:
    out = tmp_path / "report.txt"
    args = ("report", "--since", "2025-03-01", "--until", "2025-03-02", "--by", "model")
    code, output = run(hostile_ledger, *args, "--out", str(out))
    assert code == 0, output
    assert_terminal_safe(out.read_text())


def test_report_csv_on_a_terminal_is_escaped_and_exact_in_a_pipe(hostile_ledger: str) -> None:
    """A CSV keeps the exact names when piped or written to a file; on a terminal it is escaped."""
    args = [BILLING, "report", "--since", "2025-03-01", "--until", "2025-03-02", "--by", "model"]
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS} | {
        "DATABASE_URL": hostile_ledger
    }
    piped = subprocess.run(
        [*args, "--format", "csv"], env=env, capture_output=True, timeout=120, check=True
    )
    assert MODEL.encode() in piped.stdout
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.Popen(
            [*args, "--format", "csv"], env=env, stdout=terminal, stderr=subprocess.DEVNULL
        )
        os.close(terminal)
        seen = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the other side closed: EIO on Linux
                break
            if not chunk:
                break
            seen += chunk
        assert proc.wait(timeout=120) == 0
    finally:
        os.close(controller)
    shown = seen.decode().replace("\r\n", "\n")  # the terminal's own line endings
    assert "gpt\\x1b[2J\\x07<!channel>" in shown
    assert "\x1b" not in shown and "\x07" not in shown
