"""``billing credit``, ``billing credit reverse``, ``billing account limit`` and ``billing
balance`` against a SQLite file, through click's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from worker.cli import main


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    runner = CliRunner()
    result = runner.invoke(main, ["db", "upgrade"])
    assert result.exit_code == 0, result.output
    return runner


def unseen(runner: CliRunner, account: str) -> bool:
    """Whether the ledger has never seen ``account`` (``balance`` refuses it)."""
    result = runner.invoke(main, ["balance", account])
    return result.exit_code == 2 and "never seen" in result.stderr


def balance(runner: CliRunner, account: str) -> dict:
    result = runner.invoke(main, ["balance", account, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_credit_is_idempotent_by_key(runner: CliRunner) -> None:
    args = ["credit", "acct-1", "25.50", "--note", "invoice 7", "--key", "inv-7", "--new-account"]
    first = runner.invoke(main, args)
    assert first.exit_code == 0, first.output
    assert first.output == "credited 25.500000 USD to acct-1 (key inv-7)\n"
    again = runner.invoke(main, args)
    assert again.exit_code == 0 and again.output.startswith("already recorded: key inv-7")
    assert "nothing changed" in again.output
    other = runner.invoke(
        main, ["credit", "acct-1", "25.51", "--note", "invoice 7", "--key", "inv-7"]
    )
    assert other.exit_code == 2 and "refusing a different credit" in other.stderr
    assert other.stderr.count("\n") == 1
    data = balance(runner, "acct-1")
    assert (data["funded_micros"], data["available_micros"]) == (25_500_000, 25_500_000)
    assert (data["held_micros"], data["charged_micros"]) == (0, 0)
    assert data["credit_limit_micros"] is None


@pytest.mark.parametrize(
    ("amount", "said"),
    [("-5", "negative"), ("0", "more than 0"), ("1.0000001", "more than 6 decimals"),
     ("1e9", "not an amount"), ("100000000000", "absurd")],
)  # fmt: skip
def test_bad_amounts_are_one_line(runner: CliRunner, amount: str, said: str) -> None:
    result = runner.invoke(main, ["credit", "acct-1", amount, "--note", "x", "--key", "k"])
    assert result.exit_code == 2 and said in result.stderr and result.stderr.count("\n") == 1
    assert unseen(runner, "acct-1")  # nothing funded, nothing created


def test_reverse_and_limit(runner: CliRunner) -> None:
    runner.invoke(main, ["credit", "acct-2", "10", "--note", "x", "--key", "k2", "--new-account"])
    done = runner.invoke(main, ["credit", "reverse", "k2", "--note", "chargeback"])
    assert done.exit_code == 0, done.output
    assert done.output == "reversed 10.000000 USD credited to acct-2 (key k2)\n"
    again = runner.invoke(main, ["credit", "reverse", "k2", "--note", "chargeback"])
    assert again.exit_code == 0 and "already reversed" in again.output
    unknown = runner.invoke(main, ["credit", "reverse", "nope", "--note", "x"])
    assert unknown.exit_code == 2 and "no credit was recorded" in unknown.stderr
    limit = runner.invoke(main, ["account", "limit", "acct-2", "5", "--note", "net 30"])
    assert limit.exit_code == 0 and limit.output == "credit limit of acct-2: 5.000000 USD set\n"
    data = balance(runner, "acct-2")
    assert (data["funded_micros"], data["available_micros"]) == (0, 0)
    assert (data["credit_limit_micros"], data["spendable_micros"]) == (5_000_000, 5_000_000)
    text = runner.invoke(main, ["balance", "acct-2"]).output
    assert "credit limit" in text and "spendable" in text


def test_an_account_named_like_a_subcommand(runner: CliRunner) -> None:
    result = runner.invoke(
        main, ["credit", "add", "reverse", "1", "--note", "x", "--key", "kr", "--new-account"]
    )
    assert result.exit_code == 0, result.output
    assert balance(runner, "reverse")["funded_micros"] == 1_000_000


def test_balance_of_every_account_and_at_a_moment(runner: CliRunner) -> None:
    runner.invoke(main, ["credit", "a", "1", "--note", "x", "--key", "ka", "--new-account"])
    runner.invoke(main, ["credit", "b", "2", "--note", "x", "--key", "kb", "--new-account"])
    every = json.loads(runner.invoke(main, ["balance", "--json"]).output)
    assert [(row["account_id"], row["funded_micros"]) for row in every] == [
        ("a", 1_000_000), ("b", 2_000_000),
    ]  # fmt: skip
    before = json.loads(
        runner.invoke(main, ["balance", "a", "--at", "2000-01-01", "--json"]).output
    )
    assert before["funded_micros"] == 0
    bad = runner.invoke(main, ["balance", "a", "--at", "yesterday"])
    assert bad.exit_code == 2 and bad.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("account", "said"),
    [("acct\x1b[2J", "control character"), (" acct-9", "whitespace"), ("acct-9 ", "whitespace"),
     ("acct\u0085", "control character"), ("x" * 201, "longer than 200")],
)  # fmt: skip
def test_credit_refuses_ids_no_call_can_have(runner: CliRunner, account: str, said: str) -> None:
    """One id rule for calls and credits: an id a call's metadata would be refused with funds no
    call, so the credit is refused before the database is opened, in one line."""
    from worker.core.errors import RequestMetaError
    from worker.core.request import check_identifier

    with pytest.raises(RequestMetaError):  # the calls' own rule refuses it too
        check_identifier(account, "account_id")
    args = ["credit", account, "5", "--note", "x", "--key", "kid", "--new-account"]
    result = runner.invoke(main, args)
    assert result.exit_code == 2 and said in result.stderr and result.stderr.count("\n") == 1
    assert "\x1b" not in result.stderr


def test_crediting_an_unseen_account_needs_new_account(runner: CliRunner) -> None:
    """A typo in an id must not fund an account no call reaches: an account never seen is
    refused without --new-account, and once it exists a credit needs no flag."""
    refused = runner.invoke(main, ["credit", "acct-new", "5", "--note", "x", "--key", "kn1"])
    assert refused.exit_code == 2 and "never been seen" in refused.stderr
    assert "--new-account" in refused.stderr
    assert unseen(runner, "acct-new")
    created = runner.invoke(
        main, ["credit", "acct-new", "5", "--note", "x", "--key", "kn1", "--new-account"]
    )
    assert created.exit_code == 0, created.output
    again = runner.invoke(main, ["credit", "acct-new", "2", "--note", "y", "--key", "kn2"])
    assert again.exit_code == 0, again.output
    assert balance(runner, "acct-new")["funded_micros"] == 7_000_000


def test_a_budget_is_set_shown_and_cleared(runner: CliRunner) -> None:
    set_it = ["account", "budget", "acct-b", "2.50", "--period", "day", "--note", "trial"]
    result = runner.invoke(main, [*set_it, "--new-account"])
    assert result.exit_code == 0, result.output
    assert "day budget of acct-b: 2.500000 USD set" in result.output
    again = runner.invoke(main, set_it)
    assert "already in force; nothing changed" in again.output
    model = ["account", "budget", "acct-b", "1", "--period", "month", "--model", "gpt-4o",
             "--note", "cap"]  # fmt: skip
    assert runner.invoke(main, model).exit_code == 0
    shown = balance(runner, "acct-b")["budgets"]
    assert shown == [
        {"period": "day", "model": None, "limit_micros": 2_500_000, "charged_micros": 0},
        {"period": "month", "model": "gpt-4o", "limit_micros": 1_000_000, "charged_micros": 0},
    ]
    cleared = runner.invoke(
        main, ["account", "budget", "acct-b", "--clear", "--period", "day", "--note", "over"]
    )
    assert cleared.exit_code == 0, cleared.output
    assert "day budget of acct-b: none cleared" in cleared.output
    assert [b["period"] for b in balance(runner, "acct-b")["budgets"]] == ["month"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-1"], "negative"),
        (["1.0000001"], "decimal"),
        ([], "give amount, or --clear"),
        (["1", "--clear"], "give amount, or --clear"),
    ],
)
def test_a_bad_budget_is_refused_before_the_database(runner, args, message) -> None:
    result = runner.invoke(
        main, ["account", "budget", "acct-c", *args, "--period", "day", "--note", "n"]
    )
    assert result.exit_code == 2
    assert message in result.output.lower() or message in (result.stderr or "").lower()


@pytest.mark.redis
def test_balance_shows_what_the_gateway_holds_in_flight(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch, redis_client, prefix: str
) -> None:
    from datetime import UTC, datetime

    from worker.contract.authorization import AuthorizationStore

    monkeypatch.setenv("BILLING_AUTHORIZE", "1")
    monkeypatch.setenv("BILLING_PREFIX", prefix)
    add = ["credit", "add", "acct-f", "1", "--note", "n", "--key", "k", "--new-account"]
    assert runner.invoke(main, add).exit_code == 0
    store = AuthorizationStore(redis_client, prefix)
    store.mark_ready()
    store.install("acct-f", funds=1_000_000, charged=0, fields={})
    at = datetime.now(UTC)
    assert store.authorize("acct-f", "r1", 300_000, at, "gpt-4o").admitted
    assert store.authorize("acct-f", "r2", 200_000, at, "gpt-4o").admitted
    assert store.release("acct-f", "r2", 50_000)
    flight = balance(runner, "acct-f")["in_flight"]
    assert flight == {"calls": 1, "held_micros": 300_000, "spendable_micros": 650_000}
    text = runner.invoke(main, ["balance", "acct-f"]).output
    assert "in flight: 1 calls holding 300000 micros" in text


def test_a_model_budget_shows_the_spend_of_every_name_of_the_model() -> None:
    from worker.cli.balance import budgets_list
    from worker.core.prices import load_price_book
    from worker.ledger.spend import AccountSpend

    spend = AccountSpend("a", funds=None, charged=0, budgets={("day", "gpt-4o-mini"): 100})
    spend.spent = {("day", "gpt-4o-mini-2024-07-18"): 30, ("day", "openai/gpt-4o-mini"): 5,
                   ("day", "gpt-4o"): 7, ("day", ""): 42}  # fmt: skip
    shown = budgets_list(spend, load_price_book().budget_model)
    assert shown == [
        {"period": "day", "model": "gpt-4o-mini", "limit_micros": 100, "charged_micros": 35}
    ]
