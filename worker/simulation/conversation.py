"""The conversation behind a simulated call: model, prompt, the choices the model produces, and
their token counts. Independent of streaming and of faults, so twins can share one.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from worker.core.estimate import CL100K, EncodingTable, estimate_completion, estimate_prompt
from worker.core.result import Choice as CountedChoice
from worker.core.result import ToolCall, Usage
from worker.simulation import prompts

# Where a stream reports usage: a usage-only chunk with ``choices: []`` (OpenAI), on the finish chunk
# (Mistral), or cumulatively on every chunk (vLLM with continuous usage stats).
OPENAI = "openai"
MISTRAL = "mistral"
VLLM = "vllm"

_ALNUM = string.ascii_letters + string.digits


@dataclass(frozen=True, slots=True)
class TrueCounts:
    """How a provider whose tokenizer the worker does not ship counts a call, so the estimate's
    error is known: the worker's own estimate scaled by ``prompt_ppm`` / ``completion_ppm`` (ppm)
    times a noise drawn uniformly within ± ``noise_ppm`` per call; or, with ``encoding``, the
    estimate's rules run with that vocabulary instead of the one the worker picks for the model."""

    prompt_ppm: int = 1_000_000
    completion_ppm: int = 1_000_000
    noise_ppm: int = 0
    encoding: str | None = None


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    weight: float
    served: str  # the model name the provider puts in its chunks
    placements: tuple[str, ...] = (OPENAI,)
    reasoning: bool = False
    caching: bool = False
    provider: str = "openai"  # where the simulated gateway routes it (the request's ``provider``)
    # another tokenizer than the estimator's (``TrueCounts``); None: the prompt heuristic below
    true_counts: TrueCounts | None = None

    @property
    def openai(self) -> bool:
        return self.placements == (OPENAI,)


MODELS = (
    ModelSpec("gpt-4o-mini", 28, "gpt-4o-mini-2024-07-18", caching=True),
    ModelSpec("gpt-4o", 14, "gpt-4o-2024-08-06", caching=True),
    ModelSpec("gpt-4.1", 8, "gpt-4.1-2025-04-14", caching=True),
    ModelSpec("gpt-4.1-mini", 12, "gpt-4.1-mini-2025-04-14", caching=True),
    ModelSpec("o3", 4, "o3-2025-04-16", reasoning=True, caching=True),
    ModelSpec("o4-mini", 6, "o4-mini-2025-04-16", reasoning=True, caching=True),
    ModelSpec("gpt-4", 2, "gpt-4-0613"),
    ModelSpec("gpt-3.5-turbo", 5, "gpt-3.5-turbo-0125"),
    # The gateway's self-hosted vLLM, started with ``--served-model-name llama-3.1-8b``: it
    # answers the name the book prices. Without it vLLM answers its model path
    # (``meta-llama/Llama-3.1-8B-Instruct``), which the book prices only as an alias of the row:
    # the model served is the model billed (``worker.core.substitution``), unpriced otherwise.
    ModelSpec("llama-3.1-8b", 10, "llama-3.1-8b", (VLLM, OPENAI), provider="vllm"),
    # Through OpenAI-compatible gateways, counted by tokenizers the worker does not ship: the
    # calibration's proof (``make demo`` prints their estimate's error before and after).
    ModelSpec(
        "claude-haiku-4-5", 7, "claude-haiku-4-5", provider="anthropic",
        true_counts=TrueCounts(1_180_000, 1_120_000, 60_000),
    ),
    ModelSpec(
        "deepseek-chat", 7, "deepseek-chat", provider="deepseek",
        true_counts=TrueCounts(1_000_000, 1_000_000, 30_000, encoding=CL100K),
    ),
    ModelSpec(
        "mixtral-8x7b-instruct", 0.6, "open-mixtral-8x7b", (MISTRAL,), provider="mistral"
    ),  # not in the book
)  # fmt: skip
_MODEL_WEIGHTS = [m.weight for m in MODELS]


@dataclass(slots=True)
class Choice:
    index: int
    role_delta: dict[str, Any]
    deltas: list[dict[str, Any]]  # one per streamed token
    finish_reason: str
    message: dict[str, Any]


@dataclass(slots=True)
class Conversation:
    """What the model was asked and answered; independent of streaming and of faults."""

    model: ModelSpec
    placement: str
    account_id: str
    created_at: datetime
    messages: list[dict[str, str]]
    tools: list[dict[str, Any]]
    n: int
    max_tokens: int | None
    temperature: float | None
    seed: int | None
    choices: list[Choice]
    prompt_tokens: int
    cached_tokens: int
    reasoning_tokens: int
    fingerprint: str
    features: list[str] = field(default_factory=list)
    # the provider's count of the whole visible output when it is not one token per delta
    # (``TrueCounts``); a part of the output is counted in proportion
    true_visible: int | None = None

    @property
    def visible_tokens(self) -> int:
        return sum(len(c.deltas) for c in self.choices)

    def usage(self, visible: int | None = None) -> Usage:
        shown = self.visible_tokens if visible is None else visible
        if self.true_visible is not None:
            whole = self.visible_tokens
            shown = self.true_visible if whole == 0 else self.true_visible * shown // whole
        return Usage(
            self.prompt_tokens,
            shown + self.reasoning_tokens,
            self.cached_tokens,
            self.reasoning_tokens,
        )

    def usage_block(self, visible: int | None = None) -> dict[str, Any]:
        usage = self.usage(visible)
        block: dict[str, Any] = {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
        }
        if self.model.openai:
            block["prompt_tokens_details"] = {
                "cached_tokens": usage.cached_tokens,
                "audio_tokens": 0,
            }
            block["completion_tokens_details"] = {
                "reasoning_tokens": usage.reasoning_tokens,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            }
        return block


def _counted(choices: list[Choice]) -> list[CountedChoice]:
    """The choices as the worker assembles them, for its estimate."""
    counted = []
    for choice in choices:
        message = choice.message
        calls = [
            ToolCall(i, name=call["function"]["name"], arguments=call["function"]["arguments"])
            for i, call in enumerate(message.get("tool_calls") or ())
        ]
        counted.append(
            CountedChoice(
                choice.index,
                content=message.get("content"),
                refusal=message.get("refusal"),
                tool_calls=calls,
            )
        )
    return counted


def _scaled(rng: random.Random, tokens: int, ppm: int, noise_ppm: int) -> int:
    factor = ppm + (rng.randint(-noise_ppm, noise_ppm) if noise_ppm else 0)
    return max(0, (tokens * factor + 500_000) // 1_000_000)


def true_counts(
    rng: random.Random,
    spec: ModelSpec,
    msgs: list[dict[str, str]],
    tool_defs: list[dict[str, Any]],
    choices: list[Choice],
) -> tuple[int, int]:
    """(prompt, visible completion) as the provider of ``spec`` counts them (``TrueCounts``)."""
    counts = spec.true_counts
    if counts is None:
        raise ValueError(f"{spec.name} is counted by the prompt heuristic, not TrueCounts")
    table = None if counts.encoding is None else EncodingTable({spec.name: counts.encoding})
    kwargs = {} if table is None else {"table": table}
    prompt = estimate_prompt(spec.name, msgs, tool_defs, **kwargs)
    completion = estimate_completion(spec.name, _counted(choices), **kwargs)
    return (
        _scaled(rng, prompt, counts.prompt_ppm, counts.noise_ppm),
        _scaled(rng, completion, counts.completion_ppm, counts.noise_ppm),
    )


def token(rng: random.Random, k: int) -> str:
    return "".join(rng.choices(_ALNUM, k=k))


def rfc3339(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


def _text_choice(index: int, tokens: list[str], finish: str, openai: bool, refusal: bool) -> Choice:
    channel = "refusal" if refusal else "content"
    role: dict[str, Any] = {"role": "assistant", "content": None if refusal else ""}
    if openai:
        role["refusal"] = "" if refusal else None
    elif refusal:
        role["refusal"] = ""
    text = "".join(tokens)
    message: dict[str, Any] = {"role": "assistant", "content": None if refusal else text}
    if openai:
        message.update({"refusal": text if refusal else None, "annotations": []})
    elif refusal:
        message["refusal"] = text
    return Choice(index, role, [{channel: t} for t in tokens], finish, message)


def _tool_choice(rng: random.Random, tools: list[dict[str, Any]], openai: bool) -> Choice:
    count = rng.randint(2, 3) if rng.random() < 0.3 else 1
    deltas: list[dict[str, Any]] = []
    calls = []
    for position in range(count):
        tool = rng.choice(tools)
        call_id = "call_" + token(rng, 24)
        name = tool["function"]["name"]
        arguments = prompts.tool_arguments(rng, tool)
        calls.append(
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        )
        header = {"name": name, "arguments": ""}
        deltas.append(
            {
                "tool_calls": [
                    {"index": position, "id": call_id, "type": "function", "function": header}
                ]
            }
        )
        for piece in prompts.fragments(rng, arguments):
            deltas.append({"tool_calls": [{"index": position, "function": {"arguments": piece}}]})
    role: dict[str, Any] = {"role": "assistant", "content": None}
    message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": calls}
    if openai:
        role["refusal"] = None
        message.update({"refusal": None, "annotations": []})
    return Choice(0, role, deltas, "tool_calls", message)


def _output_length(rng: random.Random) -> int:
    if rng.random() < 0.02:
        return rng.randint(1500, 4000)
    return prompts.lognormal_int(rng, 4.4, 1.1, 1, 4000)


def conversation(
    rng: random.Random, start: datetime, index: int, account_weights: list[float]
) -> Conversation:
    model = rng.choices(MODELS, weights=_MODEL_WEIGHTS)[0]
    placement = rng.choice(model.placements)
    account = rng.choices(range(1, len(account_weights) + 1), weights=account_weights)[0]
    created_at = start + timedelta(milliseconds=index * 25 + rng.randint(0, 20))
    msgs = prompts.messages(rng)
    tool_defs = prompts.tools(rng) if rng.random() < 0.15 else []
    n = rng.randint(2, 3) if not tool_defs and rng.random() < 0.03 else 1
    temperature = None if model.reasoning else rng.choice((0, 0.2, 0.7, 1.0, None))
    seed = rng.randint(0, 2**31) if rng.random() < 0.1 else None
    max_tokens = (
        rng.choice((64, 256, 512, 1024, 4096))
        if not model.reasoning and rng.random() < 0.3
        else None
    )
    features = []
    choices: list[Choice] = []
    if tool_defs and rng.random() < 0.7:
        choices.append(_tool_choice(rng, tool_defs, model.openai))
        features.append("parallel_tools" if len(choices[0].message["tool_calls"]) > 1 else "tools")
    elif model.openai and rng.random() < 0.02:
        choices.append(_text_choice(0, prompts.refusal_tokens(), "stop", True, refusal=True))
        features.append("refusal")
    else:
        for i in range(n):
            length, finish = _output_length(rng), "stop"
            if max_tokens is not None and length >= max_tokens:
                length, finish = max_tokens, "length"
                features.append("length")
            tokens = prompts.completion_tokens(rng, length)
            choices.append(_text_choice(i, tokens, finish, model.openai, refusal=False))
        if n > 1:
            features.append("multi_choice")
    if tool_defs and "tools" not in features and "parallel_tools" not in features:
        features.append("tools_offered")
    prompt = prompts.prompt_tokens(msgs, tool_defs)
    cached = 0
    if model.caching and prompt >= 1024 and rng.random() < 0.35:
        cached = 1024 + 128 * rng.randint(0, (prompt - 1024) // 128)
        features.append("cached")
    reasoning = 0
    if model.reasoning:
        reasoning = 64 * prompts.lognormal_int(rng, 1.5, 1.0, 1, 300)
        features.append("reasoning")
    if model.name == MODELS[-1].name:
        features.append("unpriced")
    true_visible = None
    if model.true_counts is not None:
        prompt, true_visible = true_counts(rng, model, msgs, tool_defs, choices)
        features.append("foreign_tokenizer")
    return Conversation(
        model=model,
        placement=placement,
        account_id=f"acct_{account}",
        created_at=created_at,
        messages=msgs,
        tools=tool_defs,
        n=len(choices),
        max_tokens=max_tokens,
        temperature=temperature,
        seed=seed,
        choices=choices,
        prompt_tokens=prompt,
        cached_tokens=cached,
        reasoning_tokens=reasoning,
        fingerprint="fp_" + "".join(rng.choices("0123456789abcdef", k=10)),
        features=features,
        true_visible=true_visible,
    )


def completion_id(rng: random.Random, conv: Conversation) -> str:
    if conv.placement == MISTRAL:
        return "".join(rng.choices("0123456789abcdef", k=32))
    return "chatcmpl-" + token(rng, 29)
