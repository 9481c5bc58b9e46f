"""A customer invoice (or credit note): one model every renderer reads, and the pure rules that
build it.

An invoice covers one closed UTC month of one account. Its **charge lines** state what the ledger
charged the account in the month (revenue posted between the month's start and end, as ``billing
statement`` counts it), and their sum, the **subtotal**, is that figure to the micro-dollar:

* ``usage`` lines, one per (model, kind of token, unit price): quantity the tokens of that kind (the
  parts ``Price.charge`` multiplies: cached input, cache writes, audio and images apart from plain
  input, reasoning and audio apart from plain output; web search requests), unit price the rate the
  calls were charged at (``usage_records.unit_prices``: USD per 1M tokens, USD per request);
* ``estimate`` lines, per model and amount: unsettled calls resolved by charging their estimate
  (quantity: calls, unit price: the estimate per call);
* ``adjustment`` lines, per model and amount: usage that arrived after such a resolution, charged
  (or refunded) as the difference from the estimate (quantity: calls);
* ``unrecorded`` lines: calls charged before their rates were recorded (quantity 1, their charge);
* one ``rounding`` line: each call is charged to the micro-dollar once (rounded half-up), so the
  calls' charges differ from quantity x unit price summed per line by a few micro-dollars; this
  line states the difference, so the subtotal is exactly what the ledger charged.

**Every line's amount is its quantity x unit price**, rounded half-up to the micro-dollar once
(``line_amount``; exact for calls and the rounding line). **Tax** is the subtotal x the customer's
tax rate (percent, rounded half-up once), or 0 with a reverse-charge note. **Credits**: the balance
brought forward (funds at the month's start less what was charged before it) and each credit and
reversal of the month are listed; their sum, the prepaid funds, is applied up to subtotal + tax
(never below 0). **Total** = subtotal + tax - credits applied: the amount due.

A **credit note** corrects a finalized invoice: money posted later for its period (a back-dated
credit or reversal, a charge written into it) as lines, and the change it makes to each figure of
the invoice (``correction``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from decimal import ROUND_HALF_UP, Decimal, localcontext

from worker.core.errors import BillingError
from worker.core.money import Micros

# The kinds of token an invoice line names, in the order lines are listed, with their label.
KIND_LABELS: tuple[tuple[str, str], ...] = (
    ("input", "input tokens"),
    ("cached_input", "cached input tokens"),
    ("cache_write", "cache write tokens"),
    ("cache_write_1h", "cache write tokens (1 hour)"),
    ("audio_input", "audio input tokens"),
    ("image_input", "image input tokens"),
    ("citation", "citation tokens"),
    ("output", "output tokens"),
    ("reasoning", "reasoning tokens"),
    ("audio_output", "audio output tokens"),
    ("image_output", "image output tokens"),
    ("web_search", "web search requests"),
    ("per_image", "images"),
)
KINDS = tuple(kind for kind, _ in KIND_LABELS)
# The kinds priced per unit rather than per 1M tokens (their rate is USD per request or image).
_UNITS = {"web_search": "requests", "per_image": "items"}
LABEL = dict(KIND_LABELS)
# Line kinds after the token kinds, in listing order.
OTHER_KINDS = ("unrecorded", "estimate", "adjustment", "correction", "rounding")
# The usage record columns an invoice sums, per group of calls.
TOKEN_COLUMNS = (
    "prompt_tokens", "cached_tokens", "cache_write_tokens", "cache_write_1h_tokens",
    "audio_prompt_tokens", "image_prompt_tokens", "completion_tokens", "reasoning_tokens",
    "audio_completion_tokens", "web_search_requests", "citation_tokens",
    "image_completion_tokens", "images",
)  # fmt: skip
# Micro-USD per unit of quantity for a unit price of 1: tokens are priced per 1M tokens (USD per 1M
# tokens = micro-USD per token), everything else in USD per unit.
SCALE = {"tokens": Decimal(1), "requests": Decimal(1_000_000), "calls": Decimal(1_000_000),
         "items": Decimal(1_000_000)}  # fmt: skip
MICRO = Decimal("0.000001")
INVOICE, CREDIT_NOTE = "invoice", "credit_note"


class InvoiceError(BillingError):
    """An invoice that would not state the ledger's figures (lines that do not add up to what it
    charged, an amount that is not quantity x unit price, tokens with no rate): refused, never
    printed. A bug, reported in one line."""


def quantities(sums: Mapping[str, int]) -> dict[str, int]:
    """The count of each kind of token in summed usage columns: the parts ``Price.charge`` prices
    (a sum of calls' parts is the parts of their sum: each part is linear in the columns)."""
    prompt_parts = (
        sums["cached_tokens"] + sums["cache_write_tokens"] + sums["audio_prompt_tokens"]
        + sums["image_prompt_tokens"] + sums["citation_tokens"]
    )  # fmt: skip
    return {
        "input": sums["prompt_tokens"] - prompt_parts,
        "cached_input": sums["cached_tokens"],
        "cache_write": sums["cache_write_tokens"] - sums["cache_write_1h_tokens"],
        "cache_write_1h": sums["cache_write_1h_tokens"],
        "audio_input": sums["audio_prompt_tokens"],
        "image_input": sums["image_prompt_tokens"],
        "citation": sums["citation_tokens"],
        "output": sums["completion_tokens"]
        - sums["reasoning_tokens"]
        - sums["audio_completion_tokens"]
        - sums["image_completion_tokens"],
        "reasoning": sums["reasoning_tokens"],
        "audio_output": sums["audio_completion_tokens"],
        "image_output": sums["image_completion_tokens"],
        "web_search": sums["web_search_requests"],
        "per_image": sums["images"],
    }


def rates_of(unit_prices: str) -> dict[str, Decimal]:
    """The rates a call was charged at, by kind, from its ``usage_records.unit_prices`` JSON."""
    data = json.loads(unit_prices)
    return {kind: Decimal(str(data[kind])) for kind in KINDS if data.get(kind) is not None}


@dataclass(frozen=True, slots=True)
class Line:
    model: str  # "" for a line of the whole invoice (rounding, correction)
    kind: str  # a ``KINDS`` or ``OTHER_KINDS`` entry
    description: str
    quantity: int
    unit: str  # tokens | requests | calls | items
    unit_price: Decimal  # USD per 1M tokens (tokens); USD per request, call or item
    amount: Micros  # ``line_amount(quantity, unit, unit_price)``


@dataclass(frozen=True, slots=True)
class UsageGroup:
    """Calls of one model charged at one set of rates: their summed usage and their charge."""

    model: str
    unit_prices: str | None  # the JSON the calls were charged at; None: not recorded
    calls: int
    sums: Mapping[str, int]  # ``TOKEN_COLUMNS``
    charged: int


def line_amount(quantity: int, unit: str, unit_price: Decimal) -> Micros:
    """Quantity x unit price in micro-USD, rounded half-up (away from zero) once."""
    with localcontext() as ctx:
        ctx.prec = 60
        exact = Decimal(quantity) * unit_price * SCALE[unit]
        return Micros(int(exact.quantize(Decimal(1), rounding=ROUND_HALF_UP)))


def usd_each(micros: int) -> Decimal:
    """An amount in micro-USD as a unit price in USD (exact: six decimals)."""
    return (Decimal(micros) * MICRO).quantize(MICRO)


@dataclass(frozen=True, slots=True)
class Item:
    """What a line states before its amount: a quantity of something at a unit price."""

    model: str
    kind: str  # a ``KINDS`` entry or an ``OTHER_KINDS`` entry
    description: str
    unit: str  # tokens | requests | calls | items
    unit_price: Decimal


def usage_items(group: UsageGroup) -> list[tuple[Item, int]]:
    """The group's tokens by kind at the rates they were charged at (module docstring); calls
    with no recorded rates as one ``unrecorded`` item of their charge."""
    if group.unit_prices is None:
        return [
            (Item(group.model, "unrecorded", f"{group.model}: {group.calls} calls charged before "
                  "rates were recorded", "items", usd_each(group.charged)), 1),
        ]  # fmt: skip
    rates = rates_of(group.unit_prices)
    counts = quantities(group.sums)
    missing = [kind for kind in KINDS if counts[kind] != 0 and kind not in rates]
    if missing:
        raise InvoiceError(
            f"{group.model}: {missing[0]} tokens with no rate in {group.unit_prices}"
        )
    return [
        (Item(group.model, kind, f"{group.model}: {LABEL[kind]}",
              _UNITS.get(kind, "tokens"), rates[kind]), counts[kind])
        for kind in KINDS
        if counts[kind] != 0
    ]  # fmt: skip


def per_call_items(model: str, kind: str, amounts: Mapping[int, int]) -> list[tuple[Item, int]]:
    """``estimate`` or ``adjustment`` items of one model: calls by the amount each was charged."""
    what = {
        "estimate": "unsettled calls charged at their estimate",
        "adjustment": "usage reported after an estimate was charged",
    }[kind]
    return [
        (Item(model, kind, f"{model}: {what}", "calls", usd_each(amount)), calls)
        for amount, calls in amounts.items()
        if amount != 0 and calls
    ]


def charge_lines(items: Iterable[tuple[Item, int]], charged: int) -> list[Line]:
    """Items of one (model, kind, unit price) as one line each, ordered by model then kind, each
    amount quantity x unit price; then a ``rounding`` line for what ``charged`` (the calls'
    charges, each rounded once) differs from their sum, when it does."""
    merged: dict[Item, int] = {}
    for item, quantity in items:
        merged[item] = merged.get(item, 0) + quantity
    order = {kind: i for i, kind in enumerate((*KINDS, *OTHER_KINDS))}
    lines = [
        Line(item.model, item.kind, item.description, quantity, item.unit, item.unit_price,
             line_amount(quantity, item.unit, item.unit_price))
        for item, quantity in sorted(
            merged.items(), key=lambda x: (x[0].model, order[x[0].kind], x[0].unit_price)
        )
        if quantity != 0
    ]  # fmt: skip
    rest = charged - sum(int(line.amount) for line in lines)
    if rest:
        lines.append(rounding_line(rest))
    return lines


def rounding_line(amount: int) -> Line:
    return Line("", "rounding", "Rounding: each call is charged to the micro-dollar once",
                1, "items", usd_each(amount), Micros(amount))  # fmt: skip


@dataclass(frozen=True, slots=True)
class Party:
    """Who issues or receives an invoice."""

    name: str
    address: tuple[str, ...] = ()
    email: str | None = None
    tax_id: str | None = None


@dataclass(frozen=True, slots=True)
class TaxTerms:
    """A customer's tax: a rate in percent, or reverse charge (no tax; the customer accounts for
    it), or neither (no tax line)."""

    rate: Decimal | None = None
    reverse_charge: bool = False

    def tax_on(self, subtotal: int) -> Micros:
        if self.rate is None or self.reverse_charge:
            return Micros(0)
        with localcontext() as ctx:
            ctx.prec = 60
            exact = Decimal(subtotal) * self.rate / 100
            return Micros(int(exact.quantize(Decimal(1), rounding=ROUND_HALF_UP)))


REVERSE_CHARGE_NOTE = "Reverse charge: no tax charged; the customer accounts for the tax due."


@dataclass(frozen=True, slots=True)
class CreditEntry:
    """Prepaid funds an invoice lists: the balance brought forward, a credit, a reversal."""

    kind: str  # balance | credit | reversal
    at: datetime | None  # None: the balance brought forward
    key: str  # the credit's idempotency key (a reversal's: the credit it reverses)
    note: str
    amount: Micros


def applied(prepaid: int, due_before: int) -> Micros:
    """Prepaid funds applied to an invoice: what there is, up to what is due, never below 0."""
    return Micros(max(0, min(due_before, prepaid)))


@dataclass(frozen=True, slots=True)
class InvoiceDocument:
    kind: str  # ``INVOICE`` | ``CREDIT_NOTE``
    number: str  # as printed; a draft's: "DRAFT"
    account_id: str
    month: str  # YYYY-MM
    start: datetime
    end: datetime  # exclusive
    issued_at: datetime
    due_date: date | None
    issuer: Party
    customer: Party
    lines: tuple[Line, ...]
    credits: tuple[CreditEntry, ...]
    tax_terms: TaxTerms
    subtotal: Micros
    tax: Micros
    credits_applied: Micros
    corrects: str | None = None  # a credit note: the number of the invoice it corrects
    draft: bool = False

    def __post_init__(self) -> None:
        for line in self.lines:
            if line.amount != line_amount(line.quantity, line.unit, line.unit_price):
                raise InvoiceError(
                    f"invoice {self.number}: {line.description}: {int(line.amount)} micro-USD is "
                    f"not {line.quantity} x {line.unit_price}"
                )
        summed = sum(int(line.amount) for line in self.lines)
        if summed != self.subtotal:
            raise InvoiceError(
                f"invoice {self.number}: lines add up to {summed} micro-USD, the ledger charged "
                f"{int(self.subtotal)}"
            )

    @property
    def prepaid(self) -> Micros:
        return Micros(sum(int(c.amount) for c in self.credits))

    @property
    def total(self) -> Micros:
        """Subtotal + tax - credits applied: the amount due (a credit note: its change)."""
        return self.subtotal + self.tax - self.credits_applied


def build_invoice(
    *,
    lines: Iterable[Line],
    credits: Iterable[CreditEntry],
    tax_terms: TaxTerms,
    subtotal: Micros,
    **head: object,
) -> InvoiceDocument:
    """An invoice's figures from its lines and credits: tax on the subtotal, prepaid funds applied
    up to subtotal + tax."""
    credits = tuple(credits)
    tax = tax_terms.tax_on(int(subtotal))
    prepaid = sum(int(c.amount) for c in credits)
    return InvoiceDocument(
        kind=INVOICE, lines=tuple(lines), credits=credits, tax_terms=tax_terms, subtotal=subtotal,
        tax=tax, credits_applied=applied(prepaid, int(subtotal) + int(tax)), **head,  # type: ignore[arg-type]
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Stated:
    """What an invoice and its credit notes have stated so far, from their stored JSON."""

    subtotal: int
    tax: int
    credits_applied: int
    total: int
    balance: int  # the balance brought forward
    credit_keys: frozenset[tuple[str, str]]  # (kind, key) of every credit and reversal listed

    @classmethod
    def of(cls, documents: Iterable[str]) -> Stated:
        subtotal = tax = credits_applied = total = balance = 0
        keys: set[tuple[str, str]] = set()
        for text in documents:
            data = json.loads(text)
            subtotal += data["subtotal_micros"]
            tax += data["tax_micros"]
            credits_applied += data["credits_applied_micros"]
            total += data["total_micros"]
            for entry in data["credits"]:
                if entry["kind"] == "balance":
                    balance += entry["amount_micros"]
                else:
                    keys.add((entry["kind"], entry["key"]))
        return cls(subtotal, tax, credits_applied, total, balance, frozenset(keys))


def correction(
    stated: Stated, now: InvoiceDocument, invoice_number: str, **head: object
) -> InvoiceDocument | None:
    """The credit note that brings an invoice (with its notes: ``stated``) to what the ledger says
    ``now`` (the invoice as it would be finalized now, under the stated tax terms): a line for
    charges posted into the period since, the credits and reversals not listed yet, and each
    figure's change. None when nothing changed."""
    extra = int(now.subtotal) - stated.subtotal
    lines = []
    if extra:
        lines.append(
            Line("", "correction", f"Charges for {now.month} posted after {invoice_number} was "
                 "issued", 1, "items", usd_each(extra), Micros(extra))
        )  # fmt: skip
    credits = [
        c for c in now.credits if c.kind != "balance" and (c.kind, c.key) not in stated.credit_keys
    ]
    opening = sum(int(c.amount) for c in now.credits if c.kind == "balance")
    if opening != stated.balance:
        credits.insert(
            0, CreditEntry("balance", None, "", "Change in the balance brought forward",
                           Micros(opening - stated.balance)),
        )  # fmt: skip
    tax = int(now.tax) - stated.tax
    credits_applied = int(now.credits_applied) - stated.credits_applied
    if not lines and not credits and not tax and not credits_applied:
        return None
    return InvoiceDocument(
        kind=CREDIT_NOTE, lines=tuple(lines), credits=tuple(credits), tax_terms=now.tax_terms,
        subtotal=Micros(extra), tax=Micros(tax), credits_applied=Micros(credits_applied),
        corrects=invoice_number, **head,  # type: ignore[arg-type]
    )  # fmt: skip


def usd(amount: int) -> str:
    """USD as an invoice shows it: two decimals, up to six when the micro-dollars need them
    (``12.50``, ``0.000041``); a minus sign in front of a refund."""
    text = Micros(amount).usd()
    whole, frac = text.split(".")
    frac = frac.rstrip("0")
    return f"{whole}.{frac.ljust(2, '0')}"


def rate_text(rate: Decimal) -> str:
    """A unit price (or tax rate) as stated, without trailing zeros."""
    text = format(rate.normalize(), "f")
    return text
