"""``billing invoice ACCOUNT --month YYYY-MM``: the customer's invoice for a closed month;
``billing invoices list|show|mark``: finalized invoices and credit notes and their status; and
``billing customer set``: the customer details and tax terms a document prints
(``worker.reports.invoice_store``, ``invoice_query``).

An invoice is finalized (numbered, stored) the first time it is issued; issuing it again prints the
stored document byte for byte. Bad input (an ``--out`` that cannot be written among it, refused
before anything is read or written), an account the ledger has never seen and database errors print
one line and exit 2. Heavy modules (SQLAlchemy, the reports) are imported inside the commands.
"""

from __future__ import annotations

import getpass
import os
import re
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import click

from worker.cli import main
from worker.cli.db import fail, settings, write_output
from worker.core.terminal import printable

FORMATS = ("html", "pdf", "json")


def check_out(command: str, out: Path | None) -> None:
    """Refuse, before anything is read or written, an ``--out`` that cannot be written: a folder,
    or a path under a file (nothing is created either way)."""
    if out is None:
        return
    if out.is_dir():
        fail(command, f"--out {out}: is a folder")
    parent = out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        fail(command, f"--out {out}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK):
        fail(command, f"--out {out}: {parent} is not writable")


def _write_bytes(command: str, data: bytes, out: Path, written: str) -> None:
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
    except OSError as exc:
        fail(command, f"cannot write {out}: {exc.strerror}")
    click.echo(f"{written} written to {out}", err=True)


def _numbering(command: str) -> tuple[Any, Any]:
    from worker.core.errors import BillingError
    from worker.reports.invoice_model import Party
    from worker.reports.invoice_store import Numbering, check_prefix

    config = settings(command)
    if config.invoice_issuer_name is None:
        fail(command, "BILLING_INVOICE_ISSUER_NAME is not set: an invoice names its issuer")
    try:
        check_prefix(config.invoice_prefix, "BILLING_INVOICE_PREFIX")
        check_prefix(config.credit_note_prefix, "BILLING_CREDIT_NOTE_PREFIX")
    except BillingError as exc:
        fail(command, str(exc))
    if config.invoice_prefix == config.credit_note_prefix:
        fail(command, "BILLING_CREDIT_NOTE_PREFIX must differ from BILLING_INVOICE_PREFIX")
    address = tuple(
        part.strip() for part in (config.invoice_issuer_address or "").split(";") if part.strip()
    )
    issuer = Party(
        config.invoice_issuer_name, address, config.invoice_issuer_email,
        config.invoice_issuer_tax_id,
    )  # fmt: skip
    return issuer, Numbering(config.invoice_prefix, config.credit_note_prefix,
                             config.invoice_due_days)  # fmt: skip


def _queue_finalized(*args: Any, **kwargs: Any) -> Any:
    """``worker.alerts.invoices.queue_finalized``, imported when a document is finalized: the
    re-issue of a stored invoice (a read) does not load the alerts' outbox."""
    from worker.alerts.invoices import queue_finalized

    return queue_finalized(*args, **kwargs)


@main.command("invoice")
@click.argument("account")
@click.option("--month", required=True, help="YYYY-MM (UTC), a month that is over.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="html", show_default=True)
@click.option("--out", type=click.Path(path_type=Path), help="Write to FILE.")
@click.option("--draft", is_flag=True, help="Preview, unnumbered: nothing finalized or stored.")
@click.option("--allow-empty", is_flag=True, help="Finalize a month with nothing charged ($0).")
def invoice_command(
    account: str, month: str, fmt: str, out: Path | None, draft: bool, allow_empty: bool
) -> None:
    """The customer's invoice for a closed month: finalized (numbered and stored) the first time,
    the stored document byte for byte afterwards; money posted into the month since goes on a
    credit note, finalized then."""
    from sqlalchemy.exc import SQLAlchemyError

    from worker.cli.db import check_sqlite_file, database_error
    from worker.core.errors import BillingError
    from worker.ledger.database import make_engine, session_factory
    from worker.reports import connect_args
    from worker.reports.invoice_render import (
        print_pdf,
        render_invoice_html,
        render_invoice_json,
    )
    from worker.reports.invoice_store import Issued, pdf_of, run_invoice

    if fmt == "pdf" and out is None:
        fail("invoice", "--format pdf needs --out FILE")
    check_out("invoice", out)
    issuer, numbering = _numbering("invoice")
    config = settings("invoice")
    try:
        check_sqlite_file(config.database_url)
        found = run_invoice(
            config.database_url, account, month, issuer=issuer, numbering=numbering,
            now=datetime.now(UTC), draft=draft, allow_empty=allow_empty,
            on_finalized=_queue_finalized,
        )  # fmt: skip
        if not isinstance(found, Issued):
            doc = found
            if fmt == "pdf":
                assert out is not None  # refused above
                _write_bytes("invoice", print_pdf(render_invoice_html(doc)), out, "draft invoice")
                return
            text = render_invoice_html(doc) if fmt == "html" else render_invoice_json(doc)
            write_output("invoice", text, out, "draft invoice")
            return
        stored = found.invoice
        if found.credit_note is not None:
            note = found.credit_note
            click.echo(
                printable(f"credit note {note.number} finalized for money posted into {note.month} "
                          f"since {stored.number} (`billing invoices show {note.number}`)"),
                err=True,
            )  # fmt: skip
        if fmt == "pdf":
            assert out is not None  # refused above
            engine = make_engine(config.database_url, **connect_args(config.database_url))
            try:
                data = pdf_of(session_factory(engine), stored, print_pdf)
            finally:
                engine.dispose()
            _write_bytes("invoice", data, out, f"invoice {stored.number}")
            return
    except SQLAlchemyError as exc:
        fail("invoice", database_error(exc))
    except BillingError as exc:
        fail("invoice", str(exc))
    text = stored.html if fmt == "html" else stored.document
    write_output("invoice", text, out, f"invoice {stored.number}")


@main.group("invoices")
def invoices_group() -> None:
    """Finalized invoices and credit notes: list, show, and set their status."""


@invoices_group.command("list")
@click.argument("account", required=False)
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
def invoices_list_command(account: str | None, as_json: bool) -> None:
    """Every finalized document (of ACCOUNT), oldest first, with its status."""
    from worker.cli.db import echo_json, ledger_session
    from worker.reports.invoice_model import usd
    from worker.reports.invoice_store import listed

    with ledger_session("invoices list", readonly=True) as session:
        rows = listed(session, account)
    data = [
        {"number": r.number, "kind": r.kind, "account": r.account_id, "month": r.month,
         "issued_at": r.issued_at.isoformat(),
         "due_at": None if r.due_at is None else r.due_at.isoformat(),
         "total_micros": r.total, "status": r.status}
        for r in rows
    ]  # fmt: skip
    if as_json:
        echo_json(data)
        return
    for r in rows:
        due = "" if r.due_at is None else r.due_at.date().isoformat()
        click.echo(printable(
            f"{r.number:<14} {r.kind:<11} {r.account_id:<20} {r.month} "
            f"{r.issued_at.date().isoformat()} {due:<10} {usd(r.total):>14} {r.status}"
        ))  # fmt: skip


@invoices_group.command("show")
@click.argument("number")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="html", show_default=True)
@click.option("--out", type=click.Path(path_type=Path), help="Write to FILE.")
def invoices_show_command(number: str, fmt: str, out: Path | None) -> None:
    """A finalized invoice or credit note (INV-000042, CN-000001) as stored."""
    from sqlalchemy.exc import SQLAlchemyError

    from worker.cli.db import database_error, ledger_session
    from worker.core.errors import BillingError
    from worker.ledger.database import make_engine, session_factory
    from worker.reports.invoice_render import print_pdf
    from worker.reports.invoice_store import find, pdf_of

    if fmt == "pdf" and out is None:
        fail("invoices show", "--format pdf needs --out FILE")
    check_out("invoices show", out)
    with ledger_session("invoices show", readonly=True) as session:
        stored = find(session, number)
    if fmt == "pdf":
        assert out is not None
        url = settings("invoices show").database_url
        engine = make_engine(url)
        try:
            data = pdf_of(session_factory(engine), stored, print_pdf)
        except SQLAlchemyError as exc:
            fail("invoices show", database_error(exc))
        except BillingError as exc:
            fail("invoices show", str(exc))
        finally:
            engine.dispose()
        _write_bytes("invoices show", data, out, stored.number)
        return
    write_output("invoices show", stored.html if fmt == "html" else stored.document, out,
                 stored.number)  # fmt: skip


@invoices_group.command("mark")
@click.argument("number")
@click.argument("status", type=click.Choice(["paid", "overdue", "void"]))
@click.option("--note", required=True, help="Why (a payment reference, a reason to void).")
@click.option("--by", "who", default=None, help="Who sets it (default: the login name).")
def invoices_mark_command(number: str, status: str, note: str, who: str | None) -> None:
    """Set a finalized document's status: an invoice finalized -> paid | overdue | void, overdue
    -> paid | void; a credit note -> void. The stored document never changes; void keeps the
    number, and a voided month can be invoiced again under a new one."""
    from worker.cli.db import ledger_session
    from worker.reports.invoice_store import set_status

    if not note.strip() or len(note) > 10_000 or any(ord(c) < 32 for c in note):
        fail("invoices mark", "--note: 1 to 10,000 characters, not blank, no control characters")
    with ledger_session("invoices mark") as session:
        stored = set_status(session, number, status, who=_login(who), note=note,
                            now=datetime.now(UTC))  # fmt: skip
    click.echo(printable(f"{stored.number}: {stored.status}"))


def _login(who: str | None) -> str:
    try:
        return who or getpass.getuser()
    except (KeyError, OSError):
        return "cli"


@main.group("customer")
def customer_group() -> None:
    """Customer details printed on invoices (name, address, e-mail, tax id)."""


@customer_group.command("set")
@click.argument("account")
@click.option("--name", required=True, help="The customer's name as invoiced.")
@click.option("--address", help="Postal address, lines separated by ';'.")
@click.option("--email", help="Billing e-mail.")
@click.option("--tax-id", help="Tax id (VAT number).")
@click.option("--tax-rate", help="Tax rate in percent, a decimal (20, 8.875); unset: no tax line.")
@click.option("--reverse-charge", is_flag=True, help="No tax: the customer accounts for it.")
@click.option("--by", "who", default=None, help="Who sets them (default: the login name).")
def customer_set_command(
    account: str,
    name: str,
    address: str | None,
    email: str | None,
    tax_id: str | None,
    tax_rate: str | None,
    reverse_charge: bool,
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
    rate = None
    if tax_rate is not None:
        rate = parse_tax_rate(tax_rate)
    if reverse_charge and rate is not None:
        fail("customer set", "--reverse-charge and --tax-rate: one or the other")
    lines = None
    if address is not None:
        lines = "\n".join(part.strip() for part in address.split(";") if part.strip())
    from worker.reports.invoice_model import TaxTerms

    with ledger_session("customer set") as session:
        set_customer(
            session, account, name=name.strip(), address=lines, email=email, tax_id=tax_id,
            tax=TaxTerms(rate, reverse_charge), who=_login(who), now=datetime.now(UTC),
        )  # fmt: skip
    click.echo(printable(f"{account}: customer details set"))


def parse_tax_rate(text: str) -> Decimal:
    """A tax rate as typed: digits with an optional decimal point, at most 4 decimals, 0 to 100."""
    if not re.fullmatch(r"\d{1,3}(\.\d{1,4})?", text) or Decimal(text) > 100:
        fail("customer set", f"--tax-rate {text!r}: a percent from 0 to 100, at most 4 decimals")
    return Decimal(text)
