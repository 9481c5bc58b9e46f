"""The reconciler's result: what a call said, what it cost, and whether its hold may be settled.

This is the contract between the pure core and everything that does IO (the ledger, the pipeline, the
CLI). It holds counts, never prompt text; the assembled choices do hold completion text, so a result is
kept in memory only and never persisted or logged whole (``to_json`` is for ``billing replay``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from worker.money import Micros


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


class UsageSource(StrEnum):
    REPORTED = "reported"
    ESTIMATED = "estimated"


@dataclass(frozen=True, slots=True)
class Usage:
    """The canonical token counts of a call, whatever shape the provider reported them in.

    ``prompt_tokens`` counts every input token: ``cached_tokens`` (cache reads),
    ``cache_write_tokens`` (cache creation) and ``audio_prompt_tokens`` are parts of it.
    ``completion_tokens`` counts every output token the call is billed for: ``reasoning_tokens`` and
    ``audio_completion_tokens`` are parts of it (the OpenAI convention; a provider that counts
    reasoning outside its completion count is normalised into this one on reading)."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cache_write_tokens: int = 0
    audio_prompt_tokens: int = 0
    audio_completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class Estimate:
    """The tiktoken estimate of a call; ``approximate`` when the model's tokenizer is not known."""

    prompt_tokens: int
    completion_tokens: int
    approximate: bool

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

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "role": self.role,
            "content": self.content,
            "refusal": self.refusal,
            "reasoning_content": self.reasoning_content,
            "tool_calls": [call.to_dict() for call in self.tool_calls],
            "finish_reason": self.finish_reason,
        }


@dataclass(frozen=True, slots=True)
class Result:
    """Everything the worker decided about one call.

    ``charge_micros`` is set for settled results with a price; ``exposure_micros`` is the estimate's
    price for every priced result (null when the model is unpriced). ``usage`` is the reported block,
    ``billed_usage`` the counts the charge was computed from (reported, or the estimate).
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

    @property
    def finish_reasons(self) -> tuple[str | None, ...]:
        return tuple(choice.finish_reason for choice in self.choices)

    @property
    def billed_usage(self) -> Usage | None:
        if self.usage_source is UsageSource.REPORTED:
            return self.usage
        if self.usage_source is UsageSource.ESTIMATED:
            return self.estimate.as_usage()
        return None

    @property
    def unpriced(self) -> bool:
        return "unpriced" in self.anomalies

    def to_json(self) -> dict[str, Any]:
        """The ``billing replay`` document (holds completion text: never log it)."""
        return {
            "request_id": self.request_id,
            "model": self.model,
            "stream": self.stream,
            "outcome": str(self.outcome),
            "reason": None if self.reason is None else str(self.reason),
            "usage_source": None if self.usage_source is None else str(self.usage_source),
            "usage": self.usage_raw,
            "estimate": {
                "prompt_tokens": self.estimate.prompt_tokens,
                "completion_tokens": self.estimate.completion_tokens,
                "approximate": self.estimate.approximate,
            },
            "charge_micros": None if self.charge_micros is None else int(self.charge_micros),
            "exposure_micros": None if self.exposure_micros is None else int(self.exposure_micros),
            "choices": [choice.to_dict() for choice in self.choices],
            "id": self.completion_id,
            "system_fingerprint": self.system_fingerprint,
            "anomalies": list(self.anomalies),
            "error": self.error,
        }


def _count(block: dict[str, Any], key: str) -> int:
    value = block.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return 0


def usage_from_block(block: object) -> Usage | None:
    """Read an OpenAI ``usage`` object; None when it is not one (no integer token counts)."""
    if not isinstance(block, dict):
        return None
    prompt = block.get("prompt_tokens")
    completion = block.get("completion_tokens")
    if not isinstance(prompt, int) or isinstance(prompt, bool) or prompt < 0:
        return None
    if completion is None:
        completion = 0
    if not isinstance(completion, int) or isinstance(completion, bool) or completion < 0:
        return None
    prompt_details = block.get("prompt_tokens_details")
    completion_details = block.get("completion_tokens_details")
    cached = _count(prompt_details, "cached_tokens") if isinstance(prompt_details, dict) else 0
    reasoning = (
        _count(completion_details, "reasoning_tokens")
        if isinstance(completion_details, dict)
        else 0
    )
    return Usage(prompt, completion, min(cached, prompt), min(reasoning, completion))
