"""Tying the providers' exports to the ledger: pure, over aggregate rows (no IO, no call ids).

Both sides are aggregated per **grain** = (UTC day, provider, model, upstream key, tier) before
they meet:

* **Model**: the export's provider model id (``gpt-4o-mini-2024-07-18``,
  ``claude-sonnet-4-5-20250929``) and the ledger's model name (``gpt-4o-mini``,
  ``claude-sonnet-4-5``) are both mapped by ``match_model``: the book's own name for an alias,
  then a dated snapshot to its base (``worker.core.prices.book.snapshot_base``: ``-YYYY-MM-DD``,
  ``-MMDD``; and Anthropic's ``-YYYYMMDD`` when the book has rows of the base: the alias
  Anthropic's API resolves to that snapshot). One table of names, the book's.
* **Upstream key**: a day, provider and model whose calls carry an ``upstream_key`` label in the
  ledger is matched per key: the label against the export's ``api_key_id`` (its ``project_id`` /
  Anthropic ``workspace_id`` when the export is not grouped by key). Where no call of that day,
  provider and model has a label, every key of the export is summed and the key is ``*``.
* **Tier**: the book's name of the tier (``worker.core.prices.book.normalize_tier``): on the
  ledger's side the service tier the call's response reported (none: the default tier), on the
  export's the tier its line names (``worker.upstream.tiers.line_tier``: OpenAI ``batch: true`` is
  ``batch``, else its ``service_tier``; Anthropic's ``service_tier``, ``standard`` the default).
  Usage of one tier is never netted against another's: a batch line the gateway never saw leaks
  whole, at batch prices, beside a standard line its calls match. Where a line of a day, provider
  and model cannot say its tier (the export is not grouped by it), both sides' tiers of that day,
  provider and model are summed and the tier is ``*``: matched by tokens, its leak unpriced.

Per grain (``Ledger`` against ``Upstream``), the ledger's usage is the billed calls' usage records
(reported or estimated) plus the unsettled calls' estimates; a void call is a request of 0 tokens:

* ``leak_*`` = upstream beyond the ledger (requests, input, output tokens): usage with no billed
  or known call. ``over_*`` = the ledger beyond upstream. ``matched_*`` = the smaller of the two.
* ``leak_cost``: the leaked tokens at the price book's prices — what the leaked calls would have
  been charged. The export's own rows of the grain are priced first (``priced_upstream``), at the
  grain's tier, cache reads at the cached rate and cache writes by lifetime (5 minutes, 1 hour);
  the leak is then that value's share: ``input value x leaked input / upstream input + output
  value x leaked output / upstream output``, rounded half up once. Exact when the whole grain
  leaked; otherwise the leaked tokens are taken to be of the grain's own mix of kinds (the ledger
  does not say which calls leaked). None when a row of the grain with tokens is unpriced at its
  tier: a tier the book has no row for, a tier the provider does not document, a line of unknown
  tier; never priced at the default price. ``Row.unpriced`` says why.
* ``confirmed_exposure``: the open unsettled calls' exposure when upstream counted at least every
  call the ledger has for the grain (by requests; by tokens for an export without request counts),
  else 0: those calls certainly ran upstream.

Margin is per (day, provider, model), the grain the providers' costs come in: what the ledger
charged against the upstream cost.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from datetime import UTC, date, datetime
from decimal import Decimal
from fractions import Fraction

from worker.core.errors import InputError
from worker.core.money import Micros
from worker.core.prices import PriceBook
from worker.core.prices.book import normalize_provider, normalize_tier, snapshot_base
from worker.core.result import Usage
from worker.upstream.tiers import ANY_TIER

ANY_KEY = "*"
UNKNOWN = "unknown"


_COMPACT_DATE = re.compile(r"(?P<base>.+)-(?P<y>20\d{2})(?P<m>\d{2})(?P<d>\d{2})")


def _compact_base(book: PriceBook, name: str, at: datetime) -> str | None:
    """``claude-sonnet-4-5-20250929`` → ``claude-sonnet-4-5`` when that date is valid and the book
    has rows of the base (Anthropic's alias for its snapshot); None otherwise."""
    match = _COMPACT_DATE.fullmatch(name)
    if match is None:
        return None
    try:
        date(int(match["y"]), int(match["m"]), int(match["d"]))
    except ValueError:
        return None
    base = match["base"]
    known = book.price_for(base, at) is not None or book.context_window(base, at) is not None
    return base if known else None


def _day_start(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def match_model(book: PriceBook, name: str, day: date) -> str:
    """The name both sides are matched by: the book's row name for ``name`` (an alias resolved),
    then a dated snapshot's base name; ``name`` itself when the book does not know it."""
    at = _day_start(day)
    price = book.price_for(name, at)
    canonical = price.model if price is not None else name
    return snapshot_base(canonical) or _compact_base(book, canonical, at) or canonical


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


def _plus(a: Fraction | None, b: Fraction | None) -> Fraction | None:
    return None if a is None or b is None else a + b


@dataclass(frozen=True, slots=True)
class Upstream:
    """The export's rows of one grain. ``requests`` is None when the export counts none.
    ``input_value`` / ``output_value``: those rows at our prices (exact micro-USD, each row at its
    own tier; ``priced_upstream``), None when a row with such tokens is unpriced; ``unpriced``
    says why."""

    requests: int | None = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    input_value: Fraction | None = Fraction(0)
    output_value: Fraction | None = Fraction(0)
    unpriced: frozenset[str] = frozenset()

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
            _plus(self.input_value, other.input_value),
            _plus(self.output_value, other.output_value),
            self.unpriced | other.unpriced,
        )


def unpriced_upstream(usage: Usage, requests: int | None, because: str) -> Upstream:
    """Export rows whose usage cannot be priced (``because``): counted, of no value."""
    return Upstream(
        requests, usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens,
        None if usage.prompt_tokens else Fraction(0),
        None if usage.completion_tokens else Fraction(0),
        frozenset({because}) if usage.prompt_tokens or usage.completion_tokens else frozenset(),
    )  # fmt: skip


def priced_upstream(
    book: PriceBook,
    provider: str,
    model: str,
    day: date,
    tier: str | None,
    usage: Usage,
    requests: int | None,
) -> Upstream:
    """One export row (or rows of one model and tier) as an ``Upstream`` with its value at our
    prices: the row of the book for ``model`` at ``tier`` and ``provider`` that day, its per-token
    rates (the base rates: a day's sum of prompts says nothing of one prompt's length) applied
    to each kind — uncached input, cache reads, 5-minute and 1-hour cache writes, output. Unpriced
    (``unpriced_upstream``) when the book has no such row or its rates do not price every kind."""
    at = _day_start(day)
    price = book.price_for(model, at, tier=tier, provider=provider)
    input_value: Fraction | None = None
    output_value: Fraction | None = None
    if price is not None:
        writes_5m = usage.cache_write_tokens - usage.cache_write_1h_tokens
        sample = Usage(
            prompt_tokens=1 + min(usage.cached_tokens, 1) + min(writes_5m, 1)
            + min(usage.cache_write_1h_tokens, 1),
            completion_tokens=1,
            cached_tokens=min(usage.cached_tokens, 1),
            cache_write_tokens=min(writes_5m, 1) + min(usage.cache_write_1h_tokens, 1),
            cache_write_1h_tokens=min(usage.cache_write_1h_tokens, 1),
        )  # fmt: skip
        try:
            rates = price.unit_prices(sample, at)  # USD per 1M tokens = micro-USD per token
        except InputError:
            rates = None
        if rates is not None:
            rate = {k: Fraction(Decimal(str(v))) for k, v in rates.items() if k != "rates"}
            plain = usage.prompt_tokens - usage.cached_tokens - usage.cache_write_tokens
            input_value = (
                plain * rate["input"]
                + usage.cached_tokens * rate.get("cached_input", Fraction(0))
                + writes_5m * rate.get("cache_write", Fraction(0))
                + usage.cache_write_1h_tokens * rate.get("cache_write_1h", Fraction(0))
            )
            output_value = usage.completion_tokens * rate["output"]
    if input_value is None:
        because = (
            f"the price book has no {normalize_tier(tier)} row for {model} at {provider} on "
            f"{day.isoformat()}"
            if price is None
            else f"the price book's {price.tier} row for {model} does not price every kind of its "
            "tokens"
        )
        return unpriced_upstream(usage, requests, because)
    return Upstream(
        requests,
        usage.prompt_tokens,
        usage.cached_tokens,
        usage.completion_tokens,
        input_value if usage.prompt_tokens or input_value is not None else Fraction(0),
        output_value if usage.completion_tokens or output_value is not None else Fraction(0),
    )


def leak_value(upstream: Upstream, leak_input: int, leak_output: int) -> Micros | None:
    """The leaked tokens' share of the upstream's value at our prices (module docstring)."""
    total = Fraction(0)
    for leaked, tokens, value in (
        (leak_input, upstream.input_tokens, upstream.input_value),
        (leak_output, upstream.output_tokens, upstream.output_value),
    ):
        if not leaked:
            continue
        if value is None:
            return None
        total += value * leaked / tokens
    whole, rest = divmod(total.numerator, total.denominator)
    return Micros(whole + (1 if 2 * rest >= total.denominator else 0))


Grain = tuple[str, str, str, str, str]  # (day ISO, provider, model, upstream key, tier)


@dataclass(frozen=True, slots=True)
class Row:
    """One grain, both sides, and what follows from them (see the module docstring)."""

    day: str
    provider: str
    model: str
    upstream_key: str
    tier: str
    ledger: Ledger
    upstream: Upstream
    leak_cost: Micros | None

    @property
    def unpriced(self) -> str | None:
        """Why the leak has no cost at our prices; None when it has one."""
        if self.leak_cost is not None:
            return None
        return "; ".join(sorted(self.upstream.unpriced)) or "its tokens are not priced"

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
class Gap:
    """An export known to be incomplete: a page said ``has_more`` and the buckets of ``kind``
    (``usage`` or ``cost``) from ``after`` on were not imported since (``source`` said so)."""

    provider: str
    kind: str
    after: datetime
    source: str


@dataclass(frozen=True, slots=True)
class Reconciliation:
    rows: tuple[Row, ...]
    margins: tuple[Margin, ...]
    # Providers whose calls are in the window but no export of theirs is: (provider, calls).
    not_imported: tuple[tuple[str, int], ...] = ()
    incomplete: tuple[Gap, ...] = ()


def _keyed(
    ledger: Mapping[Grain, Ledger], upstream: Mapping[Grain, Upstream]
) -> tuple[dict[Grain, Ledger], dict[Grain, Upstream]]:
    """Apply the upstream-key and tier rules: grains of a (day, provider, model) without a labelled
    call in the ledger collapse to ``ANY_KEY`` on both sides; those with an export line of unknown
    tier to ``ANY_TIER``."""
    labelled = {grain[:3] for grain, row in ledger.items() if grain[3] and row.calls}
    untiered = {grain[:3] for grain in upstream if grain[4] == ANY_TIER}
    sides: tuple[dict[Grain, Ledger], dict[Grain, Upstream]] = (
        defaultdict(Ledger),
        defaultdict(Upstream),
    )
    for side, rows in zip(sides, (ledger, upstream), strict=True):
        for grain, row in rows.items():
            key = grain[3] if grain[:3] in labelled else ANY_KEY
            tier = ANY_TIER if grain[:3] in untiered else grain[4]
            target = (*grain[:3], key, tier)
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
        rows.append(replace(row, leak_cost=leak_value(ups, row.leak_input, row.leak_output)))
    charged: dict[tuple[str, str, str], int] = defaultdict(int)
    for (day, provider, model, _key, _tier), led in mine.items():
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
