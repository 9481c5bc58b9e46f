"""Realistic streamed completions, fixed by a seed, for benchmarks and oracle checks.

Each stream is an OpenAI-shaped list of ``chat.completion.chunk`` objects: a role chunk, a few hundred
content fragments of varied length (prose, code, non-English text), or tool calls streamed by index
(id, type and name first, then argument fragments), or n=2 interleaved choices; a finish chunk per
choice and a usage chunk with ``choices: []`` last, as ``stream_options.include_usage`` produces.
"""

from __future__ import annotations

import random
from typing import Any

import orjson

SEED = 20260509

_VOCABULARY = (
    "the invoice total usage token model request account billing reconcile stream response latency "
    "gateway customer project deploy region cache retry error because however therefore which "
    "would could should about between during before after every function value return result"
)
_WORDS = _VOCABULARY.split()
_FOREIGN = ["März", "détaillées", "請求書", "明細", "Счёт", "строк", "ñandú", "😀"]


def _fragments(rng: random.Random, count: int) -> list[str]:
    pieces = []
    for _ in range(count):
        roll = rng.random()
        if roll < 0.7:
            pieces.append((" " if rng.random() < 0.8 else "") + rng.choice(_WORDS))
        elif roll < 0.8:
            pieces.append(rng.choice([".", ",", "\n", "\n\n", ":", "`", "```python\n", "    "]))
        elif roll < 0.9:
            pieces.append(rng.choice(_FOREIGN))
        else:
            pieces.append(" " + " ".join(rng.choice(_WORDS) for _ in range(rng.randint(2, 12))))
    return pieces


def _arguments(rng: random.Random, count: int) -> list[str]:
    text = orjson.dumps(
        {rng.choice(_WORDS) + str(i): " ".join(rng.choices(_WORDS, k=4)) for i in range(count // 4)}
    ).decode()
    cuts = sorted(rng.sample(range(1, len(text)), min(count - 1, len(text) - 1)))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


def stream(rng: random.Random, number: int) -> list[dict[str, Any]]:
    """One completion's chunks."""
    top = {
        "id": f"chatcmpl-{number:08d}",
        "object": "chat.completion.chunk",
        "created": 1770000000 + number,
        "model": rng.choice(["gpt-4o-2024-08-06", "gpt-4o-mini-2024-07-18"]),
        "system_fingerprint": f"fp_{rng.randrange(16**6):06x}",
    }

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {**top, "choices": choices, **extra}

    def choice(index: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}

    kind = rng.random()
    frames = rng.randint(150, 500)
    chunks: list[dict[str, Any]]
    if kind < 0.7:
        chunks = [chunk([choice(0, {"role": "assistant", "content": "", "refusal": None})])]
        chunks += [chunk([choice(0, {"content": p})]) for p in _fragments(rng, frames)]
        chunks.append(chunk([choice(0, {}, rng.choice(["stop", "stop", "stop", "length"]))]))
    elif kind < 0.85:
        chunks = [chunk([choice(0, {"role": "assistant", "content": None, "refusal": None})])]
        calls = rng.randint(1, 3)
        for call in range(calls):
            head = {
                "index": call,
                "id": f"call_{number}_{call}",
                "type": "function",
                "function": {"name": rng.choice(_WORDS), "arguments": ""},
            }
            chunks.append(chunk([choice(0, {"tool_calls": [head]})]))
            for piece in _arguments(rng, frames // calls):
                fragment = {"index": call, "function": {"arguments": piece}}
                chunks.append(chunk([choice(0, {"tool_calls": [fragment]})]))
        chunks.append(chunk([choice(0, {}, "tool_calls")]))
    else:
        chunks = [chunk([choice(i, {"role": "assistant", "content": ""})]) for i in (0, 1)]
        queues = [_fragments(rng, frames // 2), _fragments(rng, frames // 2)]
        while queues[0] or queues[1]:
            index = rng.choice([i for i in (0, 1) if queues[i]])
            chunks.append(chunk([choice(index, {"content": queues[index].pop(0)})]))
        chunks += [chunk([choice(i, {}, "stop")]) for i in (1, 0)]
    completion = len(chunks)
    usage: dict[str, Any] = {
        "prompt_tokens": rng.randint(10, 4000),
        "completion_tokens": completion,
    }
    usage["total_tokens"] = usage["prompt_tokens"] + completion
    if rng.random() < 0.5:
        usage["prompt_tokens_details"] = {"cached_tokens": usage["prompt_tokens"] // 2}
        usage["completion_tokens_details"] = {"reasoning_tokens": 0}
    chunks.append(chunk([], usage=usage))
    return chunks


def streams(count: int, seed: int = SEED) -> list[list[dict[str, Any]]]:
    rng = random.Random(seed)
    return [stream(rng, number) for number in range(count)]


def to_sse(chunks: list[dict[str, Any]]) -> bytes:
    """The body the gateway records: one ``data:`` event per chunk, then ``data: [DONE]``."""
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
