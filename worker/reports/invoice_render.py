"""An invoice as a customer receives it: a self-contained HTML page (no script, nothing fetched),
JSON for machines, and PDF printed from the HTML by headless Chromium.

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
from pathlib import Path

from worker.reports.invoice_model import InvoiceDocument, Line, Party, rate_text, usd
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


def _line(line: Line) -> str:
    price = ""
    if line.unit_price is not None:
        per = "request" if line.unit == "requests" else "1M tokens"
        price = f"${rate_text(line.unit_price)} / {per}"
    return (
        f'<tr data-kind="{_e(line.kind)}">'
        f"<td>{_e(line.description)}</td>"
        f'<td class="n" data-quantity="{line.quantity}">{line.quantity:,} {_e(_unit(line.quantity, line.unit))}</td>'
        f'<td class="n">{_e(price)}</td>'
        f'<td class="n" data-micros="{int(line.amount)}">{_money(line.amount)}</td></tr>'
    )


def render_invoice_html(doc: InvoiceDocument) -> str:
    last_day = doc.end.date().fromordinal(doc.end.date().toordinal() - 1)
    lines = "".join(_line(line) for line in doc.lines) or (
        '<tr><td colspan="4">No usage in this period.</td></tr>'
    )
    totals = (
        ("total", "Total", doc.total),
        ("credits", "Prepaid credits applied", -doc.credits_applied),
        ("due", "Amount due", doc.amount_due),
    )
    total_rows = "".join(
        f'<tr class="{key}"><td>{label}</td>'
        f'<td class="n" data-total="{key}" data-micros="{int(amount)}">{_money(amount)}</td></tr>'
        for key, label, amount in totals
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>Invoice {_e(doc.number)}</title>
<style>{STYLE}</style></head>
<body>
<div class="head">
<div><h1>Invoice</h1>
<table class="meta">
<tr><td>Invoice number</td><td data-invoice="number">{_e(doc.number)}</td></tr>
<tr><td>Issue date</td><td data-invoice="issued">{doc.issued_at.date().isoformat()}</td></tr>
<tr><td>Period</td><td data-invoice="period">{doc.start.date().isoformat()} to \
{last_day.isoformat()} (UTC)</td></tr>
<tr><td>Account</td><td data-invoice="account">{_e(doc.account_id)}</td></tr>
</table></div>
</div>
<div class="head">{_party("From", doc.issuer, "issuer")}{_party("Bill to", doc.customer, "customer")}</div>
<table class="lines">
<thead><tr><th>Description</th><th class="n">Quantity</th><th class="n">Unit price</th>\
<th class="n">Amount (USD)</th></tr></thead>
<tbody>{lines}</tbody>
</table>
<table class="totals">{total_rows}</table>
</body></html>
"""


def invoice_dict(doc: InvoiceDocument) -> dict[str, object]:
    def party(p: Party) -> dict[str, object]:
        return {"name": p.name, "address": list(p.address), "email": p.email, "tax_id": p.tax_id}

    return {
        "number": doc.number,
        "account": doc.account_id,
        "month": doc.month,
        "period": {"start": doc.start.isoformat(), "end": doc.end.isoformat()},
        "issued_at": doc.issued_at.isoformat(),
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
                "unit_price_usd": None if line.unit_price is None else rate_text(line.unit_price),
                "amount_micros": int(line.amount),
                "amount_usd": usd(line.amount),
            }
            for line in doc.lines
        ],
        "total_micros": int(doc.total),
        "credits_applied_micros": int(doc.credits_applied),
        "amount_due_micros": int(doc.amount_due),
        "total_usd": usd(doc.total),
        "credits_applied_usd": usd(doc.credits_applied),
        "amount_due_usd": usd(doc.amount_due),
    }


def render_invoice_json(doc: InvoiceDocument) -> str:
    return json.dumps(invoice_dict(doc), indent=2) + "\n"


def print_pdf(page_html: str, out: Path) -> None:
    """Print ``page_html`` to ``out`` with headless Chromium (Debian's ``chromium``). A missing
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
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(target, out)
