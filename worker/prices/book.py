"""The effective-dated price book: which row prices a call, and why.

The rule, in the order it is applied (docs/operations.md, "Prices", says the same):

1. **Name.** A call's model is priced only by rows that name it: a row's ``model`` or one of its
   ``aliases``, exactly. A dated snapshot (``NAME-YYYY-MM-DD`` or ``NAME-MMDD``, a valid date) that
   no row names is priced by the rows of model NAME (not an alias) only when one of them says
   ``snapshots = true``. Nothing else matches: no
   prefixes, no case folding, so ``o3-mini`` is never priced as ``o3`` nor ``gpt-4o-audio-preview`` as
   ``gpt-4o``.
2. **Layer.** ``override`` rows are looked at first; the ``list`` rows only when no override row
   prices the call.
3. **Provider.** Within a layer, a call routed to provider P is priced by P's rows when the layer has
   any for the model, else by its rows for any provider; a call that names no provider only by rows
   for any provider. Another provider's row never prices a call.
4. **Tier.** The row of the call's service tier: ``None``, ``default``, ``on_demand`` and ``standard``
   are the default tier; ``batches`` is ``batch``; any other tier (``flex``, ``priority``, ``scale``...)
   needs a row of its own, else the call is unpriced: never charged at the default price.
5. **Time.** Of the rows left, the latest ``effective_from`` at or before the call's ``created_at``
   whose ``until`` (if any) is later.

A call that has tokens of a kind its row does not price (audio, cache writes) or a prompt longer than
the row's ``prompt_limit`` is unpriced as well (``Price.unpriced_because``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime

from worker.money import Micros
from worker.prices.price import DEFAULT_TIER, Layer, Price
from worker.result import Usage

DEFAULT_TIER_NAMES = frozenset({"default", "on_demand", "standard"})
TIER_NAMES = {"batches": "batch"}
PROVIDER_NAMES = {"together_ai": "together", "fireworks_ai": "fireworks"}
_SNAPSHOT = re.compile(r"(?P<base>.+)-(?:(?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})|(?P<mmdd>\d{4}))")
_CACHE_LIMIT = 10_000


def normalize_tier(tier: str | None) -> str:
    """The book's name of a reported service tier (None and the default tier's names → ``default``)."""
    if tier is None:
        return DEFAULT_TIER
    name = tier.strip().lower()
    if not name or name in DEFAULT_TIER_NAMES:
        return DEFAULT_TIER
    return TIER_NAMES.get(name, name)


def normalize_provider(provider: str | None) -> str | None:
    """The book's name of a provider (LiteLLM's ``together_ai`` and ``fireworks_ai`` lose ``_ai``)."""
    if provider is None:
        return None
    name = provider.strip().lower()
    return PROVIDER_NAMES.get(name, name) or None


def snapshot_base(name: str) -> str | None:
    """``gpt-4o-2024-08-06`` → ``gpt-4o``, ``gpt-4-0613`` → ``gpt-4``; None when not a dated name."""
    match = _SNAPSHOT.fullmatch(name)
    if match is None:
        return None
    try:
        if match["mmdd"] is not None:
            date(2000, int(match["mmdd"][:2]), int(match["mmdd"][2:]))
        else:
            date(int(match["y"]), int(match["m"]), int(match["d"]))
    except ValueError:
        return None
    return match["base"]


@dataclass(frozen=True, slots=True)
class Resolution:
    """Which row prices a call (``price``; None: unpriced) and ``why``, in one sentence."""

    model: str
    price: Price | None
    why: str


@dataclass(frozen=True, slots=True)
class _Candidates:
    canonical: str | None
    how: str
    layers: tuple[tuple[Price, ...], ...]  # per layer, override first, latest effective_from first
    notes: tuple[str, ...]


class PriceBook:
    """The rows of every layer; ``resolve`` applies the rule above, ``charge`` prices a usage."""

    def __init__(self, prices: Iterable[Price]) -> None:
        self._prices = sorted(
            prices, key=lambda p: (p.model, p.layer, p.provider or "", p.tier, p.effective_from)
        )
        self._by_model: dict[str, list[Price]] = {}
        for price in self._prices:
            self._by_model.setdefault(price.model, []).append(price)
        claims: dict[str, set[str]] = {}
        for price in self._prices:
            for alias in price.aliases:
                claims.setdefault(alias, set()).add(price.model)
        self._names: dict[str, str | None] = {model: model for model in self._by_model}
        self._alias_conflicts: dict[str, set[str]] = {}
        for alias, models in claims.items():
            if alias in self._by_model:  # a model's own rows beat another model's alias
                if models - {alias}:
                    self._alias_conflicts[alias] = models | {alias}
            elif len(models) > 1:
                self._alias_conflicts[alias] = models
                self._names[alias] = None
            else:
                self._names[alias] = next(iter(models))
        self._snapshots = {p.model for p in self._prices if p.snapshots}
        self._cache: dict[tuple[str, str, str | None], _Candidates] = {}

    @property
    def prices(self) -> list[Price]:
        return list(self._prices)

    def name_conflicts(self) -> list[str]:
        """Aliases claimed by two models (such a name is unpriced) or naming another model (that
        model's own rows price the name); an import that adds one is refused."""
        return [
            f"{alias!r} is claimed by {', '.join(sorted(models))}"
            for alias, models in sorted(self._alias_conflicts.items())
        ]

    def _canonical(self, name: str) -> tuple[str | None, str]:
        if name in self._names:
            canonical = self._names[name]
            if canonical is None:
                claimed = ", ".join(sorted(self._alias_conflicts.get(name, ())))
                return None, f"{name} is an alias claimed by several models ({claimed})"
            if canonical == name:
                return name, f"{name} is the exact name of its rows"
            return canonical, f"{name} is an alias listed by the rows of {canonical}"
        base = snapshot_base(name)
        if base is not None and base in self._by_model:
            if base in self._snapshots:
                return (
                    base,
                    f"{name} is a dated snapshot of {base}, whose rows say snapshots = true",
                )
            return None, (
                f"no row names {name}; it looks like a dated snapshot of {base}, but {base}'s "
                "rows do not say snapshots = true"
            )
        return None, f"no row names {name} (exact names and aliases only)"

    def _candidates(self, name: str, tier: str, provider: str | None) -> _Candidates:
        key = (name, tier, provider)
        found = self._cache.get(key)
        if found is not None:
            return found
        canonical, how = self._canonical(name)
        layers: list[tuple[Price, ...]] = []
        notes: list[str] = []
        for layer in (Layer.OVERRIDE, Layer.LIST):
            rows = [p for p in self._by_model.get(canonical or "", ()) if p.layer is layer]
            if not rows:
                continue
            mine = [p for p in rows if provider is not None and p.provider == provider]
            rows_p = mine or [p for p in rows if p.provider is None]
            if not rows_p:
                others = ", ".join(sorted({p.provider or "" for p in rows}))
                named = f"names provider {provider}" if provider else "names no provider"
                notes.append(f"{layer} rows are for providers {others} only; the call {named}")
                continue
            rows_t = [p for p in rows_p if p.tier == tier]
            if not rows_t:
                tiers = ", ".join(sorted({p.tier for p in rows_p}))
                notes.append(f"{layer} rows have no {tier} tier (tiers: {tiers})")
                continue
            layers.append(tuple(sorted(rows_t, key=lambda p: p.effective_from, reverse=True)))
        found = _Candidates(canonical, how, tuple(layers), tuple(notes))
        if len(self._cache) < _CACHE_LIMIT:
            self._cache[key] = found
        return found

    def _pick(
        self, model: str, at: datetime, tier: str | None, provider: str | None
    ) -> Price | None:
        found = self._candidates(model, normalize_tier(tier), normalize_provider(provider))
        for rows in found.layers:
            for price in rows:
                if price.in_force(at):
                    return price
        return None

    def resolve(
        self,
        model: str,
        at: datetime,
        *,
        tier: str | None = None,
        provider: str | None = None,
    ) -> Resolution:
        """The row that prices ``model`` at ``at`` for ``tier`` and ``provider``, and why."""
        found = self._candidates(model, normalize_tier(tier), normalize_provider(provider))
        price = self._pick(model, at, tier, provider)
        if price is not None:
            where = f"provider {price.provider}" if price.provider else "any provider"
            return Resolution(
                model,
                price,
                f"{found.how}; {price.layer} row for {where}, tier {price.tier}, in force from "
                f"{price.effective_from.isoformat()}"
                + (f" until {price.until.isoformat()}" if price.until else "")
                + (f" ({price.source})" if price.source else ""),
            )
        if found.canonical is None:
            return Resolution(model, None, f"unpriced: {found.how}")
        notes = list(found.notes) + [
            f"no {rows[0].layer} row is in force at {at.isoformat()} (the earliest starts "
            f"{rows[-1].effective_from.isoformat()})"
            for rows in found.layers
        ]
        return Resolution(model, None, f"unpriced: {found.how}, but " + "; ".join(notes))

    def price_for(
        self,
        model: str,
        at: datetime,
        *,
        tier: str | None = None,
        provider: str | None = None,
    ) -> Price | None:
        """The row in force for the call, or None (the model is unpriced then)."""
        return self._pick(model, at, tier, provider)

    def charge(
        self,
        model: str,
        usage: Usage,
        at: datetime,
        *,
        tier: str | None = None,
        provider: str | None = None,
    ) -> Micros | None:
        """Integer micro-USD for ``usage`` of ``model`` at ``at``; None when unpriced.

        ``tier`` is the service tier the response reported (``flex``, ``priority``, ``batch``; None:
        the default one) and ``provider`` where the gateway routed the call (None: unknown).
        """
        price = self._pick(model, at, tier, provider)
        return None if price is None else price.charge(usage)

    def context_window(self, model: str, at: datetime) -> int | None:
        """An upper bound on the tokens (prompt + completion) of one call of ``model`` at ``at``: the
        largest ``max_input_tokens + max_output_tokens`` of its rows in force then, whatever the tier
        or provider; None when the model is not in the book or its limits are not known."""
        canonical, _ = self._canonical(model)
        windows = [
            p.context_window
            for p in self._by_model.get(canonical or "", ())
            if p.in_force(at) and p.context_window is not None
        ]
        return max(windows, default=None)  # type: ignore[type-var]
