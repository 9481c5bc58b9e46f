"""OpenAI's Embeddings API (``POST …/embeddings``): a body, never a stream.

Shape: platform.openai.com/docs/api-reference/embeddings (``{"object": "list", "data": [{"object":
"embedding", "index": i, "embedding": …}], "model", "usage": {"prompt_tokens", "total_tokens"}}``).
The call's answer is one choice that finished (``stop``) when ``data`` holds an embedding per input,
numbered ``0..k-1``; an empty or gapped ``data`` did not finish (``incomplete``). Its usage block is
read as chat usage with ``completion_tokens`` 0 (an embedding produces no tokens), so a
``total_tokens`` other than ``prompt_tokens`` is ``inconsistent_usage``. An embeddings stream is no
shape any provider sends: it is read as no answer (``incomplete``), each frame counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from worker.core.assembly import Assembled
from worker.core.errors import FrameError
from worker.core.readers.frames import frames_of, text_of
from worker.core.result import Choice
from worker.core.sse import json_kind


def _assembled(
    choices: list[Choice],
    usage: dict[str, Any] | None,
    body: dict[str, Any],
    error: dict[str, Any] | None,
    frame_errors: list[FrameError],
    *,
    done: bool,
) -> Assembled:
    model = body.get("model")
    return Assembled(
        choices=choices,
        usage_raw=usage,
        model=text_of(model),
        error=error,
        frame_errors=frame_errors,
        saw_done=done,
        chunk_count=1 if done else 0,
    )


def _usage(block: object) -> object:
    """The usage block as chat usage: ``completion_tokens`` 0 where it states none."""
    if isinstance(block, dict) and "completion_tokens" not in block:
        return {**block, "completion_tokens": 0}
    return block


def assemble_body(body: Any) -> Assembled:
    """A non-streamed embeddings answer (or an ``error`` body). Never raises."""
    if not isinstance(body, dict):
        problem = FrameError(0, f"not a JSON object (got {json_kind(body)})")
        return _assembled([], None, {}, None, [problem], done=False)
    error = body.get("error") if isinstance(body.get("error"), dict) else None
    data = body.get("data")
    indexes = [
        item.get("index") for item in data if isinstance(item, dict)
    ] if isinstance(data, list) else []  # fmt: skip
    whole = bool(indexes) and sorted(indexes) == list(range(len(data)))  # type: ignore[arg-type]
    choices = [Choice(0, role="assistant", finish_reason="stop" if whole else None)]
    usage = body.get("usage")
    return _assembled(
        choices if data is not None else [], _usage(usage) if usage is not None else None,
        body, error, [], done=True,
    )  # fmt: skip


def assemble_stream(records: bytes | str | Iterable[Any]) -> Assembled:
    """An embeddings "stream": no answer (see the module docstring). Never raises."""
    errors = [
        FrameError(frame.index, "an embeddings answer is a body, not a stream")
        for frame in frames_of(records)
    ]
    return _assembled([], None, {}, None, errors, done=False)
