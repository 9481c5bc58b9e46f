"""An invoice as a customer receives it: a self-contained HTML page (no script, nothing fetched),
JSON for machines, and PDF printed from the HTML by headless Chromium. A finalized document is
rendered once, when it is finalized, and stored (``invoice_store``); these functions never run on
it again.

Every text from outside (names, addresses, model names) is HTML-escaped. Money is shown in USD with
two decimals, up to six where the micro-dollars need them (``invoice_model.usd``); each amount cell
carries its exact integer micro-USD in ``data-micros``, so a test (or a machine) reads the exact
figure the ledger holds.
"""

from __future__ import annotations

import html
import json
import shutil
import subprocess
import tempfile
from decimal import Decimal
from pathlib import Path

from worker.reports.invoice_model import (
    CREDIT_NOTE,
    INVOICE,
    REVERSE_CHARGE_NOTE,
    CreditEntry,
    InvoiceDocument,
    Line,
    Party,
    rate_text,
    usd,
)
from worker.reports.spec import ReportError

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--no-pdf-header-footer",
)  # fmt: skip
PDF_TIMEOUT_SECONDS = 60

STYLE = """
body { font-family: "DejaVu Sans", Arial, sans-serif; font-size: 10pt; color: #222; margin: 2em; }
h1 { font-size: 18pt; margin: 0 0 0.2em 0; }
.head { display: flex; justify-content: space-between; margin-bottom: 2em; }
.party { width: 45%; } .party h2 { font-size: 9pt; color: #666; text-transform: uppercase; }
table { border-collapse: collapse; width: 100%; }
th, td { padding: 4px 6px; border-bottom: 1px solid #ddd; text-align: left; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
.totals { margin-left: auto; width: 45%; margin-top: 1em; }
.totals td { border: none; } .totals tr.due td { font-weight: bold; border-top: 2px solid #222; }
.meta td { border: none; padding: 1px 6px 1px 0; }
h2.section { font-size: 9pt; color: #666; text-transform: uppercase; margin-top: 1.5em; }
.note { margin-top: 1.5em; font-style: italic; }
"""


def _money(amount: int) -> str:
    """``$12.50``, ``-$0.01``."""
    text = usd(amount)
    return f"-${text[1:]}" if text.startswith("-") else f"${text}"


def _unit(quantity: int, unit: str) -> str:
    return unit[:-1] if quantity == 1 and unit.endswith("s") else unit


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _party(title: str, party: Party, role: str) -> str:
    rows = [f'<div class="name" data-{role}="name">{_e(party.name)}</div>']
    rows += [f"<div>{_e(line)}</div>" for line in party.address]
    if party.email:
        rows.append(f'<div data-{role}="email">{_e(party.email)}</div>')
    if party.tax_id:
        rows.append(f'<div data-{role}="tax-id">Tax ID: {_e(party.tax_id)}</div>')
    return f'<div class="party"><h2>{_e(title)}</h2>{"".join(rows)}</div>'


PRICE_UNIT = {"tokens": " / 1M tokens", "requests": " / request", "calls": " / call", "items": ""}
TITLE = {INVOICE: "Invoice", CREDIT_NOTE: "Credit note"}


def _line(line: Line) -> str:
    price = f"{_money_rate(line.unit_price)}{PRICE_UNIT[line.unit]}"
    return (
        f'<tr data-kind="{_e(line.kind)}">'
        f"<td>{_e(line.description)}</td>"
        f'<td class="n" data-quantity="{line.quantity}">{line.quantity:,} {_e(_unit(line.quantity, line.unit))}</td>'
        f'<td class="n" data-unit-price="{rate_text(line.unit_price)}">{_e(price)}</td>'
        f'<td class="n" data-micros="{int(line.amount)}">{_money(line.amount)}</td></tr>'
    )


def _money_rate(rate: Decimal) -> str:
    text = rate_text(rate)
    return f"-${text[1:]}" if text.startswith("-") else f"${text}"


def _credit(entry: CreditEntry) -> str:
    when = "" if entry.at is None else entry.at.date().isoformat()
    what = entry.note if entry.kind == "balance" else f"{entry.kind} {entry.key}: {entry.note}"
    return (
        f'<tr data-credit="{_e(entry.kind)}"><td>{when}</td><td>{_e(what)}</td>'
        f'<td class="n" data-micros="{int(entry.amount)}">{_money(entry.amount)}</td></tr>'
    )


def _tax_label(doc: InvoiceDocument) -> str:
    terms = doc.tax_terms
    if terms.reverse_charge:
        return "Tax (reverse charge)"
    return "Tax" if terms.rate is None else f"Tax ({rate_text(terms.rate)}%)"


def render_invoice_html(doc: InvoiceDocument) -> str:
    last_day = doc.end.date().fromordinal(doc.end.date().toordinal() - 1)
    title = "Draft invoice" if doc.draft else TITLE[doc.kind]
    lines = "".join(_line(line) for line in doc.lines) or (
        '<tr><td colspan="4">No charges in this period.</td></tr>'
    )
    totals = (
        ("subtotal", "Subtotal", doc.subtotal),
        ("tax", _tax_label(doc), doc.tax),
        ("credits", "Prepaid credits applied", -doc.credits_applied),
        ("due", "Total due" if doc.kind == INVOICE else "Change to the amount due", doc.total),
    )
    total_rows = "".join(
        f'<tr class="{key}"><td>{_e(label)}</td>'
        f'<td class="n" data-total="{key}" data-micros="{int(amount)}">{_money(amount)}</td></tr>'
        for key, label, amount in totals
    )
    meta = [
        ("number", f"{title} number", doc.number),
        ("issued", "Issue date", doc.issued_at.date().isoformat()),
    ]
    if doc.due_date is not None:
        meta.append(("due", "Due date", doc.due_date.isoformat()))
    if doc.corrects is not None:
        meta.append(("corrects", "Corrects invoice", doc.corrects))
    meta += [
        ("period", "Period", f"{doc.start.date().isoformat()} to {last_day.isoformat()} (UTC)"),
        ("account", "Account", doc.account_id),
    ]
    meta_rows = "".join(
        f'<tr><td>{_e(label)}</td><td data-invoice="{key}">{_e(value)}</td></tr>'
        for key, label, value in meta
    )
    credits = "".join(_credit(entry) for entry in doc.credits)
    credit_table = (
        f'<h2 class="section">Prepaid credits</h2><table class="credits"><tbody>{credits}</tbody>'
        f'<tfoot><tr><td></td><td>Prepaid funds</td><td class="n" data-total="prepaid" '
        f'data-micros="{int(doc.prepaid)}">{_money(doc.prepaid)}</td></tr></tfoot></table>'
        if credits
        else ""
    )
    note = (
        f'<p class="note" data-invoice="reverse-charge">{_e(REVERSE_CHARGE_NOTE)}</p>'
        if doc.tax_terms.reverse_charge
        else ""
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{_e(title)} {_e(doc.number)}</title>
<style>{STYLE}</style></head>
<body>
<div class="head">
<div><h1>{_e(title)}</h1>
<table class="meta">{meta_rows}</table></div>
</div>
<div class="head">{_party("From", doc.issuer, "issuer")}{_party("Bill to", doc.customer, "customer")}</div>
<table class="lines">
<thead><tr><th>Description</th><th class="n">Quantity</th><th class="n">Unit price</th>\
<th class="n">Amount (USD)</th></tr></thead>
<tbody>{lines}</tbody>
</table>
{credit_table}
<table class="totals">{total_rows}</table>
{note}
</body></html>
"""


def invoice_dict(doc: InvoiceDocument) -> dict[str, object]:
    def party(p: Party) -> dict[str, object]:
        return {"name": p.name, "address": list(p.address), "email": p.email, "tax_id": p.tax_id}

    terms = doc.tax_terms
    return {
        "kind": doc.kind,
        "number": doc.number,
        "draft": doc.draft,
        "corrects": doc.corrects,
        "account": doc.account_id,
        "month": doc.month,
        "period": {"start": doc.start.isoformat(), "end": doc.end.isoformat()},
        "issued_at": doc.issued_at.isoformat(),
        "due_date": None if doc.due_date is None else doc.due_date.isoformat(),
        "issuer": party(doc.issuer),
        "customer": party(doc.customer),
        "currency": "USD",
        "lines": [
            {
                "model": line.model,
                "kind": line.kind,
                "description": line.description,
                "quantity": line.quantity,
                "unit": line.unit,
                "unit_price_usd": rate_text(line.unit_price),
                "amount_micros": int(line.amount),
                "amount_usd": usd(line.amount),
            }
            for line in doc.lines
        ],
        "tax": {
            "rate_percent": None if terms.rate is None else rate_text(terms.rate),
            "reverse_charge": terms.reverse_charge,
            "note": REVERSE_CHARGE_NOTE if terms.reverse_charge else None,
        },
        "credits": [
            {
                "kind": entry.kind,
                "at": None if entry.at is None else entry.at.isoformat(),
                "key": entry.key,
                "note": entry.note,
                "amount_micros": int(entry.amount),
                "amount_usd": usd(entry.amount),
            }
            for entry in doc.credits
        ],
        "subtotal_micros": int(doc.subtotal),
        "tax_micros": int(doc.tax),
        "prepaid_micros": int(doc.prepaid),
        "credits_applied_micros": int(doc.credits_applied),
        "total_micros": int(doc.total),
        "subtotal_usd": usd(doc.subtotal),
        "tax_usd": usd(doc.tax),
        "credits_applied_usd": usd(doc.credits_applied),
        "total_usd": usd(doc.total),
    }


def render_invoice_json(doc: InvoiceDocument) -> str:
    return json.dumps(invoice_dict(doc), indent=2) + "\n"


def print_pdf(page_html: str) -> bytes:
    """``page_html`` printed to PDF with headless Chromium (Debian's ``chromium``). A missing
    browser or a failed print is a ``ReportError`` naming it."""
    binary = shutil.which("chromium")
    if binary is None:
        raise ReportError(
            "--format pdf prints with headless Chromium and `chromium` is not on PATH "
            "(apt-get install chromium), or use --format html"
        )
    with tempfile.TemporaryDirectory(prefix="billing-invoice-") as work:
        page = Path(work) / "invoice.html"
        page.write_text(page_html, encoding="utf-8")
        target = Path(work) / "invoice.pdf"
        try:
            done = subprocess.run(
                [binary, *CHROMIUM_FLAGS, f"--user-data-dir={Path(work) / 'profile'}",
                 f"--print-to-pdf={target}", page.as_uri()],
                capture_output=True, text=True, timeout=PDF_TIMEOUT_SECONDS, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise ReportError(
                f"chromium did not print the PDF in {PDF_TIMEOUT_SECONDS} s"
            ) from None
        if done.returncode != 0 or not target.is_file():
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise ReportError(f"chromium could not print the PDF: {tail}")
        return target.read_bytes()
