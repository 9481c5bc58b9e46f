"""The reconciler's result: what a call said, what it cost, and whether its hold may be settled.

This is the contract between the pure core and everything that does IO (the ledger, the pipeline, the
CLI). It holds counts, never prompt text; the assembled choices do hold completion text, so a result is
kept in memory only and never persisted or logged whole (``to_json`` is for ``billing replay``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from worker.core.money import Micros

if TYPE_CHECKING:
    from worker.core.calibration import Factors


class Outcome(StrEnum):
    SETTLED = "settled"
    UNSETTLED = "unsettled"
    VOID = "void"


class Reason(StrEnum):
    """Why a call is unsettled. ``UNPRICED`` is decided by the ledger, not the stream rules."""

    ERROR_FINISH = "error_finish"
    INCOMPLETE = "incomplete"
    MISSING_USAGE = "missing_usage"
    UNPRICED = "unpriced"
    INCONSISTENT_USAGE = "inconsistent_usage"  # total_tokens disagrees with its parts
    IMPLAUSIBLE_USAGE = "implausible_usage"  # counts no call can have (``Result.usage_problem``)
    # the worker refused the call's metadata or stream: recorded from what could be read of it,
    # its exposure the hold (``worker.consumer.salvage``)
    UNREADABLE = "unreadable"
    # a usage field the book cannot price holds a count (``worker.core.usage``: its field list); the
    # exposure is the price of the parts that were read, a lower bound
    UNPRICED_COMPONENT = "unpriced_component"


# Finish reasons that mean the generation broke off: DeepSeek's ``insufficient_system_resource``
# is an interrupted generation, not a clean end.
ERROR_FINISHES = frozenset({"error", "insufficient_system_resource"})


class UsageSource(StrEnum):
    REPORTED = "reported"
    ESTIMATED = "estimated"


@dataclass(frozen=True, slots=True)
class Usage:
    """The canonical token counts of a call, whatever shape the provider reported them in.

    ``prompt_tokens`` counts every input token: ``cached_tokens`` (cache reads),
    ``cache_write_tokens`` (cache creation), ``audio_prompt_tokens`` and ``image_prompt_tokens`` are
    parts of it, and ``cache_write_1h_tokens`` (1-hour cache writes) a part of the cache writes.
    ``completion_tokens`` counts every output token the call is billed for: ``reasoning_tokens`` and
    ``audio_completion_tokens`` are parts of it (the OpenAI convention; a provider that counts
    reasoning outside its completion count is normalised into this one on reading).

    ``citation_tokens`` (Perplexity: tokens of the search results read, billed apart) are a part of
    ``prompt_tokens`` too.

    ``web_search_requests`` counts the call's billable web search requests (a fee each, not
    tokens), at ``search_context_size`` (``low``, ``medium``, ``high``) when the provider says.
    ``inference_geo`` is where the provider says inference ran (Anthropic: ``us``, ``global``),
    lower-cased; None when it does not say.

    ``image_completion_tokens`` (image output tokens: GPT Image models) are a part of
    ``completion_tokens``, priced at a row's ``image_output`` rate. ``images`` counts the images a
    call generated that are billed per image (DALL·E: no tokens reported), at ``image_size`` and
    ``image_quality`` (``1024x1024``, ``hd``) when the request or the response says; a row prices
    them by its ``per_image`` prices (``worker.core.images``)."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cache_write_tokens: int = 0
    audio_prompt_tokens: int = 0
    audio_completion_tokens: int = 0
    cache_write_1h_tokens: int = 0
    image_prompt_tokens: int = 0
    web_search_requests: int = 0
    search_context_size: str | None = None
    citation_tokens: int = 0
    inference_geo: str | None = None
    image_completion_tokens: int = 0
    images: int = 0
    image_size: str | None = None
    image_quality: str | None = None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class Estimate:
    """The tiktoken estimate of a call; ``approximate`` when the model's tokenizer is not known."""

    prompt_tokens: int
    completion_tokens: int
    approximate: bool
    # the call's content segment (``worker.core.segments``), which picks its calibration factor
    segment: str = "other"

    def as_usage(self) -> Usage:
        return Usage(self.prompt_tokens, self.completion_tokens)


@dataclass(slots=True)
class ToolCall:
    index: int
    id: str | None = None
    type: str | None = None
    name: str | None = None
    arguments: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "id": self.id,
            "type": self.type,
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(slots=True)
class FunctionCall:
    """A legacy ``function_call`` (before ``tool_calls``): one per choice, name and arguments."""

    name: str | None = None
    arguments: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}


@dataclass(slots=True)
class Choice:
    """One assembled choice of a completion."""

    index: int
    role: str | None = None
    content: str | None = None
    refusal: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    logprobs_content: list[Any] | None = None
    logprobs_refusal: list[Any] | None = None
    function_call: FunctionCall | None = None

    def to_dict(self) -> dict[str, Any]:
        document = {
            "index": self.index,
            "role": self.role,
            "content": self.content,
            "refusal": self.refusal,
            "reasoning_content": self.reasoning_content,
            "tool_calls": [call.to_dict() for call in self.tool_calls],
            "finish_reason": self.finish_reason,
        }
        if self.function_call is not None:
            document["function_call"] = self.function_call.to_dict()
        return document


@dataclass(frozen=True, slots=True)
class Result:
    """Everything the worker decided about one call.

    ``charge_micros`` is set for settled results with a price; ``exposure_micros`` is the estimate's
    price for every priced result (null when the model is unpriced), or the larger reading's price for
    ``inconsistent_usage``, or the price of the parts that were read for ``unpriced_component``.
    ``usage`` is the reported block read into canonical counts (``usage_shape`` names the shape it
    came in), ``billed_usage`` the counts the charge was computed from (reported, or the estimate).
    ``usage_problem`` says why a block could not be billed (implausible, inconsistent, or which
    fields have no price); ``provider_cost_micros`` is the provider's own charge when it sent one.
    ``unit_prices`` records which rates the charge was computed at (``billing show`` prints them).
    """

    request_id: str
    account_id: str
    model: str
    stream: bool
    created_at: datetime
    reserved_micros: Micros
    outcome: Outcome
    reason: Reason | None
    usage_source: UsageSource | None
    usage: Usage | None
    usage_raw: dict[str, Any] | None
    estimate: Estimate
    charge_micros: Micros | None
    exposure_micros: Micros | None
    choices: tuple[Choice, ...]
    completion_id: str | None
    system_fingerprint: str | None
    anomalies: tuple[str, ...]
    error: str | None = None
    mixed_id_count: int = 0
    provider: str | None = None
    service_tier: str | None = None
    usage_shape: str | None = None
    usage_problem: str | None = None
    provider_cost_micros: Micros | None = None
    frames_after_done: int = 0
    usage_after_done: bool = False
    n_requested: int = 1
    # the rates the charge was computed at, as JSON text (``Price.unit_prices``); None when no
    # charge was computed
    unit_prices: str | None = None
    # a call settled at its estimate: the calibration factors (``worker.core.calibration``) learnt
    # for its provider and model when it was reconciled, which it is billed at; None otherwise
    calibration: Factors | None = None

    @property
    def finish_reasons(self) -> tuple[str | None, ...]:
        return tuple(choice.finish_reason for choice in self.choices)

    @property
    def billed_usage(self) -> Usage | None:
        if self.usage_source is UsageSource.REPORTED:
            return self.usage
        if self.usage_source is UsageSource.ESTIMATED:
            if self.calibration is not None:
                return self.calibration.usage(self.estimate)
            return self.estimate.as_usage()
        return None

    @property
    def unpriced(self) -> bool:
        return "unpriced" in self.anomalies

    @property
    def recorded(self) -> tuple[Outcome, Reason | None]:
        """The outcome and reason the ledger records for this result: a settled result without a
        charge (its model is unpriced) is kept unsettled ``unpriced``."""
        if self.outcome is Outcome.SETTLED and self.charge_micros is None:
            return Outcome.UNSETTLED, Reason.UNPRICED
        return self.outcome, self.reason

    def to_json(self) -> dict[str, Any]:
        """The ``billing replay`` document (holds completion text: never log it): the outcome and
        reason are the ones the ledger records."""
        outcome, reason = self.recorded
        usage = self.usage
        return {
            "request_id": self.request_id,
            "model": self.model,
            "provider": self.provider,
            "stream": self.stream,
            "outcome": str(outcome),
            "reason": None if reason is None else str(reason),
            "usage_source": (
                None
                if self.usage_source is None or outcome is not Outcome.SETTLED
                else str(self.usage_source)
            ),
            "usage": self.usage_raw,
            "usage_shape": self.usage_shape,
            "usage_counts": None if usage is None else _counts(usage),
            "usage_problem": self.usage_problem,
            "service_tier": self.service_tier,
            "provider_cost_micros": (
                None if self.provider_cost_micros is None else int(self.provider_cost_micros)
            ),
            "estimate": {
                "prompt_tokens": self.estimate.prompt_tokens,
                "completion_tokens": self.estimate.completion_tokens,
                "approximate": self.estimate.approximate,
            },
            "calibration": (
                None
                if self.calibration is None
                else {
                    "version": self.calibration.version,
                    "prompt_factor_ppm": self.calibration.prompt_ppm,
                    "completion_factor_ppm": self.calibration.completion_ppm,
                }
            ),
            "charge_micros": None if self.charge_micros is None else int(self.charge_micros),
            "exposure_micros": None if self.exposure_micros is None else int(self.exposure_micros),
            "choices": [choice.to_dict() for choice in self.choices],
            "id": self.completion_id,
            "system_fingerprint": self.system_fingerprint,
            "anomalies": list(self.anomalies),
            "error": self.error,
        }


def _counts(usage: Usage) -> dict[str, int]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "cached_tokens": usage.cached_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "audio_prompt_tokens": usage.audio_prompt_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
        "audio_completion_tokens": usage.audio_completion_tokens,
        "cache_write_1h_tokens": usage.cache_write_1h_tokens,
        "image_prompt_tokens": usage.image_prompt_tokens,
        "web_search_requests": usage.web_search_requests,
        "citation_tokens": usage.citation_tokens,
        "image_completion_tokens": usage.image_completion_tokens,
        "images": usage.images,
    }
