"""``billing balance``: what each customer account holds, from the ledger (``worker.ledger.funds``).

Heavy modules (SQLAlchemy, the ledger) are imported inside the command, when it runs.
"""

from __future__ import annotations

from typing import Any

import click

from worker.cli import main
from worker.cli.db import echo_json, fail
from worker.core.terminal import printable

FIGURES = ("funded", "held", "charged", "available")


def funds_dict(funds: Any) -> dict[str, Any]:
    limit = funds.limit
    return {
        "account_id": funds.account_id,
        **{f"{name}_micros": int(getattr(funds, name)) for name in FIGURES},
        **{f"{name}_usd": getattr(funds, name).usd() for name in FIGURES},
        "credit_limit_micros": None if limit is None else int(limit),
        "credit_limit_usd": None if limit is None else limit.usd(),
        "spendable_micros": int(funds.spendable),
        "spendable_usd": funds.spendable.usd(),
    }


@main.command("balance")
@click.argument("account", required=False)
@click.option("--at", "at", default=None, help="As of this RFC 3339 date or time (UTC).")
@click.option("--json", "as_json", is_flag=True, help="JSON (an object, or a list of them).")
def balance_command(account: str | None, at: str | None, as_json: bool) -> None:
    """Funded, held, charged and available for ACCOUNT (every account without one), in USD.

    available = funded - held - charged; spendable adds the credit limit, if one is set."""
    from worker.cli.db import ledger_session
    from worker.ledger.funds import account_funds
    from worker.reports.spec import ReportError, parse_time

    as_of = None
    if at is not None:
        try:
            as_of = parse_time(at, "at")
        except ReportError as exc:
            fail("balance", str(exc))
    with ledger_session("balance", readonly=True) as session:
        found = account_funds(session, None if account is None else [account], as_of=as_of)
    rows = [funds_dict(funds) for funds in found.values()]
    if as_json:
        echo_json(rows[0] if account is not None else rows)
        return
    if not rows:
        click.echo("no accounts")
    for funds in found.values():
        click.echo(printable(f"account {funds.account_id}"))
        for name in FIGURES:
            amount = getattr(funds, name)
            click.echo(f"  {name:<12} {int(amount):>18} micros  ${amount.usd():>18}")
        if funds.limit is not None:
            click.echo(
                f"  {'credit limit':<12} {int(funds.limit):>18} micros  ${funds.limit.usd():>18}"
            )
            click.echo(
                f"  {'spendable':<12} {int(funds.spendable):>18} micros  ${funds.spendable.usd():>18}"
            )
