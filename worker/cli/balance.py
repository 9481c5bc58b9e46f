"""``billing balance``: what each customer account holds, from the ledger (``worker.ledger.funds``),
its budgets and what it spent of them (``worker.ledger.spend``), and, with spend control on, what
the gateway holds in flight for it in the authorization store (calls not recorded yet).

Heavy modules (SQLAlchemy, the ledger) are imported inside the command, when it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from worker.cli import main
from worker.cli.db import echo_json, fail
from worker.core.terminal import printable

FIGURES = ("funded", "held", "charged", "available")


def budgets_list(spend: Any, model_of: Callable[[str], str] = str) -> list[dict[str, Any]]:
    """Each budget in force with what the ledger charged of it in the current period: a model's
    budget counts the calls of every name ``model_of`` gives it (``PriceBook.budget_model``, as
    spend control does)."""
    if spend is None:
        return []

    def charged(period: str, model: str) -> int:
        if not model:
            return int(spend.spent.get((period, ""), 0))
        name = model_of(model)
        return sum(
            int(amount)
            for (p, m), amount in spend.spent.items()
            if p == period and m and model_of(m) == name
        )

    return [
        {
            "period": period,
            "model": model or None,
            "limit_micros": limit,
            "charged_micros": charged(period, model),
        }
        for (period, model), limit in sorted(spend.budgets.items())
    ]


def in_flight(account: str) -> dict[str, Any] | None:
    """What the authorization store holds for ``account`` beyond the ledger: the calls authorized
    and not yet closed by the ledger, their holds, and the store's spendable. None when spend
    control is off; ``{"error": …}`` when Redis cannot answer."""
    from worker.cli.db import settings

    config = settings("balance")
    if not config.authorize:
        return None
    import redis

    from worker.contract.authorization import AuthorizationStore

    client = redis.Redis.from_url(config.redis_url, socket_timeout=2, socket_connect_timeout=2)
    try:
        store = AuthorizationStore(client, config.prefix)
        figures = store.figures(account)
        calls = store.calls(account)
        held = [int(c["a"]) for c in calls.values() if c.get("s") == "h"]
        found: dict[str, Any] = {"calls": len(held), "held_micros": sum(held)}
        if "funds" in figures:
            found["spendable_micros"] = (
                int(figures["funds"]) - int(figures.get("charged", 0)) - int(figures.get("held", 0))
            )
        return found
    except redis.RedisError as exc:
        return {"error": f"authorization store unreachable: {type(exc).__name__}"}
    finally:
        client.close()


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

    as_of = None
    if at is not None:
        from worker.reports.spec import ReportError, parse_time

        try:
            as_of = parse_time(at, "at")
        except ReportError as exc:
            fail("balance", str(exc))
    from datetime import UTC, datetime

    from worker.ledger.spend import spend_snapshot

    with ledger_session("balance", readonly=True) as session:
        if account is not None:
            from worker.ledger.queries import require_known_account

            # the statement's and the invoice's rule: all zeros would read as a real account
            require_known_account(session, account)  # a LedgerError: one line, exit 2
        found = account_funds(session, None if account is None else [account], as_of=as_of)
        spends = (
            spend_snapshot(session, datetime.now(UTC), None if account is None else [account])
            if as_of is None
            else {}
        )
        # The price book (and the tokenizer it brings) only for a model's budget to name.
        model_budgets = any(model for spend in spends.values() for _p, model in spend.budgets)
        model_of: Callable[[str], str] = str
        if model_budgets:
            from worker.cli.db import settings
            from worker.consumer.pricing import effective_book

            model_of = effective_book(session, settings("balance").price_book).budget_model
    flights = {a: in_flight(a) for a in found} if account is not None and as_of is None else {}
    rows = []
    for funds in found.values():
        row = funds_dict(funds)
        row["budgets"] = budgets_list(spends.get(funds.account_id), model_of)
        if flights.get(funds.account_id) is not None:
            row["in_flight"] = flights[funds.account_id]
        rows.append(row)
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
        for budget in budgets_list(spends.get(funds.account_id), model_of):
            scope = budget["period"] + (f" {budget['model']}" if budget["model"] else "")
            click.echo(
                printable(
                    f"  budget {scope}: {budget['charged_micros']} of {budget['limit_micros']}"
                    " micros charged this period"
                )
            )
        flight = flights.get(funds.account_id)
        if flight is not None:
            if "error" in flight:
                click.echo(f"  in flight: {flight['error']}")
            else:
                click.echo(
                    f"  in flight: {flight['calls']} calls holding {flight['held_micros']} micros"
                    " (authorized, not yet recorded)"
                )
