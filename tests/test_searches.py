"""Web searches a call is billed for that its usage does not count (``worker.core.searches``), from the
request's ``web_search_options`` and OpenAI's search models, through the gateway's request entry
and the reconciler.

Prices are the bundled list's (LiteLLM 1.110.2): ``gpt-4o-search-preview`` 2.5e-06 / 1e-05 per token
and ``search_context_cost_per_query`` 0.025 at every size; ``gpt-4o`` has no search price.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import pytest

from worker.core.errors import RequestMetaError
from worker.core.prices import load_price_book
from worker.core.reconcile import reconcile_response
from worker.core.request import request_from_dict
from worker.core.result import Outcome, Reason, Usage
from worker.core.searches import always_searches, with_searches
from worker.gateway.metadata import CallInfo, request_entry, search_options

AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
BOOK = load_price_book()


def _meta(model: str, **extra: Any) -> Any:
    return request_from_dict(
        {
            "request_id": f"search-{model}-{len(extra)}",
            "account_id": "acct_search",
            "model": model,
            "stream": False,
            "reserved_micros": 1_000_000,
            "created_at": AT.isoformat(),
            "messages": [{"role": "user", "content": "news today?"}],
            "provider": "openai",
            **extra,
        }
    )


def _body(model: str, usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1764590400,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "A headline."},
                "finish_reason": "stop",
            }
        ],
        "usage": usage,
    }


USAGE = {"prompt_tokens": 100, "completion_tokens": 200, "total_tokens": 300}


@pytest.mark.parametrize(
    ("model", "searches"),
    [
        ("gpt-4o-search-preview", True),
        ("gpt-4o-mini-search-preview-2025-03-11", True),
        ("gpt-5-search-api", True),
        ("openai/gpt-4o-search-preview", True),
        ("gpt-4o", False),
        ("o3-deep-research", False),  # its searches are Responses tool calls, counted there
        ("my-gpt-4o-search-preview-clone", False),
    ],
)
def test_which_models_search_on_every_call(model: str, searches: bool) -> None:
    assert always_searches(model) is searches


def test_a_stated_count_is_the_providers_word() -> None:
    usage = Usage(10, 10)
    assert with_searches(usage, stated=True, requested_size="high", model="x") == usage
    assert with_searches(usage, stated=False, requested_size=None, model="gpt-4o") == usage
    assert with_searches(usage, stated=False, requested_size="high", model="gpt-4o") == Usage(
        10, 10, web_search_requests=1, search_context_size="high"
    )
    assert with_searches(
        usage, stated=False, requested_size=None, model="gpt-4o-search-preview"
    ) == Usage(10, 10, web_search_requests=1, search_context_size="medium")


def test_a_search_model_call_is_billed_its_search() -> None:
    """100 * 2.50 + 200 * 10.00 + 25,000 = 27,250 micro-USD (the token price alone: 2,250)."""
    meta = _meta("gpt-4o-search-preview")
    result = reconcile_response(meta, 200, _body("gpt-4o-search-preview", USAGE), BOOK)
    assert (result.outcome, result.charge_micros) == (Outcome.SETTLED, 27_250)
    assert result.usage is not None and result.usage.web_search_requests == 1


def test_a_search_model_call_without_usage_is_billed_its_search_too() -> None:
    """No usage block (a body without one, settled at the estimate): the estimate counts no
    search, and the call still made one: its fee is in the charge, 25,000 micro-USD above the
    estimate's tokens at gpt-4o-search-preview's prices."""
    body = {k: v for k, v in _body("gpt-4o-search-preview", USAGE).items() if k != "usage"}
    result = reconcile_response(_meta("gpt-4o-search-preview"), 200, body, BOOK)
    assert result.outcome is Outcome.SETTLED and result.charge_micros is not None
    estimate = result.estimate
    tokens = estimate.prompt_tokens * Decimal("2.50") + estimate.completion_tokens * Decimal(
        "10.00"
    )
    assert result.charge_micros == int(tokens.quantize(Decimal(1), ROUND_HALF_UP)) + 25_000


def test_a_search_the_row_has_no_fee_for_is_unpriced_component_not_free() -> None:
    """gpt-4o asked for web search: the list's gpt-4o row has no search fee; exposure is the
    tokens: 100 * 2.50 + 200 * 10.00 = 2,250 (a lower bound)."""
    meta = _meta("gpt-4o", web_search_options={})
    result = reconcile_response(meta, 200, _body("gpt-4o", USAGE), BOOK)
    assert (result.outcome, result.reason) == (Outcome.UNSETTLED, Reason.UNPRICED_COMPONENT)
    assert result.exposure_micros == 2_250
    assert "web_search_requests=1" in (result.usage_problem or "")
    plain = reconcile_response(_meta("gpt-4o"), 200, _body("gpt-4o", USAGE), BOOK)
    assert (plain.outcome, plain.charge_micros) == (Outcome.SETTLED, 2_250)


def test_a_usage_block_stating_no_search_is_believed() -> None:
    """Anthropic through an OpenAI-shaped gateway: the request asked for web search, the model
    chose not to, and its usage says 0: no search billed (claude-sonnet-4-5: 100 * 3 + 200 * 15)."""
    meta = _meta("claude-sonnet-4-5", web_search_options={"search_context_size": "high"})
    block = {
        "input_tokens": 100,
        "output_tokens": 200,
        "server_tool_use": {"web_search_requests": 0},
    }
    result = reconcile_response(meta, 200, _body("claude-sonnet-4-5", block), BOOK)
    assert (result.outcome, result.charge_micros) == (Outcome.SETTLED, 3_300)


@pytest.mark.parametrize(
    "options",
    ["medium", [], {"search_context_size": "huge"}, {"search_context_size": 2}],
)
def test_web_search_options_are_validated_at_the_boundary(options: Any) -> None:
    with pytest.raises(RequestMetaError, match="web_search_options"):
        _meta("gpt-4o", web_search_options=options)


def test_the_gateway_publishes_web_search_options() -> None:
    body = {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "hi"}],
        "web_search_options": {"search_context_size": "low"},
    }
    entry = request_entry(
        body,
        CallInfo(account_id="acct_1", provider="openai"),
        request_id="r-1",
        reserved_micros=10,
        created_at=AT,
        idempotency_key=None,
        streamed=False,
    )
    assert request_from_dict(entry).web_search == "low"
    body.pop("web_search_options")
    entry = request_entry(
        body,
        CallInfo(account_id="acct_1", provider="openai"),
        request_id="r-2",
        reserved_micros=10,
        created_at=AT,
        idempotency_key=None,
        streamed=False,
    )
    assert "web_search_options" not in entry and request_from_dict(entry).web_search is None


@pytest.mark.parametrize(
    ("given", "published", "size"),
    [
        (None, None, None),
        ({"search_context_size": "high"}, {"search_context_size": "high"}, "high"),
        ({}, {}, "medium"),
        ("medium", {}, "medium"),  # malformed: still a request for web search
        ({"search_context_size": "huge", "x": 1}, {}, "medium"),
    ],
)
def test_the_litellm_hook_publishes_search_options_the_worker_accepts(
    given: Any, published: Any, size: str | None
) -> None:
    """The LiteLLM proxy may serve a request the ASGI middleware would refuse with 400: its entry
    must still be one the worker reads, the search billed, never a refused entry."""
    assert search_options(given) == published
    extra = {} if published is None else {"web_search_options": published}
    assert _meta("gpt-4o", **extra).web_search == size
