"""Hypothesis strategies: OpenAI-shaped streamed completions, and the records a gateway splits them
into.

The shape is the one OpenAI's API streams (https://platform.openai.com/docs/api-reference/chat-streaming
and openai-python's tests/lib/chat/test_completions_streaming.py): a role chunk per choice, content
fragments, tool calls begun by a fragment carrying index, id, type and name with empty arguments and
continued by fragments carrying only the index and an argument piece, n > 1 choices interleaved, a
finish chunk per choice, then (``include_usage``) a usage chunk with ``choices: []`` and
``data: [DONE]``. Every frame the assembler's plain-chunk path takes (content fragments, argument
fragments) appears, next to the frames it must leave to the general path.
"""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import strategies as st

piece = st.text(st.characters(codec="utf-8"), max_size=12)
name = st.text(st.characters(codec="utf-8", categories=["L", "N"]), min_size=1, max_size=8)


@st.composite
def openai_streams(draw: st.DrawFn) -> list[dict[str, Any]]:
    """One completion's chunks, in order (without the ``[DONE]`` sentinel)."""
    top: dict[str, Any] = {
        "id": "chatcmpl-" + draw(name),
        "object": "chat.completion.chunk",
        "created": draw(st.integers(1, 2**31)),
        "model": draw(st.sampled_from(["gpt-4o-2024-08-06", "gpt-4o-mini"])),
        "system_fingerprint": "fp_" + draw(name),
    }
    if draw(st.booleans()):
        top["service_tier"] = draw(st.sampled_from(["default", "flex", ""]))

    def chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**top, "choices": [choice]}

    n = draw(st.integers(1, 3))
    chunks = [chunk(i, {"role": "assistant", "content": ""}) for i in range(n)]
    calls: list[int] = [0] * n  # tool calls begun, per choice
    steps = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, 9), piece), max_size=30))
    for choice, roll, text in steps:
        if roll == 0:
            head = {"index": calls[choice], "id": f"call_{choice}_{calls[choice]}",
                    "type": "function", "function": {"name": draw(name), "arguments": ""}}  # fmt: skip
            chunks.append(chunk(choice, {"tool_calls": [head]}))
            calls[choice] += 1
        elif roll < 5 and calls[choice]:
            fragment = {"index": draw(st.integers(0, calls[choice] - 1)),
                        "function": {"arguments": text}}  # fmt: skip
            chunks.append(chunk(choice, {"tool_calls": [fragment]}))
        else:
            chunks.append(chunk(choice, {"content": text}))
    for choice in draw(st.permutations(range(n))):
        finish = "tool_calls" if calls[choice] else draw(st.sampled_from(["stop", "length"]))
        chunks.append(chunk(choice, {}, finish))
    if draw(st.booleans()):
        usage = {
            "prompt_tokens": 3,
            "completion_tokens": len(steps),
            "total_tokens": 3 + len(steps),
        }
        chunks.append({**top, "choices": [], "usage": usage})
    return chunks


def events(chunks: list[dict[str, Any]]) -> list[bytes]:
    """The SSE events of a stream as the gateway forwards them, ``data: [DONE]`` last."""
    return [b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks] + [b"data: [DONE]\n\n"]


def grouped(draw: st.DrawFn, items: list[bytes]) -> list[bytes]:
    """The events cut into records of one or more events each (frames the gateway coalesced),
    each record with its closing blank line or, in some calls, every record without it (a record
    is the raw event text: docs/events.md)."""
    records: list[bytes] = []
    start = 0
    while start < len(items):
        size = draw(st.integers(1, 3))
        records.append(b"".join(items[start : start + size]))
        start += size
    if draw(st.booleans()):
        records = [record.removesuffix(b"\n\n") for record in records]
    return records
