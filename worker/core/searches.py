"""Web searches a call is billed for that its usage does not count.

Pure; no IO. Anthropic counts its searches in the usage block (``server_tool_use.web_search_requests``,
read by ``worker.core.usage``). OpenAI's Chat Completions do not: a request with ``web_search_options``
searches the web, and OpenAI's search models search on every call ("When using Chat Completions, the
model always retrieves information from the web before responding to your query", OpenAI's web search
guide, platform.openai.com/docs/guides/tools-web-search), billed per call by the search context size
the request names (``web_search_options.search_context_size``: ``low``, ``medium`` (the default),
``high``). The usage then carries no count, and LiteLLM bills such a call one search (its
``_count_web_search_calls``: "Chat-completions responses only expose url_citation annotations with no
count, so they floor to a single billable search"). So does this rule, and only when the usage block
states no count of its own: a stated count (even 0) is the provider's word.

Perplexity's Sonar, Sonar Pro and Sonar Reasoning (Pro) bill a *request fee* on every call, by the
search context size of the call ("Total cost per query = Token costs + Request fee (varies by search
context size ...)", docs.perplexity.ai/getting-started/pricing), whatever number of searches it
ran. Such a call is billed one search request, at the size its usage names (``search_context_size``),
else the size its request names, else ``low``, Perplexity's default ("search_context_size ...
Default: low", the chat completions reference, ``web_search_options``); the book prices that request
at the row's ``web_search`` fee by size. Sonar Deep Research has no request fee: its searches are
its ``num_search_queries``, each at the row's fee, as the usage states them.
"""

from __future__ import annotations

import re
from dataclasses import replace

from worker.core.result import Usage

DEFAULT_SIZE = "medium"
SIZES = frozenset({"low", "medium", "high"})
_ALWAYS_SEARCHES = re.compile(
    r"(?:.*/)?(?:gpt-4o|gpt-4o-mini|gpt-5)-search-(?:preview|api)(?:-.*)?"
)
"""OpenAI's search models (with a provider prefix or a dated suffix): every call searches."""
_REQUEST_FEE = re.compile(r"(?:perplexity/)?sonar(?:-pro|-reasoning|-reasoning-pro)?")
"""Perplexity's models that bill a request fee by search context size on every call."""
REQUEST_FEE_DEFAULT_SIZE = "low"


def always_searches(model: str) -> bool:
    return _ALWAYS_SEARCHES.fullmatch(model) is not None


def request_fee(model: str) -> bool:
    """Whether every call of ``model`` is billed one request fee by search context size."""
    return _REQUEST_FEE.fullmatch(model) is not None


def with_searches(usage: Usage, *, stated: bool, requested_size: str | None, model: str) -> Usage:
    """``usage`` with the one search a call made without counting it: when the block ``stated`` no
    count, and the request asked for web search (``requested_size``, its context size) or the model
    always searches; for a model with a request fee, one search request whatever the count.
    Otherwise ``usage`` as it is."""
    if request_fee(model):
        size = usage.search_context_size or requested_size or REQUEST_FEE_DEFAULT_SIZE
        return replace(usage, web_search_requests=1, search_context_size=size)
    if stated or usage.web_search_requests:
        return usage
    if requested_size is None and not always_searches(model):
        return usage
    size = usage.search_context_size or requested_size or DEFAULT_SIZE
    return replace(usage, web_search_requests=1, search_context_size=size)
