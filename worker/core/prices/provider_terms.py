"""Terms a provider states for every model it serves, which the community price list leaves out.

Pure. The list reader (``worker.core.prices.litellm``) applies them to each list row of an entry
whose ``litellm_provider`` is the provider (its API, not a cloud's or a reseller's: those have
their own ``litellm_provider``), a fee only where the entry states none itself; override rows
state their own.

* **anthropic** — web search: "$10 per 1,000 searches", on top of token costs, for every model
  that has the tool (docs.anthropic.com/en/docs/about-claude/pricing, "Web search tool"; the list
  states it for most Claude entries as ``search_context_cost_per_query`` 0.01, not for all).
  Inference geography: "specifying US-only inference via the ``inference_geo`` parameter incurs a
  1.1x multiplier on all token pricing categories, including input tokens, output tokens, cache
  writes, and cache reads" (Anthropic's pricing page, "Data residency pricing";
  platform.claude.com/docs/en/build-with-claude/data-residency: the parameter is taken by Claude
  Opus 4.6 and later models; an older model answers it with a 400 error, so no usage of one says
  ``us``). ``global`` is the default geography, at the standard prices.
"""

from __future__ import annotations

from decimal import Decimal

WEB_SEARCH: dict[str, Decimal] = {"anthropic": Decimal("0.01")}
"""USD per web search request, any context size, by ``litellm_provider``."""
INFERENCE_GEO: dict[str, tuple[tuple[str, Decimal], ...]] = {
    "anthropic": (("us", Decimal("1.1")),),
}
"""Token-rate multipliers by inference geography, by ``litellm_provider``."""


def provider_terms(provider: str, web_search: tuple[tuple[str, Decimal], ...]) -> dict[str, object]:
    """The ``Price`` keyword arguments ``provider``'s terms add to a list row of an entry whose
    ``litellm_provider`` is ``provider``; ``web_search`` is the fee the entry states itself."""
    terms: dict[str, object] = {}
    if not web_search and provider in WEB_SEARCH:
        terms["web_search"] = (("any", WEB_SEARCH[provider]),)
    if provider in INFERENCE_GEO:
        terms["inference_geo"] = INFERENCE_GEO[provider]
    return terms
