"""``billing invoice`` on both engines: numbered once per (account, month), lines that add up to
what the ledger charged, parties from settings and ``billing customer``, HTML and PDF (Chromium).

The oracle for the total is the test's own: each call's charge from the bundled price book's
``charge`` (what the worker bills with), plus the estimate a resolution charged, summed here.
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from ledger.factories import make_meta, settled, unsettled

from worker.cli import main
from worker.core.money import Micros
from worker.core.prices import load_price_book
from worker.core.result import Usage
from worker.ledger.credits import credit
from worker.ledger.database import make_engine, session_factory, upgrade
from worker.ledger.operations import apply_result, hold, resolve

GRACE = timedelta(hours=1)
MONTH = "2025-03"
IN_MONTH = datetime(2025, 3, 5, 9, tzinfo=UTC)
BOOK = load_price_book()
USAGES = [
    Usage(prompt_tokens=1_234, completion_tokens=567, cached_tokens=200),
    Usage(prompt_tokens=98_765, completion_tokens=4_321, cached_tokens=50_000),  # above its hold
    Usage(prompt_tokens=7, completion_tokens=3),
]


def _seed(url: str, account: str, other: str) -> int:
    """Calls of ``account`` in March 2025 (and one in April), a credit in February; returns the
    March total by the oracle."""
    engine = make_engine(url)
    expected = 0
    with session_factory(engine)() as session, session.begin():
        credit(session, account, Micros(10_000), key=f"k-{account}", note="top-up", who="t",
               now=datetime(2025, 2, 20, tzinfo=UTC), new_account=True)  # fmt: skip
        for n, usage in enumerate([*USAGES, USAGES[0]]):
            at = IN_MONTH + timedelta(days=9 * n)  # the last one is on April 1st
            rid = f"{account}-r{n}"
            charge = BOOK.charge("gpt-4o-mini", usage, at)
            quote = BOOK.quote("gpt-4o-mini", usage, at)
            assert charge is not None and quote is not None
            hold(
                session, make_meta(rid, account_id=account, reserved=10_000, created_at=at), now=at
            )
            result = settled(rid, account_id=account, usage=usage, charge=int(charge),
                             created_at=at, unit_prices=json.dumps(quote))  # fmt: skip
            apply_result(session, result, now=at, grace=GRACE)
            if at.month == 3:
                expected += int(charge)
        rid, at = f"{account}-bad", IN_MONTH + timedelta(days=2)
        hold(session, make_meta(rid, account_id=account, reserved=5_000, created_at=at), now=at)
        apply_result(session, unsettled(rid, account_id=account, reserved=5_000, exposure=3_000,
                                        created_at=at), now=at, grace=GRACE)  # fmt: skip
        resolve(session, rid, "charge_estimate", who="ops", note="n", now=at + timedelta(hours=2))
        expected += 3_000
        meta = make_meta(f"{other}-r", account_id=other, reserved=1_000, created_at=IN_MONTH)
        hold(session, meta, now=IN_MONTH)
        result = settled(
            f"{other}-r", account_id=other, reserved=1_000, charge=400, created_at=IN_MONTH
        )
        apply_result(session, result, now=IN_MONTH, grace=GRACE)
    engine.dispose()
    return expected


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "postgresql":
        found = str(request.getfixturevalue("pg_url"))
    else:
        found = f"sqlite:///{tmp_path / 'billing.db'}"
        upgrade(found)
    monkeypatch.setenv("DATABASE_URL", found)
    monkeypatch.setenv("BILLING_INVOICE_ISSUER_NAME", "Example <b>Ltd</b>")
    monkeypatch.setenv("BILLING_INVOICE_ISSUER_ADDRESS", "1 Example Street; Paris")
    monkeypatch.setenv("BILLING_INVOICE_PREFIX", "T")
    return found


def _invoice(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["invoice", *args])
    return result.exit_code, result.stdout, result.stderr


def test_invoice_numbers_lines_and_totals(url: str, tmp_path: Path) -> None:
    account, other = f"acct-{uuid.uuid4().hex[:8]}", f"acct-{uuid.uuid4().hex[:8]}"
    expected = _seed(url, account, other)
    done = CliRunner().invoke(
        main, ["customer", "set", account, "--name", "=Acme & Co", "--address", "2 Road;Lyon",
               "--email", "ap@acme.test", "--tax-id", "FR123"],
    )  # fmt: skip
    assert done.exit_code == 0, done.output

    code, out, err = _invoice(account, "--month", MONTH, "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["subtotal_micros"] == expected
    assert sum(line["amount_micros"] for line in data["lines"]) == expected
    assert data["credits_applied_micros"] == min(expected, 10_000)
    assert data["total_micros"] == expected - min(expected, 10_000)
    kinds = {(line["model"], line["kind"]) for line in data["lines"]} - {("", "rounding")}
    assert kinds == {("gpt-4o-mini", k) for k in ("input", "cached_input", "output", "estimate")}
    quantity = {line["kind"]: line["quantity"] for line in data["lines"]}
    march = USAGES[:3]
    assert quantity["cached_input"] == sum(u.cached_tokens for u in march)
    assert quantity["input"] == sum(u.prompt_tokens - u.cached_tokens for u in march)
    assert quantity["output"] == sum(u.completion_tokens for u in march)
    assert quantity["estimate"] == 1
    assert data["customer"] == {"name": "=Acme & Co", "address": ["2 Road", "Lyon"],
                                "email": "ap@acme.test", "tax_id": "FR123"}  # fmt: skip
    assert data["issuer"]["address"] == ["1 Example Street", "Paris"]
    number = data["number"]
    assert re.fullmatch(r"T-\d{6}", number)

    # Idempotent: the same invoice again has the same number; another one the next number.
    again = json.loads(_invoice(account, "--month", MONTH, "--format", "json")[1])
    assert again == data
    code, out, err = _invoice(other, "--month", MONTH, "--format", "json")
    assert code == 0, err
    assert int(json.loads(out)["number"][2:]) > int(number[2:])

    # HTML: escaped, and each amount's exact micros add up to the total.
    code, page, err = _invoice(account, "--month", MONTH)
    assert code == 0, err
    assert "<b>Ltd" not in page and "Example &lt;b&gt;Ltd&lt;/b&gt;" in page
    lines = re.findall(r'<tr data-kind="[^"]+">.*?data-micros="(-?\d+)"', page)
    assert sum(int(m) for m in lines) == expected
    assert f'data-total="subtotal" data-micros="{expected}"' in page
    assert page == json_free_html(account)

    # PDF, printed by headless Chromium.
    pdf = tmp_path / "invoice.pdf"
    code, _, err = _invoice(account, "--month", MONTH, "--format", "pdf", "--out", str(pdf))
    assert code == 0, err
    assert pdf.read_bytes().startswith(b"%PDF-") and pdf.stat().st_size > 1_000
    # The first print is kept: printing it again gives the same bytes.
    again_pdf = tmp_path / "again.pdf"
    code, _, err = _invoice(account, "--month", MONTH, "--format", "pdf", "--out", str(again_pdf))
    assert code == 0, err
    assert again_pdf.read_bytes() == pdf.read_bytes()


def json_free_html(account: str) -> str:
    """The HTML as issued once more (the stored bytes)."""
    code, page, err = _invoice(account, "--month", MONTH)
    assert code == 0, err
    return page


def test_unknown_accounts_and_open_months_are_one_line_errors(url: str) -> None:
    never = f"never-{uuid.uuid4().hex[:8]}"
    for args in (
        ["invoice", never, "--month", MONTH],
        ["statement", never, "--month", MONTH],
        ["invoice", never, "--month", f"{datetime.now(UTC):%Y-%m}"],
        ["invoice", never, "--month", "2025-13"],
        ["customer", "set", never, "--name", "Someone"],
    ):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2, (args, result.output)
        assert result.stderr.count("\n") == 1 and result.stdout == "", args
    assert "never seen" in CliRunner().invoke(main, ["invoice", never, "--month", MONTH]).stderr


@pytest.mark.postgres
def test_concurrent_issues_get_distinct_consecutive_numbers(pg_url: str) -> None:
    """Processes racing for the next number: each invoice gets one, none twice, no gap (the
    loser of a race retries); issuing one again returns its number."""
    from concurrent.futures import ThreadPoolExecutor

    from sqlalchemy import text

    from worker.reports.invoice_model import Party
    from worker.reports.invoice_query import Content
    from worker.reports.invoice_store import Numbering, issue

    empty = Content((), (), Micros(0))
    numbering = Numbering("RACE", "RCN", 30)
    start, end = datetime(2025, 1, 1, tzinfo=UTC), datetime(2025, 2, 1, tzinfo=UTC)

    def issue_one(account: str) -> str:
        issued = issue(
            factory, empty, account_id=account, month="2025-01", start=start, end=end,
            issuer=Party("Us"), numbering=numbering, now=now, allow_empty=True,
        )  # fmt: skip
        return issued.invoice.number

    engine = make_engine(pg_url)
    accounts = [f"race-{uuid.uuid4().hex[:8]}" for _ in range(6)]
    now = datetime.now(UTC)
    with engine.begin() as conn:
        for account in accounts:
            conn.execute(text("INSERT INTO accounts (id, created_at) VALUES (:a, :t)"),
                         {"a": account, "t": now})  # fmt: skip
    factory = session_factory(engine)
    try:
        with ThreadPoolExecutor(len(accounts)) as pool:
            printed = list(pool.map(issue_one, accounts))
        numbers = [int(n.split("-")[1]) for n in printed]
        assert len(set(numbers)) == len(accounts)
        assert sorted(numbers) == list(range(min(numbers), min(numbers) + len(accounts)))
        assert issue_one(accounts[0]) == printed[0]
    finally:
        engine.dispose()
