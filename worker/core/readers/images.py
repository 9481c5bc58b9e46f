"""OpenAI's image generation (``POST …/images/generations``): its body, or its event stream.

Shapes: platform.openai.com/docs/api-reference/images/create (the image generation response:
``created``, ``data`` — one ``{"b64_json" | "url", "revised_prompt"}`` per image — and, for the GPT
Image models, ``size``, ``quality``, ``background``, ``output_format`` and ``usage``) and
…/images-streaming (``stream: true``, GPT Image models: ``image_generation.partial_image`` events,
then one ``image_generation.completed`` event per image carrying the image, its ``size``,
``quality`` and ``usage``).

The call's answer is one choice per image that came (``stop``); an answer with no image did not
finish (``incomplete``), as does a stream without a ``completed`` event; an ``error`` body or
event is the call's error. The usage block handed on (read by ``worker.core.usage``, shape
``openai_images``) is the answer's ``usage`` (a stream's: its ``completed`` events' usage, each
that image's, added up) with ``generated_images`` 0; an answer without usage (DALL·E: billed per
image) is ``{"generated_images": k}``, the images that came, with the answer's ``size`` and
``quality`` as ``image_size`` / ``image_quality`` when it states them (else the request's,
``worker.core.images``). Partial images are billed as output tokens within the usage (OpenAI's
image generation guide: 100 image output tokens each), never counted as images.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from worker.core.assembly import Assembled
from worker.core.errors import FrameError
from worker.core.readers.frames import count_of, frames_of
from worker.core.result import Choice
from worker.core.sse import BadFrame, Chunk, json_kind
from worker.core.usage import IMAGES_KEY

_COMPLETED = "image_generation.completed"
_PARTIAL = "image_generation.partial_image"
_COUNTS = ("input_tokens", "output_tokens", "total_tokens")


def _image(item: object) -> bool:
    return isinstance(item, dict) and any(
        isinstance(item.get(key), str) for key in ("b64_json", "url")
    )


def _per_image(count: int, answer: dict[str, Any]) -> dict[str, Any]:
    block: dict[str, Any] = {IMAGES_KEY: count}
    for key, name in (("size", "image_size"), ("quality", "image_quality")):
        if answer.get(key) is not None:
            block[name] = answer[key]
    return block


def _added(blocks: list[Any]) -> Any:
    """The usage blocks of a stream's images as one: one block as it came; several added up,
    count by count and detail by detail (a block that is not an object is handed on alone, for
    the usage reader to refuse)."""
    if len(blocks) == 1 or not all(isinstance(block, dict) for block in blocks):
        return blocks[0] if len(blocks) == 1 else next(b for b in blocks if not isinstance(b, dict))
    total: dict[str, Any] = {}
    for block in blocks:
        for key, value in block.items():
            if isinstance(value, dict):
                inner = total.setdefault(key, {})
                for name, count in value.items():
                    inner[name] = _plus(inner.get(name), count)
            else:
                total[key] = _plus(total.get(key), value)
    return total


def _plus(a: object, b: object) -> object:
    """Two counts added; anything that is not two integers keeps the second (the reader then
    judges it as it came)."""
    if a is None:
        return b
    if type(a) is int and type(b) is int:
        return a + b
    return b


def _assembled(
    images: int,
    usage: Any,
    answer: dict[str, Any],
    error: dict[str, Any] | None,
    errors: list[FrameError],
    *,
    chunks: int,
    done: bool,
) -> Assembled:
    if usage is None and images:
        usage = _per_image(images, answer)
    elif isinstance(usage, dict):
        usage = {**usage, IMAGES_KEY: 0}
    created = answer.get("created", answer.get("created_at"))
    choices = [Choice(i, role="assistant", finish_reason="stop") for i in range(images)]
    if not choices and done and error is None:
        choices = [Choice(0, role="assistant")]  # an answer without an image: no finish
    return Assembled(
        choices=choices,
        usage_raw=usage,
        created=count_of(created),
        error=error,
        frame_errors=errors,
        saw_done=done,
        chunk_count=chunks,
    )


def assemble_body(body: Any) -> Assembled:
    """A non-streamed answer: the images response (or an ``error`` body). Never raises."""
    if not isinstance(body, dict):
        problem = FrameError(0, f"not a JSON object (got {json_kind(body)})")
        return _assembled(0, None, {}, None, [problem], chunks=0, done=False)
    error = body.get("error") if isinstance(body.get("error"), dict) else None
    data = body.get("data")
    images = sum(1 for item in data if _image(item)) if isinstance(data, list) else 0
    done = isinstance(data, list)
    return _assembled(images, body.get("usage"), body, error, [], chunks=1, done=done)


def assemble_stream(records: bytes | str | Iterable[Any]) -> Assembled:
    """A streamed answer: the image generation events (see the module docstring)."""
    images = 0
    usages: list[Any] = []
    last: dict[str, Any] = {}
    error: dict[str, Any] | None = None
    errors: list[FrameError] = []
    chunks = 0
    for frame in frames_of(records):
        if isinstance(frame, BadFrame):
            errors.append(frame.error)
            continue
        if not isinstance(frame, Chunk):
            continue
        chunks += 1
        obj = frame.obj
        kind = obj.get("type") or frame.event
        if kind == "error" or frame.event == "error":
            if error is None:
                inner = obj.get("error")
                error = inner if isinstance(inner, dict) else obj
        elif kind == _COMPLETED:
            images += 1 if _image(obj) else 0
            last = obj
            if obj.get("usage") is not None:
                usages.append(obj["usage"])
        elif kind != _PARTIAL:
            errors.append(FrameError(frame.index, f"not an image generation event ({kind!r:.40})"))
    usage = _added(usages) if usages else None
    done = images > 0 or bool(last)
    return _assembled(images, usage, last, error, errors, chunks=chunks, done=done)
