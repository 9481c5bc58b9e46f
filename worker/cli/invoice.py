"""``billing invoice ACCOUNT --month YYYY-MM``: the customer's invoice for a closed month, and
``billing customer``: the customer details an invoice prints (``worker.reports.invoice_query``).

The invoice is numbered once per (account, month): issuing it again prints the same document under
the same number. Bad input, an account the ledger has never seen and database errors print one line
and exit 2. Heavy modules (SQLAlchemy, the reports) are imported inside the commands, when they run.
"""

from __future__ import annotations

import getpass
from datetime import UTC, datetime
from pathlib import Path

import click

from worker.cli import main
from worker.cli.db import fail, settings, write_output
from worker.core.terminal import printable

FORMATS = ("html", "pdf", "json")


@main.command("invoice")
@click.argument("account")
@click.option("--month", required=True, help="YYYY-MM (UTC), a month that is over.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="html", show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write to FILE.")
def invoice_command(account: str, month: str, fmt: str, out: Path | None) -> None:
    """The customer's invoice for a closed month: lines by model and kind of token, HTML or PDF."""
    from sqlalchemy.exc import SQLAlchemyError

    from worker.cli.db import database_error
    from worker.cli.report import _check_sqlite_file
    from worker.core.errors import BillingError
    from worker.reports.invoice_model import Party
    from worker.reports.invoice_query import run_invoice
    from worker.reports.invoice_render import (
        print_pdf,
        render_invoice_html,
        render_invoice_json,
    )

    config = settings("invoice")
    if config.invoice_issuer_name is None:
        fail("invoice", "BILLING_INVOICE_ISSUER_NAME is not set: an invoice names its issuer")
    if fmt == "pdf" and out is None:
        fail("invoice", "--format pdf needs --out FILE")
    address = tuple(
        part.strip() for part in (config.invoice_issuer_address or "").split(";") if part.strip()
    )
    issuer = Party(
        config.invoice_issuer_name, address, config.invoice_issuer_email,
        config.invoice_issuer_tax_id,
    )  # fmt: skip
    try:
        _check_sqlite_file(config.database_url)
        doc = run_invoice(
            config.database_url,
            account,
            month,
            issuer=issuer,
            prefix=config.invoice_prefix,
            now=datetime.now(UTC),
        )
        if fmt == "pdf":
            assert out is not None  # refused above
            print_pdf(render_invoice_html(doc), out)
            click.echo(f"invoice {doc.number} written to {out}", err=True)
            return
    except SQLAlchemyError as exc:
        fail("invoice", database_error(exc))
    except BillingError as exc:
        fail("invoice", str(exc))
    text = render_invoice_html(doc) if fmt == "html" else render_invoice_json(doc)
    write_output("invoice", text, out, f"invoice {doc.number}")


@main.group("customer")
def customer_group() -> None:
    """Customer details printed on invoices (name, address, e-mail, tax id)."""


@customer_group.command("set")
@click.argument("account")
@click.option("--name", required=True, help="The customer's name as invoiced.")
@click.option("--address", help="Postal address, lines separated by ';'.")
@click.option("--email", help="Billing e-mail.")
@click.option("--tax-id", help="Tax id (VAT number).")
@click.option("--by", "who", default=None, help="Who sets them (default: the login name).")
def customer_set_command(
    account: str,
    name: str,
    address: str | None,
    email: str | None,
    tax_id: str | None,
    who: str | None,
) -> None:
    """Set ACCOUNT's details from now on; invoices issued earlier keep the ones they printed."""
    from worker.cli.db import ledger_session
    from worker.reports.invoice_query import set_customer

    fields = {"--name": name, "--address": address, "--email": email, "--tax-id": tax_id}
    limits = {"--name": 200, "--address": 2000, "--email": 320, "--tax-id": 64}
    for option, value in fields.items():
        if value is not None and (not value.strip() or len(value) > limits[option]):
            fail("customer set", f"{option}: 1 to {limits[option]} characters, not blank")
        if value is not None and any(ord(c) < 32 for c in value):
            fail("customer set", f"{option}: control characters are not allowed")
    lines = None
    if address is not None:
        lines = "\n".join(part.strip() for part in address.split(";") if part.strip())
    try:
        login = who or getpass.getuser()
    except (KeyError, OSError):
        login = "cli"
    with ledger_session("customer set") as session:
        set_customer(
            session, account, name=name.strip(), address=lines, email=email, tax_id=tax_id,
            who=login, now=datetime.now(UTC),
        )  # fmt: skip
    click.echo(printable(f"{account}: customer details set"))
