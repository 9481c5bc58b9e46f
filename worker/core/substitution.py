"""The model served is the model billed: which name prices a call whose upstream answered with
another model than the request named (pure; the price book is only read).

The request names a model (the gateway's request entry, ``RequestMeta.model``); the response names
the model that served it (``Assembled.model``: the first chunk's, or the body's). On the LiteLLM
path the hook records the deployment's answer as the request's model, so the two agree; behind an
ASGI gateway they differ whenever the upstream falls back to another model, or answers with the
dated snapshot an alias points at. ``billed_model`` decides, in this order:

1. **Nothing to compare.** The response names no model, or the very name requested: the requested
   name prices the call, as it always did.
2. **The same model.** The book prices both names, at the call's time, service tier and provider,
   by the same row, or by rows that state the same prices (``same_prices``: they differ only in
   which name they are for, where they come from and when or for whom they apply). OpenAI answers
   ``gpt-4o-2024-08-06`` to a request for ``gpt-4o``, and the book has ``gpt-4o``'s rates on both
   names (the bundled list has a row per snapshot; a TOML row may say ``snapshots = true`` or list
   the snapshot among its ``aliases``). The requested name prices the call, no anomaly: the charge
   is the same either way.
3. **A new snapshot the book does not know yet.** The book prices the requested name and no row
   names the served one, and the served name is the requested one (without the call's provider
   prefix, if it has one) followed by ``-`` and more (``gpt-4o-2024-11-20-preview-xyz`` answered to
   ``gpt-4o``): a snapshot of the model requested that the book has no row for yet. The provider
   bills the model requested, so the requested name prices the call, and it is recorded as a
   substitution (``model_substituted``: the served name is there for whoever adds its price).
4. **Otherwise the served name prices the call**: the charge, the exposure, the estimate's
   tokenizer and the usage reader's rules are the served model's, and ``Result.model`` is the
   served name. A served name the book does not price leaves the call unsettled ``unpriced``, as
   any unpriced model: never charged at the requested model's price, which for the model that
   served is a guess (the provider bills what it served). The call is a *substitution* (the
   anomaly ``model_substituted``: "requested X, served Y"), except in one case: the request named
   the model with the call's provider as a prefix (``openai/gpt-4o`` for provider ``openai``, as
   gateways that route by that prefix write it), the book prices no such name, and the rest of it is
   the served name, or a name the book prices as the served one by rule 2 (``gpt-4o`` answered as
   ``gpt-4o-2024-08-06``). That is a spelling, not a fallback: the served name prices the call, and
   no anomaly is recorded.

Consequences, on purpose:

* A fallback to another model whose row states exactly the same prices is billed the same and not
  recorded: the book cannot tell the two apart, and the money does not depend on which served.
* An override row (a negotiated price) for ``gpt-4o`` does not price ``gpt-4o-2024-08-06`` unless
  the book says so (``snapshots = true``, or the name among its ``aliases``): an answer under the
  dated name is charged at that name's own row (the list price) and recorded, until it does.
* Names that differ in case, a served name with a provider prefix (``openai/gpt-4o`` answered to
  ``gpt-4o``: the book prices no prefixes), and two names neither of which the book prices (it
  cannot say they are one model; the call is unpriced either way, and the anomaly tells whoever
  adds the price which name the upstream used) are substitutions.

None of these is ever a price the book does not state for the model that served.

A served name that is not a usable identifier (``worker.core.request.check_identifier``: longer than
200 characters, a control character, whitespace at an end) names no model the book can price: the
call is a substitution to ``unusable_name(served)`` (``*`` and the name's ``repr``, cut to fit the
model columns), which no row names, so it is unsettled ``unpriced``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime

from worker.core.errors import RequestMetaError
from worker.core.prices import Price, PriceBook
from worker.core.prices.book import normalize_provider
from worker.core.request import check_identifier, cut_to_column

_UNUSABLE = "*"  # begins the name of a served name no call can have: no price row holds one
# What a row says about which call it prices, not what the call costs: the name, the layer and
# provider it belongs to, its tier, its window in time, the other names it takes. Every other
# compared field of ``Price`` is a price term (a field added later counts as one: two rows that
# differ in it are two prices).
_NOT_PRICES = frozenset(
    {"model", "aliases", "snapshots", "layer", "provider", "tier", "effective_from", "until"}
)


@dataclass(frozen=True, slots=True)
class Billed:
    """The name that prices a call (``model``) and whether the upstream substituted another model
    for the one requested (``substituted``: the anomaly ``model_substituted``)."""

    model: str
    substituted: bool = False


def unusable_name(served: str) -> str:
    """A served name that is not a usable identifier, as a name that is one: ``*`` and its Python
    ``repr`` (control characters and surrogates escaped, the ends' whitespace inside quotes), cut
    to ``MAX_ID_CHARS`` with ``…``. No price row names it: a row's name never holds ``*``
    (``worker.core.prices.price``), so the call is unpriced whatever the book."""
    return cut_to_column(_UNUSABLE + repr(served))


def same_prices(one: Price | None, other: Price | None) -> bool:
    """Whether two rows state the same prices (None, no row, states none: it is never the same as
    anything, not even another None)."""
    if one is None or other is None:
        return False
    if one is other:
        return True
    return all(
        getattr(one, f.name) == getattr(other, f.name)
        for f in fields(one)
        if f.compare and f.name not in _NOT_PRICES
    )


def _usable(name: str) -> bool:
    try:
        check_identifier(name, "model")
    except RequestMetaError:
        return False
    return True


def _prefixes(provider: str | None) -> tuple[str, ...]:
    """The prefixes a gateway writes for the call's provider: as the call names it, and as the
    book does (``together_ai/`` and ``together/``)."""
    if provider is None:
        return ()
    names = {provider.strip(), normalize_provider(provider) or ""} - {""}
    return tuple(f"{name}/" for name in sorted(names))


def billed_model(
    requested: str,
    served: str | None,
    prices: PriceBook,
    at: datetime,
    *,
    tier: str | None = None,
    provider: str | None = None,
) -> Billed:
    """Which name prices a call of ``requested`` that the upstream answered as ``served`` (None:
    the response named none), at ``at`` for the response's service ``tier`` and the call's
    ``provider``; the rule is the module's."""
    if not served or served == requested:
        return Billed(requested)
    if not _usable(served):
        return Billed(unusable_name(served), substituted=True)

    def row(name: str) -> Price | None:
        return prices.price_for(name, at, tier=tier, provider=provider)

    served_row = row(served)
    requested_row = row(requested)
    if same_prices(requested_row, served_row):
        return Billed(requested)
    if requested_row is not None and served_row is None and prices.canonical(served) is None:
        bare = requested
        for prefix in _prefixes(provider):
            bare = bare.removeprefix(prefix)
        if served.startswith(bare + "-"):  # a snapshot of the requested model the book lacks
            return Billed(requested, substituted=True)
    if requested_row is None:
        for prefix in _prefixes(provider):
            bare = requested.removeprefix(prefix)
            if bare != requested and (bare == served or same_prices(row(bare), served_row)):
                return Billed(served)
    return Billed(served, substituted=True)
