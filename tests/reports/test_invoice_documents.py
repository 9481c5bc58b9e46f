"""Issued invoices are documents (issue 52, point 1), through ``billing invoice`` on both engines:
finalized once and returned byte for byte, whatever changes after (prefix, issuer, a back-dated
credit: that goes on a credit note); status by command; no number for an empty month; a bad
``--out`` refused in one line before anything is written.

Oracles are the test's own: the seeded charges (``_seed``: the price book's ``charge``) and the
credit the test posts.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from models import OutboxAlert
from reports.test_invoice_cli import MONTH, _invoice, _seed, url  # noqa: F401  (a fixture)
from worker.cli import main
from worker.core.money import Micros
from worker.ledger.credits import credit
from worker.ledger.database import make_engine, session_factory

IN_MONTH = datetime(2025, 3, 20, tzinfo=UTC)


def _json(account: str) -> tuple[dict, str, str]:
    code, out, err = _invoice(account, "--month", MONTH, "--format", "json")
    assert code == 0, err
    return json.loads(out), out, err


def _events(db_url: str, number: str) -> int:
    engine = make_engine(db_url)
    with session_factory(engine)() as session:
        rows = session.execute(
            select(OutboxAlert.payload).where(OutboxAlert.kind == "invoice_finalized")
        ).scalars()
        found = sum(json.loads(p)["number"] == number for p in rows)
    engine.dispose()
    return found


def test_a_reissue_is_the_same_bytes_and_a_late_credit_goes_on_a_credit_note(
    url: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    account, other = f"acct-{uuid.uuid4().hex[:8]}", f"acct-{uuid.uuid4().hex[:8]}"
    charged = _seed(url, account, other)  # 10,000 prepaid in February
    data, first_json, _ = _json(account)
    code, first_html, err = _invoice(account, "--month", MONTH)
    assert code == 0, err
    number = data["number"]
    assert data["total_micros"] == charged - 10_000 > 0
    assert _events(url, number) == 1  # the webhook event, queued once

    monkeypatch.setenv("BILLING_INVOICE_PREFIX", "ACME")
    monkeypatch.setenv("BILLING_INVOICE_ISSUER_NAME", "Someone Else SA")
    engine = make_engine(url)
    with session_factory(engine)() as session, session.begin():
        credit(session, account, Micros(2_500), key=f"late-{account}", note="back-dated",
               who="t", now=IN_MONTH)  # fmt: skip
    engine.dispose()

    _, again_json, err = _json(account)
    assert again_json == first_json
    assert "credit note CN-" in err
    code, again_html, _ = _invoice(account, "--month", MONTH)
    assert again_html == first_html
    note_number = err.split("credit note ")[1].split()[0]

    shown = CliRunner().invoke(main, ["invoices", "show", note_number, "--format", "json"])
    assert shown.exit_code == 0, shown.stderr
    note = json.loads(shown.stdout)
    assert (note["kind"], note["corrects"]) == ("credit_note", number)
    assert [(c["kind"], c["key"], c["amount_micros"]) for c in note["credits"]] == [
        ("credit", f"late-{account}", 2_500)
    ]
    assert (note["subtotal_micros"], note["tax_micros"]) == (0, 0)
    assert note["credits_applied_micros"] == 2_500  # the invoice had more due than that
    assert note["total_micros"] == -2_500
    assert note["issuer"]["name"] == "Someone Else SA"  # a new document: today's issuer
    assert _events(url, note_number) == 1

    # Nothing new: no second note; the invoice still the same bytes.
    _, third_json, err = _json(account)
    assert third_json == first_json and "credit note" not in err
    listed = CliRunner().invoke(main, ["invoices", "list", account, "--json"])
    assert [(r["number"], r["kind"]) for r in json.loads(listed.stdout)] == [
        (number, "invoice"), (note_number, "credit_note"),
    ]  # fmt: skip


def test_status_void_keeps_the_number_and_the_month_is_invoiced_again(url: str) -> None:  # noqa: F811
    account, other = f"acct-{uuid.uuid4().hex[:8]}", f"acct-{uuid.uuid4().hex[:8]}"
    _seed(url, account, other)
    first, first_json, _ = _json(account)
    number = first["number"]

    def mark(*args: str) -> tuple[int, str]:
        done = CliRunner().invoke(main, ["invoices", "mark", *args, "--note", "n", "--by", "t"])
        return done.exit_code, done.stdout + done.stderr

    assert mark(number, "overdue") == (0, f"{number}: overdue\n")
    code, text = mark(number, "overdue")
    assert code == 2 and text.count("\n") == 1 and "cannot become overdue" in text
    assert mark(number, "void") == (0, f"{number}: void\n")
    assert mark(number, "paid")[0] == 2  # void is final
    shown = CliRunner().invoke(main, ["invoices", "show", number, "--format", "json"])
    assert shown.stdout == first_json  # the stored bytes, status apart
    second, _, _ = _json(account)
    assert second["number"] != number
    assert int(second["number"].split("-")[1]) > int(number.split("-")[1])
    listed = json.loads(CliRunner().invoke(main, ["invoices", "list", account, "--json"]).stdout)
    assert [(r["number"], r["status"]) for r in listed] == [
        (number, "void"), (second["number"], "finalized"),
    ]  # fmt: skip


def test_an_empty_month_uses_no_number_unless_asked(url: str) -> None:  # noqa: F811
    account, other = f"acct-{uuid.uuid4().hex[:8]}", f"acct-{uuid.uuid4().hex[:8]}"
    _seed(url, account, other)
    before = CliRunner().invoke(main, ["invoices", "list", account, "--json"]).stdout
    code, out, err = _invoice(account, "--month", "2025-01")  # before the account existed
    assert code == 2 and out == "" and err.count("\n") == 1 and "no number used" in err
    assert CliRunner().invoke(main, ["invoices", "list", account, "--json"]).stdout == before
    code, out, err = _invoice(account, "--month", "2025-01", "--draft", "--format", "json")
    assert code == 0 and json.loads(out)["number"] == "DRAFT"
    assert CliRunner().invoke(main, ["invoices", "list", account, "--json"]).stdout == before
    code, out, err = _invoice(account, "--month", "2025-01", "--allow-empty", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["total_micros"] == 0 and json.loads(out)["lines"] == []


@pytest.mark.parametrize("fmt", ["pdf", "html", "json"])
def test_out_under_a_file_is_one_line_and_creates_nothing(
    url: str,  # noqa: F811
    tmp_path: Path,
    fmt: str,
) -> None:
    account, other = f"acct-{uuid.uuid4().hex[:8]}", f"acct-{uuid.uuid4().hex[:8]}"
    _seed(url, account, other)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    target = blocker / "sub" / f"invoice.{fmt}"
    before = CliRunner().invoke(main, ["invoices", "list", account, "--json"]).stdout
    code, out, err = _invoice(account, "--month", MONTH, "--format", fmt, "--out", str(target))
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "is a file, not a folder" in err
    assert not (tmp_path / "sub").exists() and blocker.is_file()
    assert blocker.read_text() == "x"
    # refused before anything was finalized: no number used
    assert CliRunner().invoke(main, ["invoices", "list", account, "--json"]).stdout == before
