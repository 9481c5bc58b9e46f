"""``make demo``'s funded account: one customer is credited before the simulated calls run, and
its statement for the month is printed at the end (it ties out, or the demo says it does not)."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Console

from worker.core.money import Micros
from worker.ledger.credits import credit
from worker.ledger.database import make_engine, session_factory
from worker.reports.statement_query import run_statement
from worker.reports.statement_render import render_table

DEMO_ACCOUNT = "acct_1"
DEMO_CREDIT = Micros(5_000_000)  # 5 USD


def fund_demo_account(database_url: str) -> None:
    engine = make_engine(database_url)
    try:
        with session_factory(engine)() as session, session.begin():
            credit(session, DEMO_ACCOUNT, DEMO_CREDIT, key="demo-top-up", note="demo top-up",
                   who="demo", now=datetime.now(UTC), new_account=True)  # fmt: skip
    finally:
        engine.dispose()


def print_demo_statement(database_url: str) -> bool:
    """Print the funded account's statement for this month; True when it ties out."""
    statement = run_statement(database_url, DEMO_ACCOUNT, f"{datetime.now(UTC):%Y-%m}")
    out = Console()
    out.print(f"statement of the funded account {DEMO_ACCOUNT} (`billing statement`):")
    print(render_table(statement), end="")
    return statement.ties_out
