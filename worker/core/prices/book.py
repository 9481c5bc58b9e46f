"""The effective-dated price book: which row prices a call, and why.

The rule, in the order it is applied (docs/operations.md, "Prices", says the same):

1. **Name.** A call's model is priced only by rows that name it: a row's ``model`` or one of its
   ``aliases``, exactly. A dated snapshot (``NAME-YYYY-MM-DD`` or ``NAME-MMDD``, a valid date) that
   no row names is priced by the rows of model NAME (not an alias) only when one of them says
   ``snapshots = true``. A fine-tuned id (OpenAI's ``ft:BASE:ORG:SUFFIX:ID``) is priced by the rows
   that name the full id where one applies (rules 2-5), else by the *fine-tune rows* of its base:
   the rows named ``ft:BASE`` (exactly, by an alias of another ``ft:`` row, or as the dated snapshot
   of an ``ft:`` row that says ``snapshots = true``), never by BASE's own rows (fine-tuned inference
   costs more than the base model's). Nothing else matches: no
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

Rules 2-5 walk *groups*, in order: the rows of one name (the full id first, then a fine-tune's base)
in one layer (override, then list) for the call's provider. The first group with a row of the call's
tier in force at ``created_at`` prices the call; a group without one hands the call to the next,
**except** a tier call (any tier but the default) in a group whose default-tier row is in force then:
that group says what the model cost at that time, so the call is priced by that group's own row of its
tier or is unpriced; never by a later group's row, such as a list row "from 1970" (today's price).

A row prices the whole call at the rates of the long-context band its prompt falls in, if any
(``Price.rates_for``). A call that has tokens of a kind its rates do not price (audio, cache writes;
in a band, any kind the band does not price) or a prompt longer than the row's ``prompt_limit`` with
no band there is unpriced as well (``Price.unpriced_because``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime

from worker.core.calibration import EMPTY, CalibrationTable
from worker.core.money import Micros
from worker.core.prices.price import DEFAULT_TIER, Layer, Price
from worker.core.result import Usage

DEFAULT_TIER_NAMES = frozenset({"default", "on_demand", "standard"})
TIER_NAMES = {"batches": "batch"}
PROVIDER_NAMES = {"together_ai": "together", "fireworks_ai": "fireworks"}
FINE_TUNE_PREFIX = "ft:"
_SNAPSHOT = re.compile(r"(?P<base>.+)-(?:(?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})|(?P<mmdd>\d{4}))")
_FINE_TUNE = re.compile(r"ft:(?P<base>[^:]+):.+")
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


def fine_tune_base(name: str) -> str | None:
    """The base model of an OpenAI fine-tuned id (``ft:BASE:ORG:SUFFIX:ID``, a checkpoint's with
    ``:ckpt-step-N`` after it): ``ft:gpt-4o-mini-2024-07-18:acme::AbC123`` → ``gpt-4o-mini-2024-07-18``;
    None when ``name`` is not one."""
    match = _FINE_TUNE.fullmatch(name)
    return None if match is None else match["base"]


@dataclass(frozen=True, slots=True)
class Resolution:
    """Which row prices a call (``price``; None: unpriced), ``why`` in one sentence, and ``path``:
    each dimension of the rule as (dimension, what it decided), in the order applied: ``name``
    (exact, alias, snapshot or fine-tune base), ``layer``, ``provider``, ``tier``, ``time`` and, for
    a priced call, ``kinds`` (the kinds of token the row prices and those it leaves unpriced)."""

    model: str
    price: Price | None
    why: str
    path: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class _Group:
    """The rows of one name in one layer for the call's provider (rules 2-3)."""

    name: str  # the rows' model
    how: str  # how the call's model came to this name (rule 1)
    layer: Layer
    provider: str  # whose rows, in words
    tiers: tuple[str, ...]  # every tier the group has rows of
    rows: tuple[Price, ...]  # the call's tier, latest effective_from first
    defaults: tuple[Price, ...]  # the default tier, for a call of another tier; latest first


@dataclass(frozen=True, slots=True)
class _Candidates:
    named: bool  # some name's rows may price the call (rule 1)
    how: str  # how the name was resolved, or why it was not
    groups: tuple[_Group, ...]  # in the order they are tried
    notes: tuple[str, ...]  # layers left out whatever the time (another provider's rows only)


def _latest_first(rows: Iterable[Price]) -> tuple[Price, ...]:
    return tuple(sorted(rows, key=lambda p: p.effective_from, reverse=True))


def _window(price: Price) -> str:
    end = f"until {price.until.isoformat()}" if price.until else "with no end"
    return f"from {price.effective_from.isoformat()} {end}"


class PriceBook:
    """The rows of every layer; ``resolve`` applies the rule above, ``charge`` prices a usage.

    ``calibration`` holds the factors an estimated call's counts are charged at
    (``worker.core.calibration``; empty: every estimate at face value)."""

    def __init__(self, prices: Iterable[Price], calibration: CalibrationTable = EMPTY) -> None:
        self.calibration = calibration
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
        self._budget_names: dict[str, str] = {}

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

    def _fine_tune(self, name: str, base: str) -> tuple[str | None, str]:
        """The fine-tune rows that price the fine-tuned id ``name`` of ``base``, and how."""
        tuned, how = self._canonical(FINE_TUNE_PREFIX + base)
        if tuned is not None and not tuned.startswith(FINE_TUNE_PREFIX):
            how = f"{how}, not a fine-tune row"
            tuned = None
        if tuned is None:
            return None, (
                f"{name} is a fine-tuned id of {base}, and no fine-tune row prices it ({how}); "
                f"{base}'s own rows never price a fine-tune (fine-tuned inference costs more)"
            )
        return tuned, f"{name} is a fine-tuned id of {base}, priced by its fine-tune rows ({how})"

    def _scopes(self, name: str) -> tuple[list[tuple[str, str]], str]:
        """The names whose rows may price ``name``, first first, each with how; and how in all."""
        base = fine_tune_base(name)
        canonical, how = self._canonical(name)
        if base is None or (name in self._names and canonical is None):
            return ([(canonical, how)] if canonical is not None else []), how
        scopes = []
        hows = []
        if canonical is not None and name in self._names:  # rows for the full id come first
            scopes.append((canonical, how))
            hows.append(how)
        tuned, tuned_how = self._fine_tune(name, base)
        if tuned is not None:
            if scopes:
                tuned_how = f"where no row of {canonical} applies, {tuned_how}"
            scopes.append((tuned, tuned_how))
        hows.append(tuned_how)
        return scopes, "; ".join(hows)

    def _candidates(self, name: str, tier: str, provider: str | None) -> _Candidates:
        key = (name, tier, provider)
        found = self._cache.get(key)
        if found is not None:
            return found
        scopes, how = self._scopes(name)
        groups: list[_Group] = []
        notes: list[str] = []
        for canonical, scope_how in scopes:
            for layer in (Layer.OVERRIDE, Layer.LIST):
                rows = [p for p in self._by_model.get(canonical, ()) if p.layer is layer]
                if not rows:
                    continue
                mine = [p for p in rows if provider is not None and p.provider == provider]
                if mine:
                    rows_p, whose = mine, f"rows for provider {provider}"
                else:
                    rows_p = [p for p in rows if p.provider is None]
                    whose = "rows for any provider" + (
                        f" (none for provider {provider})" if provider else ""
                    )
                if not rows_p:
                    others = ", ".join(sorted({p.provider or "" for p in rows}))
                    named = f"names provider {provider}" if provider else "names no provider"
                    notes.append(
                        f"{layer} rows of {canonical} are for providers {others} only; "
                        f"the call {named}"
                    )
                    continue
                groups.append(
                    _Group(
                        name=canonical,
                        how=scope_how,
                        layer=layer,
                        provider=whose,
                        tiers=tuple(sorted({p.tier for p in rows_p})),
                        rows=_latest_first(p for p in rows_p if p.tier == tier),
                        defaults=()
                        if tier == DEFAULT_TIER
                        else _latest_first(p for p in rows_p if p.tier == DEFAULT_TIER),
                    )
                )
        found = _Candidates(bool(scopes), how, tuple(groups), tuple(notes))
        if len(self._cache) < _CACHE_LIMIT:
            self._cache[key] = found
        return found

    @staticmethod
    def _choose(found: _Candidates, at: datetime) -> tuple[Price | None, _Group | None]:
        """The row that prices the call and its group; (None, the group that refuses the call) for
        a tier call stopped by a group's default-tier row in force; (None, None) when no group has
        a row in force."""
        for group in found.groups:
            for price in group.rows:
                if price.in_force(at):
                    return price, group
            for price in group.defaults:
                if price.in_force(at):
                    return None, group
        return None, None

    def _pick(
        self, model: str, at: datetime, tier: str | None, provider: str | None
    ) -> Price | None:
        found = self._candidates(model, normalize_tier(tier), normalize_provider(provider))
        return self._choose(found, at)[0]

    @staticmethod
    def _passed(group: _Group, tier: str, at: datetime) -> str:
        """Why ``group`` handed the call on to the next one."""
        if not group.rows:
            return (
                f"{group.layer} rows of {group.name} have no {tier} tier "
                f"(tiers: {', '.join(group.tiers)})"
            )
        return (
            f"no {group.layer} row is in force at {at.isoformat()} for {group.name}, tier {tier} "
            f"(the earliest starts {group.rows[-1].effective_from.isoformat()})"
        )

    def resolve(
        self,
        model: str,
        at: datetime,
        *,
        tier: str | None = None,
        provider: str | None = None,
    ) -> Resolution:
        """The row that prices ``model`` at ``at`` for ``tier`` and ``provider``, why, and the path."""
        book_tier, book_provider = normalize_tier(tier), normalize_provider(provider)
        found = self._candidates(model, book_tier, book_provider)
        if not found.named:
            return Resolution(model, None, f"unpriced: {found.how}", (("name", found.how),))
        price, group = self._choose(found, at)
        reported = "no service tier reported" if tier is None else f"service tier {tier!r}"
        tier_words = f"{reported}: the {book_tier} tier" + (
            "" if book_tier == DEFAULT_TIER else f", priced only by a {book_tier} row"
        )
        routed = (
            f"the call names provider {book_provider}"
            if book_provider
            else "the call names no provider"
        )
        upto = found.groups if group is None else found.groups[: found.groups.index(group)]
        passed = [*found.notes, *(self._passed(g, book_tier, at) for g in upto)]
        if price is not None and group is not None:
            where = f"provider {price.provider}" if price.provider else "any provider"
            why = (
                f"{group.how}; {price.layer} row for {where}, tier {price.tier}, in force from "
                f"{price.effective_from.isoformat()}"
                + (f" until {price.until.isoformat()}" if price.until else "")
                + (f" ({price.source})" if price.source else "")
            )
            layer = f"{price.layer} rows of {group.name}" + (
                f" (before them: {'; '.join(passed)})" if passed else ""
            )
            if book_tier != DEFAULT_TIER:
                own = next((p for p in group.defaults if p.in_force(at)), None)
                tier_words += (
                    f" of the rows that price the default tier then ({_window(own)})"
                    if own is not None
                    else " (these rows have no default-tier row in force then)"
                )
            path = (
                ("name", group.how),
                ("layer", layer),
                ("provider", f"{routed}: {group.provider}"),
                ("tier", tier_words),
                ("time", f"the row in force at {at.isoformat()}: {_window(price)}"),
                ("kinds", price.kinds_text()),
                *price.dimensions_path(at),
            )
            return Resolution(model, price, why, path)
        notes = list(passed)
        if group is not None:  # a tier call stopped by its group's default-tier row in force
            default = next(p for p in group.defaults if p.in_force(at))
            if group.rows:
                missing = (
                    f"no {group.layer} {book_tier} row of {group.name} is in force at "
                    f"{at.isoformat()} (the earliest starts "
                    f"{group.rows[-1].effective_from.isoformat()})"
                )
            else:
                missing = f"{self._passed(group, book_tier, at)} at {at.isoformat()}"
            notes.append(
                f"{missing}, while their default-tier row {_window(default)} is in force: a "
                f"{book_tier} call is priced by a {book_tier} row of those rows in force then, or "
                "not at all (never by another layer's, name's or time's row)"
            )
        why = f"unpriced: {found.how}" + (", but " + "; ".join(notes) if notes else "")
        path = [("name", found.how), ("provider", routed), ("tier", tier_words)]
        path.append(("unpriced", "; ".join(notes) or f"no row in force at {at.isoformat()}"))
        return Resolution(model, None, why, tuple(path))

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
        return None if price is None else price.charge(usage, at)

    def quote(
        self,
        model: str,
        usage: Usage,
        at: datetime,
        *,
        tier: str | None = None,
        provider: str | None = None,
    ) -> dict[str, object] | None:
        """The unit prices ``charge`` prices ``usage`` at (``Price.unit_prices``) and the row they
        are from (layer, model, provider, tier, effective_from, source); None when unpriced."""
        price = self._pick(model, at, tier, provider)
        if price is None or price.unpriced_because(usage, at) is not None:
            return None
        return {
            **price.unit_prices(usage, at),
            "row": {
                "layer": price.layer.value,
                "model": price.model,
                "provider": price.provider,
                "tier": price.tier,
                "effective_from": price.effective_from.isoformat(),
                "source": price.source,
            },
        }

    def unpriced_components(
        self,
        model: str,
        usage: Usage,
        at: datetime,
        *,
        tier: str | None = None,
        provider: str | None = None,
    ) -> tuple[tuple[tuple[str, str], ...], Micros | None]:
        """When a row prices ``model`` but not a component ``usage`` has (a kind of token or a fee
        its rates lack): the components as (usage field, count) and the price of the rest, a lower
        bound of the call's cost; ((), None) otherwise (priced, or unpriced for another reason)."""
        price = self._pick(model, at, tier, provider)
        if price is None:
            return (), None
        missing, rest = price.unpriced_components(usage, at)
        return (missing, price.charge(rest, at)) if missing else ((), None)

    def canonical(self, model: str) -> str | None:
        """The one name ``model`` resolves to by rule 1 (an exact name, an alias, a dated snapshot
        of a model whose rows say ``snapshots = true``, a fine-tuned id's rows): the ``model`` of
        the rows that price it, which budgets and holds are kept under; None when no row names it
        (no case folding, no provider prefixes: such a name is unpriced)."""
        scopes, _ = self._scopes(model)
        return scopes[0][0] if scopes else None

    def budget_model(self, model: str) -> str:
        """The one name a call of ``model`` counts under for per-model budgets, at the gateway and
        in the worker's sync alike: its ``canonical`` name, a dated snapshot's under its base
        model when the book has that (``gpt-4o-2024-08-06`` → ``gpt-4o``, even where the snapshot
        has rows of its own); a name no row names is tried again lower-cased and without a provider
        prefix (``OpenAI/GPT-4o`` → ``gpt-4o``), and else kept so (such a call is unpriced, but a
        per-model budget still bounds it)."""
        found = self._budget_names.get(model)
        if found is not None:
            return found
        name = self.canonical(model)
        if name is None:
            bare = model.strip().lower().rpartition("/")[2] or model
            name = self.canonical(bare) or bare
        base = snapshot_base(name)
        found = base if base is not None and base in self._by_model else name
        if len(self._budget_names) < _CACHE_LIMIT:
            self._budget_names[model] = found
        return found

    def context_window(self, model: str, at: datetime) -> int | None:
        """An upper bound on the tokens (prompt + completion) of one call of ``model`` at ``at``: the
        largest ``max_input_tokens + max_output_tokens`` of its rows in force then, whatever the tier
        or provider; None when the model is not in the book or its limits are not known."""
        scopes, _ = self._scopes(model)
        windows = [
            p.context_window
            for canonical, _ in scopes
            for p in self._by_model.get(canonical, ())
            if p.in_force(at) and p.context_window is not None
        ]
        return max(windows, default=None)  # type: ignore[type-var]
