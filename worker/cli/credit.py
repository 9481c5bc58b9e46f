"""``billing credit`` and ``billing account limit``: fund a customer account, reverse a credit, set
a credit limit. Amounts are USD as typed (``worker.core.money.parse_usd``), checked before the database
is opened. A write that lost a race on a unique key is retried in a new transaction, where it finds
the winner's row (``worker.ledger.credits``).

Heavy modules (SQLAlchemy, the ledger) are imported inside the commands, when one runs.
"""

from __future__ import annotations

import getpass
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import click

from worker.cli import main
from worker.cli.db import fail, settings
from worker.core.money import parse_usd
from worker.core.terminal import printable

T = TypeVar("T")
ATTEMPTS = 3


def _default_who() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "cli"


def _usd(command: str, text: str, *, allow_zero: bool = False) -> Any:
    try:
        return parse_usd(text, allow_zero=allow_zero)
    except ValueError as exc:
        fail(command, str(exc))


def in_transaction(command: str, work: Callable[[Any], T]) -> T:
    """``work(session)`` in one transaction, committed; retried on a transient error
    (``transient.is_transient``); expected errors end the command with status 2."""
    from sqlalchemy.exc import SQLAlchemyError

    from worker.cli.db import database_error
    from worker.core.errors import BillingError
    from worker.db.transient import is_transient
    from worker.ledger import database

    engine = database.make_engine(settings(command).database_url)
    try:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                with database.session_factory(engine)() as session, session.begin():
                    return work(session)
            except SQLAlchemyError as exc:
                if attempt == ATTEMPTS or not is_transient(exc):
                    fail(command, database_error(exc))
            except BillingError as exc:
                fail(command, str(exc))
        raise AssertionError("unreachable")  # pragma: no cover
    finally:
        engine.dispose()


class _CreditGroup(click.Group):
    """``billing credit ACCOUNT AMOUNT`` runs ``add``; ``billing credit reverse KEY`` reverses.
    (An account named like a subcommand is credited with ``billing credit add NAME AMOUNT``.)"""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and not args[0].startswith("-") and args[0] not in self.commands:
            args = ["add", *args]
        return super().parse_args(ctx, args)


@main.group("credit", cls=_CreditGroup)
def credit_group() -> None:
    """Fund customer accounts: `billing credit ACCOUNT AMOUNT --note … --key …`."""


# A negative AMOUNT reaches the amount check (and its message), not click's "no such option".
NEGATIVE_AMOUNTS = {"ignore_unknown_options": True}


@credit_group.command("add", context_settings=NEGATIVE_AMOUNTS)
@click.argument("account")
@click.argument("amount")
@click.option("--note", required=True, help="Why (kept with the credit).")
@click.option("--key", required=True, help="Idempotency key: the same key credits once.")
@click.option("--by", "who", default=None, help="Who credits (default: the login name).")
@click.option(
    "--new-account",
    is_flag=True,
    help="ACCOUNT has never been seen (no call, credit or limit): create it.",
)
def add_command(
    account: str, amount: str, note: str, key: str, who: str | None, new_account: bool
) -> None:
    """Credit AMOUNT USD (up to 6 decimals) to ACCOUNT's available balance."""
    from worker.core.errors import LedgerError
    from worker.ledger.credits import account_id_of

    micros = _usd("credit", amount)
    try:
        account_id_of(account)
    except LedgerError as exc:
        fail("credit", str(exc))

    def work(session: Any) -> Any:
        from worker.ledger.credits import credit

        return credit(session, account, micros, key=key, note=note, who=who or _default_who(),
                      now=datetime.now(UTC), new_account=new_account)  # fmt: skip

    done = in_transaction("credit", work)
    if done.outcome == "duplicate":
        click.echo(
            printable(
                f"already recorded: key {key} credited {done.amount.usd()} USD to {account} "
                f"on {done.at.isoformat()}; nothing changed"
            )
        )
        return
    click.echo(printable(f"credited {done.amount.usd()} USD to {account} (key {key})"))


@credit_group.command("reverse")
@click.argument("key")
@click.option("--note", required=True, help="Why (kept with the reversal).")
@click.option("--by", "who", default=None, help="Who reverses (default: the login name).")
def reverse_command(key: str, note: str, who: str | None) -> None:
    """Reverse the credit recorded under KEY, in full, as a new ledger transaction."""

    def work(session: Any) -> Any:
        from worker.ledger.credits import reverse

        return reverse(session, key, note=note, who=who or _default_who(), now=datetime.now(UTC))

    done = in_transaction("credit reverse", work)
    if done.outcome == "duplicate":
        click.echo(printable(f"already reversed on {done.at.isoformat()}; nothing changed"))
        return
    click.echo(
        printable(f"reversed {done.amount.usd()} USD credited to {done.account_id} (key {key})")
    )


@main.group("account")
def account_group() -> None:
    """Customer account settings."""


@account_group.command("limit", context_settings=NEGATIVE_AMOUNTS)
@click.argument("account")
@click.argument("amount")
@click.option("--note", required=True, help="Why (kept with the limit's history).")
@click.option("--by", "who", default=None, help="Who sets it (default: the login name).")
def limit_command(account: str, amount: str, note: str, who: str | None) -> None:
    """Let ACCOUNT's available balance go AMOUNT USD below zero (0: not below zero)."""
    micros = _usd("account limit", amount, allow_zero=True)

    def work(session: Any) -> Any:
        from worker.ledger.credits import set_limit

        return set_limit(session, account, micros, note=note, who=who or _default_who(),
                         now=datetime.now(UTC))  # fmt: skip

    outcome = in_transaction("account limit", work)
    said = "already in force; nothing changed" if outcome == "duplicate" else "set"
    click.echo(printable(f"credit limit of {account}: {micros.usd()} USD {said}"))


@account_group.command("budget", context_settings=NEGATIVE_AMOUNTS)
@click.argument("account")
@click.argument("amount", required=False)
@click.option(
    "--period", type=click.Choice(["day", "month"]), required=True, help="UTC day or month."
)
@click.option("--model", default="", help="Only this model's calls (default: every model).")
@click.option("--clear", is_flag=True, help="Remove the budget instead of setting AMOUNT.")
@click.option("--note", required=True, help="Why (kept with the budget's history).")
@click.option("--by", "who", default=None, help="Who sets it (default: the login name).")
@click.option("--new-account", is_flag=True, help="ACCOUNT has never been seen: create it.")
def budget_command(
    account: str,
    amount: str | None,
    period: str,
    model: str,
    clear: bool,
    note: str,
    who: str | None,
    new_account: bool,
) -> None:
    """Let ACCOUNT spend at most AMOUNT USD per UTC day or month (charged plus held in flight),
    for every model or one (--model). Enforced by the gateway when BILLING_AUTHORIZE is on, from
    the next sync of the authorization store (BILLING_AUTH_SYNC_SECONDS)."""
    if clear == (amount is not None):
        fail("account budget", "give AMOUNT, or --clear, not both")
    micros = None if amount is None else _usd("account budget", amount, allow_zero=True)

    def work(session: Any) -> Any:
        from worker.ledger.budgets import set_budget

        return set_budget(session, account, period, micros, model=model, note=note,
                          who=who or _default_who(), now=datetime.now(UTC),
                          new_account=new_account)  # fmt: skip

    outcome = in_transaction("account budget", work)
    scope = f"{period} budget of {account}" + (f" for {model}" if model else "")
    if outcome == "duplicate":
        said = "already in force; nothing changed"
    else:
        said = "cleared" if micros is None else "set"
    value = "none" if micros is None else f"{micros.usd()} USD"
    click.echo(printable(f"{scope}: {value} {said}"))
