"""A customer invoice: one model every invoice renderer reads, and the pure rules that build its lines.

An invoice covers one closed UTC month of one account. Its total is what the ledger charged the
account in the month (revenue posted between the month's start and end, as ``billing statement``
counts it); its lines split that total, to the micro-dollar, by model and kind of token:

* ``usage`` lines, one per (model, kind of token, unit price): the calls charged from their usage.
  Quantity is the tokens of that kind (the parts ``Price.charge`` multiplies: cached input, cache
  writes, audio and images apart from plain input, reasoning and audio apart from plain output; web
  search requests), the unit price the rate the calls were charged at (``usage_records.unit_prices``,
  USD per 1M tokens; USD per request for searches). Each call is charged to the micro-dollar once
  (rounded half-up), so the calls' charge is split over their lines in proportion to quantity x unit
  price (``allocate``: largest remainder): a line's amount differs from quantity x unit price by less
  than one micro-dollar per call, and the lines add up to exactly what was charged.
* ``estimate`` lines, per model: unsettled calls resolved by charging their estimate (quantity:
  calls).
* ``adjustment`` lines, per model: usage that arrived after such a resolution, charged (or refunded)
  as the difference from the estimate (quantity: calls).

Credits applied are the prepaid funds the charges were taken from: the balance at the month's start
plus the month's credits, when positive, up to the total; the amount due is the rest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from fractions import Fraction

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
    ("web_search", "web search requests"),
)
KINDS = tuple(kind for kind, _ in KIND_LABELS)
LABEL = dict(KIND_LABELS)
# The usage record columns an invoice sums, per group of calls.
TOKEN_COLUMNS = (
    "prompt_tokens", "cached_tokens", "cache_write_tokens", "cache_write_1h_tokens",
    "audio_prompt_tokens", "image_prompt_tokens", "completion_tokens", "reasoning_tokens",
    "audio_completion_tokens", "web_search_requests", "citation_tokens",
)  # fmt: skip
PER_MILLION = Decimal(1)  # USD per 1M tokens = micro-USD per token
PER_REQUEST = Decimal(1_000_000)  # USD per request -> micro-USD per request


class InvoiceError(BillingError):
    """An invoice that would not state the ledger's figures (lines that do not add up to what it
    charged, tokens with no rate): refused, never printed. A bug, reported in one line."""


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
        - sums["audio_completion_tokens"],
        "reasoning": sums["reasoning_tokens"],
        "audio_output": sums["audio_completion_tokens"],
        "web_search": sums["web_search_requests"],
    }


def rates_of(unit_prices: str) -> dict[str, Decimal]:
    """The rates a call was charged at, by kind, from its ``usage_records.unit_prices`` JSON."""
    data = json.loads(unit_prices)
    return {kind: Decimal(str(data[kind])) for kind in KINDS if data.get(kind) is not None}


def allocate(total: int, weights: Sequence[Fraction | Decimal | int]) -> list[int]:
    """``total`` split into integers in proportion to ``weights`` (not negative, not all zero),
    summing to ``total`` exactly: each share rounded down, the rest one by one to the largest
    fractions (the first on a tie)."""
    exact = [Fraction(w) for w in weights]
    whole = sum(exact)
    if whole <= 0 or any(w < 0 for w in exact):
        raise InvoiceError(f"cannot split {total} over weights {list(weights)}")
    shares = [total * w / whole for w in exact]
    floors = [s.numerator // s.denominator for s in shares]
    rest = total - sum(floors)
    order = sorted(range(len(shares)), key=lambda i: (-(shares[i] - floors[i]), i))
    for i in order[:rest]:
        floors[i] += 1
    return floors


@dataclass(frozen=True, slots=True)
class Line:
    model: str
    kind: str  # a ``KINDS`` entry, ``estimate`` or ``adjustment``
    description: str
    quantity: int
    unit: str  # tokens | requests | calls
    unit_price: Decimal | None  # USD per 1M tokens, USD per request; None for calls
    amount: Micros


@dataclass(frozen=True, slots=True)
class UsageGroup:
    """Calls of one model charged at one set of rates: their summed usage and their charge."""

    model: str
    unit_prices: str | None  # the JSON the calls were charged at; None: not recorded
    calls: int
    sums: Mapping[str, int]  # ``TOKEN_COLUMNS``
    charged: int


def usage_lines(group: UsageGroup) -> list[Line]:
    """The group's lines: its charge split over its kinds of token (module docstring)."""
    if group.unit_prices is None:
        return [
            Line(group.model, "usage", f"{group.model}: calls (rates not recorded)",
                 group.calls, "calls", None, Micros(group.charged)),
        ]  # fmt: skip
    rates = rates_of(group.unit_prices)
    counts = quantities(group.sums)
    kinds = [kind for kind in KINDS if counts[kind] > 0 and kind in rates]
    missing = [kind for kind in KINDS if counts[kind] > 0 and kind not in rates]
    if missing:
        raise InvoiceError(
            f"{group.model}: {missing[0]} tokens with no rate in {group.unit_prices}"
        )
    weights = [
        counts[k] * rates[k] * (PER_REQUEST if k == "web_search" else PER_MILLION) for k in kinds
    ]
    if not kinds or not any(weights):
        if group.charged:
            raise InvoiceError(f"{group.model}: {group.charged} charged for usage priced at zero")
        amounts = [0] * len(kinds)
    else:
        amounts = allocate(group.charged, weights)
    return [
        Line(
            group.model,
            kind,
            f"{group.model}: {LABEL[kind]}",
            counts[kind],
            "requests" if kind == "web_search" else "tokens",
            rates[kind],
            Micros(amount),
        )
        for kind, amount in zip(kinds, amounts, strict=True)
    ]


def merge(lines: Sequence[Line]) -> list[Line]:
    """Lines of one (model, kind, unit price) as one, ordered by model then ``KINDS``."""
    merged: dict[tuple[str, str, Decimal | None, str], Line] = {}
    for line in lines:
        key = (line.model, line.kind, line.unit_price, line.description)
        if key in merged:
            before = merged[key]
            line = Line(
                line.model, line.kind, line.description, before.quantity + line.quantity,
                line.unit, line.unit_price, before.amount + line.amount,
            )  # fmt: skip
        merged[key] = line
    order = {kind: i for i, kind in enumerate((*KINDS, "usage", "estimate", "adjustment"))}
    return sorted(
        merged.values(),
        key=lambda x: (x.model, order[x.kind], x.unit_price is None, x.unit_price or 0),
    )


@dataclass(frozen=True, slots=True)
class Party:
    """Who issues or receives an invoice."""

    name: str
    address: tuple[str, ...] = ()
    email: str | None = None
    tax_id: str | None = None


@dataclass(frozen=True, slots=True)
class InvoiceDocument:
    number: str
    account_id: str
    month: str  # YYYY-MM
    start: datetime
    end: datetime  # exclusive
    issued_at: datetime
    issuer: Party
    customer: Party
    lines: tuple[Line, ...]
    total: Micros
    prepaid: Micros  # balance at the start plus the month's credits (may be negative)

    def __post_init__(self) -> None:
        summed = sum(int(line.amount) for line in self.lines)
        if summed != self.total:
            raise InvoiceError(
                f"invoice {self.number}: lines add up to {summed} micro-USD, the ledger charged "
                f"{int(self.total)}"
            )

    @property
    def credits_applied(self) -> Micros:
        return Micros(max(0, min(int(self.total), int(self.prepaid))))

    @property
    def amount_due(self) -> Micros:
        return self.total - self.credits_applied


def usd(amount: int) -> str:
    """USD as an invoice shows it: two decimals, up to six when the micro-dollars need them
    (``12.50``, ``0.000041``); a minus sign in front of a refund."""
    text = Micros(amount).usd()
    whole, frac = text.split(".")
    frac = frac.rstrip("0")
    return f"{whole}.{frac.ljust(2, '0')}"


def rate_text(rate: Decimal) -> str:
    """A unit price as stated in the price book, without trailing zeros."""
    text = format(rate.normalize(), "f")
    return text
