"""The service tier of an export line, in the price book's terms: pure.

A line is matched to the ledger's calls of its own tier and its leak is priced at that tier
(``worker.upstream.matching``). What each provider's usage export says of a line's tier:

* **OpenAI** ``/v1/organization/usage/completions``: ``batch`` (a boolean, with ``group_by=batch``)
  and ``service_tier`` (a string, with ``group_by=service_tier``; openai/openai-node
  ``src/resources/admin/organization/usage.ts``). ``batch: true`` is the batch tier whatever its
  ``service_tier``; a non-batch line is of its ``service_tier``: ``default``, ``flex``, ``scale`` or
  ``priority``, the tiers a response reports (``auto`` is a request's choice, resolved to one of them
  before the call is billed). A line is of a known tier only when grouped by both: without
  ``batch``, a ``default`` line may hold batch usage; without ``service_tier``, a non-batch line
  may hold flex or priority usage.
* **Anthropic** ``/v1/organizations/usage_report/messages``: ``service_tier`` (with
  ``group_by[]=service_tier``): ``standard``, ``batch``, ``priority``, ``priority_on_demand``,
  ``flex``, ``flex_discount`` (Anthropic's Admin API reference, "Get Messages Usage Report": "Service
  tier used. null if not grouping by service tier").

A line whose tier cannot be known (the export not grouped by it) is of tier ``ANY_TIER``; a line of
a tier its provider does not document keeps that name. Both are **unpriced** with the reason: never
priced at the standard tier's price. A documented tier the book has no row for is unpriced by the
book (``matching.priced_upstream``).
"""

from __future__ import annotations

from dataclasses import dataclass

from worker.core.prices.book import normalize_tier

ANY_TIER = "*"
DOCUMENTED = {
    "openai": frozenset({"default", "flex", "scale", "priority"}),
    "anthropic": frozenset(
        {"standard", "batch", "priority", "priority_on_demand", "flex", "flex_discount"}
    ),
}
GROUP_BY = {"openai": "group_by=batch,service_tier", "anthropic": "group_by[]=service_tier"}


@dataclass(frozen=True, slots=True)
class LineTier:
    name: str  # the book's tier name (``default``, ``batch``, ``flex``...), or ANY_TIER
    unpriced: str | None = None  # why the line's usage cannot be priced at its tier; None: it can


def line_tier(provider: str, service_tier: str, batch: str) -> LineTier:
    """The tier of one stored export line ('' for a field the export is not grouped by)."""
    if provider == "openai" and batch == "true":
        return LineTier("batch")
    if not service_tier or (provider == "openai" and not batch):
        fields = "batch and service_tier" if provider == "openai" else "service_tier"
        return LineTier(
            ANY_TIER,
            f"the export is not grouped by {fields}, so the tier of its usage is unknown; "
            f"download it with {GROUP_BY.get(provider, 'its tier')} (billing upstream pull does)",
        )
    name = normalize_tier(service_tier)
    if service_tier not in DOCUMENTED.get(provider, ()):
        return LineTier(name, f"service tier {service_tier!r} is not one {provider} documents")
    return LineTier(name)
