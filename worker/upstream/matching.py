"""Tying the providers' exports to the ledger: pure, over aggregate rows (no IO, no call ids).

Both sides are aggregated per **grain** = (UTC day, provider, model, upstream key) before they meet:

* **Model**: the export's provider model id (``gpt-4o-mini-2024-07-18``) and the ledger's model
  name (``gpt-4o-mini``) are both mapped by the price book's normalisation (``match_model``): the
  book's own name for an alias, then a dated snapshot to its base (``worker.core.prices.book.
  snapshot_base``). One table of names, the book's.
* **Upstream key**: a day, provider and model whose calls carry an ``upstream_key`` label in the
  ledger is matched per key: the label against the export's ``api_key_id`` (its ``project_id`` /
  Anthropic ``workspace_id`` when the export is not grouped by key). Where no call of that day,
  provider and model has a label, every key of the export is summed and the key is ``*``.

Per grain (``Ledger`` against ``Upstream``), the ledger's usage is the billed calls' usage records
(reported or estimated) plus the unsettled calls' estimates; a void call is a request of 0 tokens:

* ``leak_*`` = upstream beyond the ledger (requests, input, output tokens): usage with no billed
  or known call. ``over_*`` = the ledger beyond upstream. ``matched_*`` = the smaller of the two.
* ``leak_cost``: the leaked tokens at the price book's price for the model and day (None when the
  book has none) — what the leaked calls would have been charged.
* ``confirmed_exposure``: the open unsettled calls' exposure when upstream counted at least every
  call the ledger has for the grain (by requests; by tokens for an export without request counts),
  else 0: those calls certainly ran upstream.

Margin is per (day, provider, model), the grain the providers' costs come in: what the ledger
charged against the upstream cost.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from datetime import UTC, date, datetime

from worker.core.money import Micros
from worker.core.prices import PriceBook
from worker.core.prices.book import normalize_provider, snapshot_base
from worker.core.result import Usage

ANY_KEY = "*"
UNKNOWN = "unknown"


def match_model(book: PriceBook, name: str, day: date) -> str:
    """The name both sides are matched by: the book's row name for ``name`` (an alias resolved),
    then a dated snapshot's base name; ``name`` itself when the book does not know it."""
    at = datetime(day.year, day.month, day.day, tzinfo=UTC)
    price = book.price_for(name, at)
    canonical = price.model if price is not None else name
    return snapshot_base(canonical) or canonical


def match_provider(provider: str | None) -> str:
    return normalize_provider(provider) or UNKNOWN


@dataclass(frozen=True, slots=True)
class Ledger:
    """The ledger's calls of one grain (counts, tokens, micro-USD)."""

    calls: int = 0
    billed_calls: int = 0
    billed_input: int = 0
    billed_output: int = 0
    charged: int = 0
    unsettled_calls: int = 0
    unsettled_input: int = 0
    unsettled_output: int = 0
    open_calls: int = 0
    open_exposure: int = 0
    void_calls: int = 0

    def __add__(self, other: Ledger) -> Ledger:
        return Ledger(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(Ledger)))

    @property
    def input_tokens(self) -> int:
        return self.billed_input + self.unsettled_input

    @property
    def output_tokens(self) -> int:
        return self.billed_output + self.unsettled_output


@dataclass(frozen=True, slots=True)
class Upstream:
    """The export's rows of one grain. ``requests`` is None when the export counts none."""

    requests: int | None = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Upstream) -> Upstream:
        requests = (
            None
            if self.requests is None or other.requests is None
            else self.requests + other.requests
        )
        return Upstream(
            requests,
            self.input_tokens + other.input_tokens,
            self.cached_tokens + other.cached_tokens,
            self.output_tokens + other.output_tokens,
        )


Grain = tuple[str, str, str, str]  # (day ISO, provider, model, upstream key)


@dataclass(frozen=True, slots=True)
class Row:
    """One grain, both sides, and what follows from them (see the module docstring)."""

    day: str
    provider: str
    model: str
    upstream_key: str
    ledger: Ledger
    upstream: Upstream
    leak_cost: Micros | None

    @property
    def leak_requests(self) -> int | None:
        u = self.upstream.requests
        return None if u is None else max(0, u - self.ledger.calls)

    @property
    def over_requests(self) -> int | None:
        u = self.upstream.requests
        return None if u is None else max(0, self.ledger.calls - u)

    @property
    def leak_input(self) -> int:
        return max(0, self.upstream.input_tokens - self.ledger.input_tokens)

    @property
    def leak_output(self) -> int:
        return max(0, self.upstream.output_tokens - self.ledger.output_tokens)

    @property
    def over_input(self) -> int:
        return max(0, self.ledger.input_tokens - self.upstream.input_tokens)

    @property
    def over_output(self) -> int:
        return max(0, self.ledger.output_tokens - self.upstream.output_tokens)

    @property
    def matched_input(self) -> int:
        return min(self.ledger.input_tokens, self.upstream.input_tokens)

    @property
    def matched_output(self) -> int:
        return min(self.ledger.output_tokens, self.upstream.output_tokens)

    @property
    def confirmed_exposure(self) -> Micros:
        u, led = self.upstream, self.ledger
        if u.requests is not None:
            covered = u.requests >= led.calls
        else:
            covered = u.input_tokens >= led.input_tokens and u.output_tokens >= led.output_tokens
        return Micros(led.open_exposure if covered else 0)

    @property
    def leaks(self) -> bool:
        return bool(self.leak_requests or self.leak_input or self.leak_output)


@dataclass(frozen=True, slots=True)
class Margin:
    """Per (day, provider, model): what we charged against what the provider's costs say."""

    day: str
    provider: str
    model: str
    charged: Micros
    upstream_cost: Micros | None  # None: no cost export imported for it

    @property
    def margin(self) -> Micros | None:
        return None if self.upstream_cost is None else self.charged - self.upstream_cost


@dataclass(frozen=True, slots=True)
class Reconciliation:
    rows: tuple[Row, ...]
    margins: tuple[Margin, ...]
    # Providers whose calls are in the window but no export of theirs is: (provider, calls).
    not_imported: tuple[tuple[str, int], ...] = ()


def _keyed(
    ledger: Mapping[Grain, Ledger], upstream: Mapping[Grain, Upstream]
) -> tuple[dict[Grain, Ledger], dict[Grain, Upstream]]:
    """Apply the upstream-key rule: grains of a (day, provider, model) without a labelled call in
    the ledger collapse to ``ANY_KEY`` on both sides."""
    labelled = {grain[:3] for grain, row in ledger.items() if grain[3] and row.calls}
    sides: tuple[dict[Grain, Ledger], dict[Grain, Upstream]] = (
        defaultdict(Ledger),
        defaultdict(Upstream),
    )
    for side, rows in zip(sides, (ledger, upstream), strict=True):
        for grain, row in rows.items():
            key = grain[3] if grain[:3] in labelled else ANY_KEY
            target = (*grain[:3], key)
            side[target] = side[target] + row  # type: ignore[index, operator]
    return sides


def reconcile(
    ledger: Mapping[Grain, Ledger],
    upstream: Mapping[Grain, Upstream],
    costs: Mapping[tuple[str, str, str], int],
    book: PriceBook,
) -> Reconciliation:
    """Tie the two sides together; ``ledger`` and ``upstream`` already use matched names (the
    callers map them with ``match_model`` / ``match_provider``). Only providers with rows in
    ``upstream`` or ``costs`` are reconciled; the others are listed in ``not_imported``."""
    imported = {g[1] for g in upstream} | {k[1] for k in costs}
    others: dict[str, int] = defaultdict(int)
    for grain, row in ledger.items():
        if grain[1] not in imported:
            others[grain[1]] += row.calls
    mine = {g: row for g, row in ledger.items() if g[1] in imported}
    by_ledger, by_upstream = _keyed(mine, upstream)
    rows = []
    for grain in sorted(set(by_ledger) | set(by_upstream)):
        led = by_ledger.get(grain, Ledger())
        ups = by_upstream.get(grain, Upstream())
        row = Row(*grain, led, ups, None)
        if row.leak_input or row.leak_output:
            day = date.fromisoformat(grain[0])
            at = datetime(day.year, day.month, day.day, tzinfo=UTC)
            usage = Usage(prompt_tokens=row.leak_input, completion_tokens=row.leak_output)
            row = replace(row, leak_cost=book.charge(grain[2], usage, at))
        else:
            row = replace(row, leak_cost=Micros(0))
        rows.append(row)
    charged: dict[tuple[str, str, str], int] = defaultdict(int)
    for (day, provider, model, _key), led in mine.items():
        charged[(day, provider, model)] += led.charged
    margins = tuple(
        Margin(*key, Micros(charged.get(key, 0)), None if key not in costs else Micros(costs[key]))
        for key in sorted(set(charged) | set(costs))
    )
    return Reconciliation(tuple(rows), margins, tuple(sorted(others.items())))


def daily_leak(rows: Iterable[Row]) -> dict[tuple[str, str], tuple[int, int, int, int]]:
    """Per (day, provider): (leaked tokens, upstream tokens, leak cost micro-USD, leaked requests)."""
    found: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for row in rows:
        acc = found[(row.day, row.provider)]
        acc[0] += row.leak_input + row.leak_output
        acc[1] += row.upstream.input_tokens + row.upstream.output_tokens
        acc[2] += int(row.leak_cost or 0)
        acc[3] += row.leak_requests or 0
    return {key: (a[0], a[1], a[2], a[3]) for key, a in found.items()}
