"""``billing balance``: a customer's available, held and charged money, from the ledger."""

from __future__ import annotations

import click

from worker.cli import main
from worker.cli.db import echo_json, ledger_session
from worker.ledger.balances import balance
from worker.terminal import printable


@main.command("balance")
@click.argument("account")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
def balance_command(account: str, as_json: bool) -> None:
    """Available, held and charged for ACCOUNT, in micros and USD."""
    with ledger_session("balance", readonly=True) as session:
        found = balance(session, account)
    amounts = {"available": found.available, "held": found.held, "charged": found.charged}
    if as_json:
        echo_json(
            {
                "account_id": account,
                **{f"{k}_micros": int(v) for k, v in amounts.items()},
                **{f"{k}_usd": v.usd() for k, v in amounts.items()},
            }
        )
        return
    click.echo(f"account {printable(account)}")
    for name, amount in amounts.items():
        click.echo(f"  {name:<10} {int(amount):>16} micros  ${amount.usd():>16}")
