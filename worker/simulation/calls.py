"""Simulated gateway calls: pure functions of a seed, an index and the fault rates.

Each call draws from its own ``random.Random`` seeded with ``"{seed}:{index}"``, so a call does not
depend on the calls before it, the same seed gives the same calls on every machine, and a plan can be
produced lazily (``iter_calls``) for runs too large to hold in memory.

A call is generated in three steps: the conversation (model, prompt, the choices the model produces,
their token counts), then the wire (the operations a gateway performs, bent by the call's fault), then
the expected fate, derived from what was put on the wire.
"""

from __future__ import annotations

import random
import string
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from worker.money import Micros
from worker.prices import PriceBook, load_price_book
from worker.result import Usage
from worker.simulation import expected as fate
from worker.simulation import prompts
from worker.simulation.expected import Expected
from worker.simulation.faults import (
    DROPPED_CONNECTION,
    DUPLICATE_ENTRIES,
    ERROR_FINISH,
    ERROR_OBJECT,
    GATEWAY_CRASH,
    HTTP_ERROR,
    LATE_USAGE,
    MALFORMED,
    MISSING_USAGE,
    NO_FAULTS,
    FaultRates,
)
from worker.simulation.wire import (
    DONE,
    ChunkHeader,
    Close,
    Deferred,
    Frames,
    Notify,
    Op,
    Open,
    Response,
    choice_delta,
    group_entries,
    sse,
)

DEFAULT_START = datetime(2025, 7, 1, tzinfo=UTC)
STREAM_SHARE = 0.75
PASSTHROUGH_SHARE = 0.15  # streamed calls whose client did not ask for usage
PAIR_RATE = 0.06  # chance that two consecutive SSE events share one gateway record

# Where a stream reports usage: a usage-only chunk with ``choices: []`` (OpenAI), on the finish chunk
# (Mistral), or cumulatively on every chunk (vLLM with continuous usage stats).
OPENAI = "openai"
MISTRAL = "mistral"
VLLM = "vllm"

# Faults that cut or break a stream: cumulative usage on every chunk would contradict them.
_BROKEN = frozenset({ERROR_FINISH, DROPPED_CONNECTION, MISSING_USAGE, ERROR_OBJECT, LATE_USAGE})
_ALNUM = string.ascii_letters + string.digits


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    weight: float
    served: str  # the model name the provider puts in its chunks
    placements: tuple[str, ...] = (OPENAI,)
    reasoning: bool = False
    caching: bool = False

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
    ModelSpec("llama-3.1-8b", 10, "meta-llama/Llama-3.1-8B-Instruct", (VLLM, OPENAI)),
    ModelSpec("mixtral-8x7b-instruct", 0.6, "open-mixtral-8x7b", (MISTRAL,)),  # not in the book
)
_MODEL_WEIGHTS = [m.weight for m in MODELS]

_ERROR_BODIES = (
    (500, {"message": "The server had an error while processing your request.", "type": "server_error"}),
    (503, {"message": "The engine is currently overloaded, please try again later.", "type": "server_error"}),
    (429, {"message": "Rate limit reached for requests per min.", "type": "requests", "code": "rate_limit_exceeded"}),
    (400, {"message": "This model's maximum context length is 128000 tokens.", "type": "invalid_request_error", "code": "context_length_exceeded"}),
)  # fmt: skip
_BAD_GATEWAY = (
    b"<html><head><title>502 Bad Gateway</title></head><body>502 Bad Gateway</body></html>"
)
_UNKNOWN_KINDS = ("cancel", "heartbeat", "opened", "retry")


@dataclass(frozen=True, slots=True)
class SimCall:
    """One simulated call: its request metadata, what the gateway writes, and its expected fate.

    ``meta`` is None for an orphan close (a close for a request whose stream never existed). ``ops``
    hold completion text and ``meta`` prompt text: never log either. ``twin_of`` names the other call
    of a streamed / non-streamed pair with identical output and usage.
    """

    index: int
    request_id: str
    stream: bool
    fault: str | None
    variant: str | None
    meta: dict[str, Any] | None
    ops: tuple[Op, ...]
    expected: Expected
    features: tuple[str, ...] = ()
    twin_of: str | None = None

    @property
    def kind(self) -> str:
        if self.meta is None:
            return "orphan"
        return "stream" if self.stream else "response"


@dataclass(slots=True)
class _Choice:
    index: int
    role_delta: dict[str, Any]
    deltas: list[dict[str, Any]]  # one per streamed token
    finish_reason: str
    message: dict[str, Any]


@dataclass(slots=True)
class _Conversation:
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
    choices: list[_Choice]
    prompt_tokens: int
    cached_tokens: int
    reasoning_tokens: int
    fingerprint: str
    features: list[str] = field(default_factory=list)

    @property
    def visible_tokens(self) -> int:
        return sum(len(c.deltas) for c in self.choices)

    def usage(self, visible: int | None = None) -> Usage:
        shown = self.visible_tokens if visible is None else visible
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


def _token(rng: random.Random, k: int) -> str:
    return "".join(rng.choices(_ALNUM, k=k))


def rfc3339(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


def _text_choice(
    index: int, tokens: list[str], finish: str, openai: bool, refusal: bool
) -> _Choice:
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
    return _Choice(index, role, [{channel: t} for t in tokens], finish, message)


def _tool_choice(rng: random.Random, tools: list[dict[str, Any]], openai: bool) -> _Choice:
    count = rng.randint(2, 3) if rng.random() < 0.3 else 1
    deltas: list[dict[str, Any]] = []
    calls = []
    for position in range(count):
        tool = rng.choice(tools)
        call_id = "call_" + _token(rng, 24)
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
    return _Choice(0, role, deltas, "tool_calls", message)


def _output_length(rng: random.Random) -> int:
    if rng.random() < 0.02:
        return rng.randint(1500, 4000)
    return prompts.lognormal_int(rng, 4.4, 1.1, 1, 4000)


def _conversation(
    rng: random.Random, start: datetime, index: int, account_weights: list[float]
) -> _Conversation:
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
    choices: list[_Choice] = []
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
    return _Conversation(
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
    )


def _reserve(rng: random.Random, conv: _Conversation, prices: PriceBook) -> Micros:
    """A hold a bit above the cost; one call in ten is under-reserved so settling must true up."""
    cost = prices.charge(conv.model.name, conv.usage(), conv.created_at)
    base = int(cost) if cost is not None else 2 * conv.usage().total_tokens
    if rng.random() < 0.1:
        return Micros(int(base * rng.uniform(0.4, 0.95)))
    return Micros(int(base * rng.uniform(1.1, 1.8)) + rng.randint(1, 200))


def _interleave(rng: random.Random, choices: list[_Choice]) -> list[tuple[int, dict | None]]:
    """Deltas of all choices in arrival order; ``None`` marks a choice's finish chunk."""
    if len(choices) == 1:
        return [(0, d) for d in choices[0].deltas] + [(0, None)]
    position = {c.index: 0 for c in choices}
    by_index = {c.index: c for c in choices}
    items: list[tuple[int, dict | None]] = []
    while position:
        index = rng.choice(sorted(position))
        choice = by_index[index]
        items.append((index, choice.deltas[position[index]]))
        position[index] += 1
        if position[index] == len(choice.deltas):
            items.append((index, None))
            del position[index]
    return items


@dataclass(slots=True)
class _Stream:
    """The SSE events of one streamed call, and what they add up to."""

    events: list[str]
    finished: bool
    errored: bool
    usage: Usage | None  # the final usage block among ``events``
    late_entry: str | None = None  # written after the close (late_usage)


def _stream(
    rng: random.Random,
    conv: _Conversation,
    completion_id: str,
    *,
    include_usage: bool,
    fault: str | None,
    cut: bool,
) -> _Stream:
    placement = conv.placement
    cut = cut or fault in (ERROR_FINISH, ERROR_OBJECT)
    if placement == VLLM and (fault in _BROKEN or cut):
        placement = OPENAI
    usage_wanted = include_usage and fault not in (MISSING_USAGE, LATE_USAGE)
    header = ChunkHeader(
        completion_id,
        int(conv.created_at.timestamp()),
        conv.model.served,
        conv.fingerprint,
        "default" if conv.model.openai else None,
        usage_null=include_usage and conv.model.openai,
    )
    cumulative = placement == VLLM and include_usage
    events: list[str] = []
    shown = 0

    def running() -> dict[str, Any] | None:
        return conv.usage_block(shown) if cumulative else None

    for choice in conv.choices:
        events.append(header.chunk([choice_delta(choice.index, choice.role_delta)], running()))
    items = _interleave(rng, conv.choices)
    stop = len(items)
    if cut:
        first_finish = next(i for i, (_, d) in enumerate(items) if d is None)
        stop = rng.randint(1, first_finish) if first_finish else 0
    finishes_left = len(conv.choices)
    for choice_index, delta in items[:stop]:
        if delta is None:
            finishes_left -= 1
            reason = conv.choices[choice_index].finish_reason
            usage = running()
            if placement == MISTRAL and usage_wanted and not finishes_left:
                usage = conv.usage_block()
            events.append(header.chunk([choice_delta(choice_index, {}, reason)], usage))
        else:
            shown += 1
            events.append(header.chunk([choice_delta(choice_index, delta)], running()))
    if fault == ERROR_OBJECT:
        error = {"message": "The server had an error while processing your request. Sorry!",
                 "type": "server_error", "param": None, "code": None}  # fmt: skip
        events.append(sse({"error": error}))
        return _Stream(events, finished=False, errored=True, usage=None)
    if fault == ERROR_FINISH:
        with_usage = include_usage and rng.random() < 0.2
        for index in range(len(conv.choices)):  # the cut came before any finish
            events.append(header.chunk([choice_delta(index, {}, "error")]))
        if with_usage:
            events.append(header.chunk([], conv.usage_block(shown)))
        events.append(DONE)
        return _Stream(events, False, True, conv.usage(shown) if with_usage else None)
    if cut:  # dropped connection or a gateway crash: the stream just stops
        return _Stream(events, finished=False, errored=False, usage=None)
    if fault == LATE_USAGE:
        late = header.chunk([], conv.usage_block()) + DONE
        return _Stream(events, True, False, conv.usage(), late_entry=late)
    reported = None
    if usage_wanted:
        reported = conv.usage()
        if placement != MISTRAL:
            events.append(header.chunk([], conv.usage_block()))
    events.append(DONE)
    return _Stream(events, finished=True, errored=False, usage=reported)


def _response_body(conv: _Conversation, completion_id: str) -> bytes:
    body: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(conv.created_at.timestamp()),
        "model": conv.model.served,
        "choices": [
            {
                "index": c.index,
                "message": c.message,
                "logprobs": None,
                "finish_reason": c.finish_reason,
            }
            for c in conv.choices
        ],
        "usage": conv.usage_block(),
    }
    if conv.model.openai:
        body["service_tier"] = "default"
    body["system_fingerprint"] = conv.fingerprint
    return orjson.dumps(body)


def _completion_id(rng: random.Random, conv: _Conversation) -> str:
    if conv.placement == MISTRAL:
        return "".join(rng.choices("0123456789abcdef", k=32))
    return "chatcmpl-" + _token(rng, 29)


def _meta(
    request_id: str,
    conv: _Conversation,
    *,
    stream: bool,
    include_usage: bool,
    reserved: Micros,
    idempotency_key: str | None = None,
) -> dict[str, Any]:
    return {
        "request_id": request_id,
        "account_id": conv.account_id,
        "model": conv.model.name,
        "stream": stream,
        "include_usage": include_usage,
        "reserved_micros": int(reserved),
        "created_at": rfc3339(conv.created_at),
        "messages": conv.messages,
        "tools": conv.tools,
        "n": conv.n,
        "max_tokens": conv.max_tokens,
        "temperature": conv.temperature,
        "seed": conv.seed,
        "idempotency_key": idempotency_key,
    }


def _malformed_variant(rng: random.Random) -> str:
    return rng.choices(fate.DEAD_LETTERS, weights=(4, 3, 3))[0]


def _call(
    rng: random.Random,
    index: int,
    request_id: str,
    conv: _Conversation,
    *,
    stream: bool,
    fault: str | None,
    include_usage: bool,
    reserved: Micros,
    prices: PriceBook,
    idempotency_key: str | None = None,
) -> SimCall:
    """Put one conversation on the wire, bent by ``fault``, and derive its expected fate."""
    features = list(conv.features)
    variant: str | None = None
    if fault == MALFORMED:
        variant = _malformed_variant(rng)
        if variant == fate.ORPHAN_CLOSE:
            ops: tuple[Op, ...] = (Close("done"),)
            return SimCall(
                index, request_id, stream, fault, variant, None, ops, fate.dead_only(variant)
            )
    meta = _meta(
        request_id,
        conv,
        stream=stream,
        include_usage=include_usage,
        reserved=reserved,
        idempotency_key=idempotency_key,
    )
    body = orjson.dumps(meta)
    if variant == fate.REQUEST_NOT_JSON:
        body = body[: rng.randint(1, len(body) - 1)]
    completion_id = _completion_id(rng, conv)
    middle: list[Op] = []
    close = "done"
    late: Deferred | None = None
    if stream:
        cut = fault == DROPPED_CONNECTION or (fault == GATEWAY_CRASH and rng.random() < 0.5)
        if fault == GATEWAY_CRASH:
            variant = "mid_stream" if cut else "before_close"
        shown = _stream(rng, conv, completion_id, include_usage=include_usage, fault=fault, cut=cut)
        entries = group_entries(shown.events, PAIR_RATE, rng)
        if any(entry.count("data: ") > 1 for entry in entries):
            features.append("multi_event_entry")
        middle.append(Frames(entries))
        if fault in (ERROR_FINISH, ERROR_OBJECT):
            close = "upstream_error"
        elif fault == DROPPED_CONNECTION:
            close = "client_disconnect"
        if shown.late_entry is not None:
            delay = rng.randint(200, 800) if rng.random() < 0.7 else None
            late = Deferred(Frames((shown.late_entry,)), delay)
            variant = "at_end_of_run" if delay is None else "after_ms"
        outcome = fate.stream_fate(
            finished=shown.finished,
            errored=shown.errored,
            usage=shown.usage,
            include_usage=include_usage,
        )
        usage = shown.usage
        features.append(f"usage:{conv.placement}" if include_usage else "passthrough")
    else:
        status, response = 200, _response_body(conv, completion_id)
        usage = conv.usage()
        if fault == HTTP_ERROR:
            status, error = rng.choice(_ERROR_BODIES)
            response = orjson.dumps({"error": {**error, "param": None, "code": error.get("code")}})
            if status == 503 and rng.random() < 0.5:
                status, response = 502, _BAD_GATEWAY
            usage, close = None, "upstream_error"
            variant = str(status)
        if fault == GATEWAY_CRASH:
            variant = "before_close"
        middle.append(Response(status, response))
        outcome = fate.response_fate(status=status, usage=usage)
    ops_list: list[Op] = [Open(body)]
    if fault == DUPLICATE_ENTRIES:
        variant = rng.choice(("open", "close", "both"))
        if variant in ("open", "both"):
            ops_list.append(Notify("open"))
    ops_list.extend(middle)
    if variant == fate.UNKNOWN_KIND:
        ops_list.append(Notify(rng.choice(_UNKNOWN_KINDS)))
    if fault != GATEWAY_CRASH:
        ops_list.append(Close(close))
        if variant in ("close", "both"):
            ops_list.append(Close(close))
    if late is not None:
        ops_list.append(late)
    if variant == fate.REQUEST_NOT_JSON:
        expected = fate.dead_only(variant, reserved)
    else:
        expected = fate.expected(
            outcome,
            model=conv.model.name,
            at=conv.created_at,
            usage=usage,
            reserved=reserved,
            prices=prices,
            dead_letter=fate.UNKNOWN_KIND if variant == fate.UNKNOWN_KIND else None,
            late=late is not None,
            swept=fault == GATEWAY_CRASH,
        )
    return SimCall(
        index, request_id, stream, fault, variant, meta, tuple(ops_list), expected, tuple(features)
    )


def _account_weights(accounts: int) -> list[float]:
    """A few busy accounts and a long tail, as real tenants are."""
    return [1.0 / (rank**0.8) for rank in range(1, accounts + 1)]


def iter_calls(
    n: int,
    seed: int,
    faults: FaultRates = NO_FAULTS,
    *,
    twins: float = 0.0,
    accounts: int = 10,
    start: datetime = DEFAULT_START,
    run_id: str | None = None,
    prices: PriceBook | None = None,
) -> Iterator[SimCall]:
    """Yield ``n`` calls lazily; see ``plan``."""
    if n < 0:
        raise ValueError("n must not be negative")
    if accounts < 1:
        raise ValueError("accounts must be at least 1")
    if not 0.0 <= twins <= 1.0:
        raise ValueError("twins must be between 0 and 1")
    prices = prices or load_price_book()
    run = run_id or f"s{seed}"
    weights = _account_weights(accounts)
    index = 0
    while index < n:
        rng = random.Random(f"{seed}:{index}")
        twin = rng.random() < twins and index + 1 < n
        stream = twin or rng.random() < STREAM_SHARE
        fault = None if twin else faults.draw(rng, stream=stream)
        conv = _conversation(rng, start, index, weights)
        request_id = f"req_{run}_{index:06d}"
        if twin:
            conv.temperature = 0
            reserved = _reserve(rng, conv, prices)
            other = f"req_{run}_{index + 1:06d}"
            pair = (
                _call(rng, index, request_id, conv, stream=True, fault=None,
                      include_usage=True, reserved=reserved, prices=prices),
                _call(rng, index + 1, other, conv, stream=False, fault=None,
                      include_usage=True, reserved=reserved, prices=prices),
            )  # fmt: skip
            yield _twin(pair[0], other)
            yield _twin(pair[1], request_id)
            index += 2
            continue
        include_usage = True
        if stream and fault not in (MISSING_USAGE, LATE_USAGE):
            include_usage = rng.random() >= PASSTHROUGH_SHARE
        key = f"idem-{_token(rng, 16)}" if not stream and rng.random() < 0.2 else None
        reserved = _reserve(rng, conv, prices)
        yield _call(
            rng,
            index,
            request_id,
            conv,
            stream=stream,
            fault=fault,
            include_usage=include_usage,
            reserved=reserved,
            prices=prices,
            idempotency_key=key,
        )
        index += 1


def _twin(call: SimCall, other: str) -> SimCall:
    return SimCall(
        call.index,
        call.request_id,
        call.stream,
        call.fault,
        call.variant,
        call.meta,
        call.ops,
        call.expected,
        (*call.features, "twin"),
        twin_of=other,
    )


def plan(
    n: int,
    seed: int,
    faults: FaultRates = NO_FAULTS,
    *,
    twins: float = 0.0,
    accounts: int = 10,
    start: datetime = DEFAULT_START,
    run_id: str | None = None,
) -> list[SimCall]:
    """The ``n`` calls of a run with their expected fates, without publishing anything.

    Deterministic for ``(seed, faults, twins, accounts, start, run_id)``. Request ids are
    ``req_{run_id}_{index:06d}`` (``run_id`` defaults to ``s{seed}``); give each run against the same
    Redis its own ``run_id`` or the ids collide. ``created_at`` starts at ``start`` and advances about
    25 ms per call.
    """
    return list(
        iter_calls(n, seed, faults, twins=twins, accounts=accounts, start=start, run_id=run_id)
    )
