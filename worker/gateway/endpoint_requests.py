"""Each billed endpoint's request, seen as the chat request the billing rules read (pure).

The hold (``reservation.hold_for``), the request entry (``metadata.request_entry``) and the worker's
estimate read a chat completion's fields: ``messages``, ``tools``, ``n``, an output limit. Every
other endpoint's request is mapped onto them here, once, so that one set of rules bills them all:

| endpoint | prompt → ``messages`` | output limit (written as) | usage on a stream |
|---|---|---|---|
| ``chat_completions`` | as sent | ``max_completion_tokens``/``max_tokens`` (by provider) | asked (``stream_options``) |
| ``completions`` | each ``prompt`` (and ``suffix``) a user message | ``max_tokens``, 16 when absent (the API's default); the larger of ``n`` and ``best_of`` choices | asked (``stream_options``) |
| ``responses`` | ``instructions`` a system message; ``input`` items as messages | ``max_output_tokens`` | always sent |
| ``embeddings`` | each ``input`` a user message | 0: an embedding produces no tokens | not streamed |
| ``messages`` | ``system`` a system message; Anthropic content blocks as parts | ``max_tokens`` | always sent |
| ``images`` | ``prompt`` a user message | none written: ``n`` images (``image``: size, quality, partial images) | always sent |

An image generation request's hold is priced by ``reservation.hold_for`` from ``image``
(``ImageAsk``): ``n`` images at the dearest per-image price of the requested size and quality
(any, where the request names none or ``auto``), or, for a model billed by tokens, its
``max_output_tokens`` (the tokens of its largest image) and 100 per partial image, times ``n``.

A prompt given as token ids (``completions`` and ``embeddings`` take lists of integers) is
counted exactly: ``prompt_tokens`` holds their number, the entry's ``prompt_estimate``.

What is refused (HTTP 400), because no record could bill it: a Responses request with
``background: true`` (its answer is fetched later, by another request than the one that spent).
A Responses request that continues a stored conversation (``previous_response_id``,
``conversation``) or names a stored ``prompt`` carries a prompt the gateway cannot see: its hold is
priced at the model's whole input window (``whole_context``), so that it is still an upper bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from worker.gateway.refusals import Refusal

CHAT = "chat_completions"
# The legacy Completions API's ``max_tokens`` when the request states none
# (platform.openai.com/docs/api-reference/completions/create: "Defaults to 16").
COMPLETIONS_DEFAULT_MAX_TOKENS = 16
# The endpoints whose streams carry usage only when asked (``stream_options.include_usage``).
USAGE_ASKED_BY_OPTION = frozenset({CHAT, "completions"})


# Image output tokens billed per partial image of a streamed image generation (OpenAI's image
# generation guide, "Streaming": "Each partial image incurs an additional 100 image output tokens").
PARTIAL_IMAGE_TOKENS = 100
# The most partial images a request may ask for (the API reference: ``partial_images`` 0 to 3).
MAX_PARTIAL_IMAGES = 3


@dataclass(frozen=True, slots=True)
class ImageAsk:
    """What an image generation request asks for, as its hold prices it: ``n`` images of
    ``size`` and ``quality`` (None: not named, or ``auto``), ``partial_images`` each."""

    n: int
    size: str | None
    quality: str | None
    partial_images: int = 0


@dataclass(frozen=True, slots=True)
class EndpointRequest:
    """``body``: the request as a chat request (see the module docstring); ``limit_field``: where
    a written output limit goes in the forwarded request (None: chat's rule by provider);
    ``whole_context``: hold the model's whole input window; ``prompt_tokens``: the prompt's exact
    count when it was sent as token ids."""

    endpoint: str
    body: dict[str, Any]
    limit_field: str | None = None
    whole_context: bool = False
    prompt_tokens: int | None = None
    image: ImageAsk | None = None

    @property
    def usage_by_option(self) -> bool:
        return self.endpoint in USAGE_ASKED_BY_OPTION


def _token_ids(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(item, int) and not isinstance(item, bool) for item in value
    )  # fmt: skip


def _inputs(value: object) -> tuple[list[dict[str, Any]], int | None]:
    """(user messages, the token count of token-id inputs) of a ``prompt``/``input`` field: a
    string, a list of strings, a list of token ids, or a list of lists of token ids."""
    if value is None:
        return [], None
    if isinstance(value, str):
        return [{"role": "user", "content": value}], None
    if _token_ids(value):
        return [], len(value)  # type: ignore[arg-type]
    messages: list[dict[str, Any]] = []
    tokens: int | None = None
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, str):
            messages.append({"role": "user", "content": item})
        elif _token_ids(item):
            tokens = (tokens or 0) + len(item)
        else:  # no shape the API takes: counted as its JSON, an overcount never an undercount
            messages.append({"role": "user", "content": _json(item)})
    return messages, tokens


def _json(value: object) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return repr(value)


def _text(value: object) -> str:
    return value if isinstance(value, str) else _json(value)


def _chat_tool(tool: object) -> object:
    """A Responses or Anthropic function tool as a chat tool; any other tool as it came."""
    if not isinstance(tool, dict) or "function" in tool:
        return tool
    parameters = tool.get("parameters", tool.get("input_schema"))
    if "name" in tool and (tool.get("type") in (None, "function", "custom") or parameters):
        function = {"name": tool.get("name"), "description": tool.get("description")}
        if parameters is not None:
            function["parameters"] = parameters
        return {"type": "function", "function": function}
    return tool


def _tools(body: dict[str, Any]) -> list[Any]:
    tools = body.get("tools")
    return [_chat_tool(tool) for tool in tools] if isinstance(tools, list) else []


# -- Responses ------------------------------------------------------------------------------------


def _response_part(part: object) -> dict[str, Any]:
    if isinstance(part, str):
        return {"type": "text", "text": part}
    if not isinstance(part, dict):
        return {"type": "text", "text": _json(part)}
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text", "refusal"):
        return {"type": "text", "text": _text(part.get("text", part.get("refusal", "")))}
    if kind == "input_image":
        image: dict[str, Any] = {"url": part.get("image_url") or ""}
        if part.get("detail") is not None:
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    if kind == "input_file":
        return {"type": "file", "file": {k: v for k, v in part.items() if k != "type"}}
    return {"type": "text", "text": _json(part)}


def _response_item(item: object) -> dict[str, Any]:
    if isinstance(item, str):
        return {"role": "user", "content": item}
    if not isinstance(item, dict):
        return {"role": "user", "content": _json(item)}
    kind = item.get("type")
    if kind in (None, "message") and "role" in item:
        content = item.get("content")
        if isinstance(content, list):
            content = [_response_part(part) for part in content]
        elif not isinstance(content, str):
            content = _json(content)
        return {"role": _text(item["role"]), "content": content}
    if kind == "function_call":
        return {
            "role": "assistant",
            "content": _text(item.get("name", "")) + _text(item.get("arguments", "")),
        }
    if kind in ("function_call_output", "custom_tool_call_output"):
        return {"role": "tool", "content": _text(item.get("output", ""))}
    if kind == "reasoning":
        summary = item.get("summary")
        parts = (
            [p.get("text") for p in summary if isinstance(p, dict)]
            if isinstance(summary, list)
            else []
        )
        return {"role": "assistant", "content": "".join(t for t in parts if isinstance(t, str))}
    return {"role": "user", "content": _json(item)}


def _responses(body: dict[str, Any]) -> EndpointRequest | Refusal:
    if body.get("background"):
        return Refusal(
            400,
            "A background response cannot be billed by this gateway (its answer is fetched later, "
            "by another request): send it with background: false.",
            "background",
            "background_not_billed",
        )
    messages: list[dict[str, Any]] = []
    if body.get("instructions") is not None:
        messages.append({"role": "system", "content": _text(body["instructions"])})
    given = body.get("input")
    if isinstance(given, list):
        messages.extend(_response_item(item) for item in given)
    elif given is not None:
        messages.append({"role": "user", "content": _text(given)})
    view: dict[str, Any] = {
        "model": body.get("model"),
        "messages": messages,
        "tools": _tools(body),
        "stream": body.get("stream"),
        "max_tokens": body.get("max_output_tokens"),
    }
    if body.get("text") is not None:  # a structured output's schema is read as prompt
        view["text"] = body["text"]
    whole = any(
        body.get(key) is not None for key in ("previous_response_id", "conversation", "prompt")
    )
    return EndpointRequest("responses", view, "max_output_tokens", whole_context=whole)


# -- Completions, Embeddings ----------------------------------------------------------------------


def _completions(body: dict[str, Any]) -> EndpointRequest:
    messages, tokens = _inputs(body.get("prompt"))
    if isinstance(body.get("suffix"), str):
        messages.append({"role": "user", "content": body["suffix"]})
    n = body.get("n") if isinstance(body.get("n"), int) else 1
    best_of = body.get("best_of") if isinstance(body.get("best_of"), int) else 1
    skip = ("prompt", "suffix", "best_of", "echo", "n", "max_tokens")
    view = {k: v for k, v in body.items() if k not in skip}
    view["messages"] = messages
    view["n"] = max(n, best_of, 1) if n >= 1 and best_of >= 1 else body.get("n")
    limit = body.get("max_tokens")
    view["max_tokens"] = COMPLETIONS_DEFAULT_MAX_TOKENS if limit is None else limit
    if tokens is not None:
        view["prompt"] = body.get("prompt")  # token ids: their JSON bounds the hold
    return EndpointRequest("completions", view, "max_tokens", prompt_tokens=tokens)


def _embeddings(body: dict[str, Any]) -> EndpointRequest:
    messages, tokens = _inputs(body.get("input"))
    view: dict[str, Any] = {"model": body.get("model"), "messages": messages, "max_tokens": 0}
    if tokens is not None:
        view["input"] = body.get("input")  # token ids: their JSON bounds the hold
    return EndpointRequest("embeddings", view, None, prompt_tokens=tokens)


# -- Images --------------------------------------------------------------------------------------


def _name(value: object) -> str | None:
    return value if isinstance(value, str) and value and value != "auto" else None


def _images(body: dict[str, Any]) -> EndpointRequest:
    n = body.get("n", 1)
    partial = body.get("partial_images", 0) if body.get("stream") else 0
    if not isinstance(partial, int) or isinstance(partial, bool):
        partial = MAX_PARTIAL_IMAGES
    ask = ImageAsk(
        n if isinstance(n, int) and not isinstance(n, bool) else 1,
        _name(body.get("size")),
        _name(body.get("quality")),
        min(max(partial, 0), MAX_PARTIAL_IMAGES),
    )
    view: dict[str, Any] = {
        "model": body.get("model"),
        "messages": [{"role": "user", "content": _text(body.get("prompt", ""))}],
        "stream": body.get("stream"),
        "n": body.get("n"),
        "image": {key: body[key] for key in ("size", "quality") if isinstance(body.get(key), str)},
    }
    return EndpointRequest("images", view, None, image=ask)


# -- Anthropic Messages ---------------------------------------------------------------------------


def _anthropic_part(block: object) -> dict[str, Any]:
    if isinstance(block, str):
        return {"type": "text", "text": block}
    if not isinstance(block, dict):
        return {"type": "text", "text": _json(block)}
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": _text(block.get("text", ""))}
    if kind == "image":
        source = block.get("source") if isinstance(block.get("source"), dict) else {}
        if source.get("type") == "base64":
            url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
        else:
            url = _text(source.get("url", ""))
        return {"type": "image_url", "image_url": {"url": url}}
    if kind == "document":
        return {"type": "file", "file": {"file_data": _json(block.get("source"))}}
    if kind == "tool_use":
        return {"type": "text", "text": _text(block.get("name", "")) + _json(block.get("input"))}
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, list):
            return {"type": "text", "text": "".join(
                _anthropic_part(part).get("text", "") for part in content
            )}  # fmt: skip
        return {"type": "text", "text": _text(content if content is not None else "")}
    if kind in ("thinking", "redacted_thinking"):
        return {"type": "text", "text": _text(block.get("thinking", block.get("data", "")))}
    return {"type": "text", "text": _json(block)}


def _anthropic_message(message: object) -> dict[str, Any]:
    if not isinstance(message, dict):
        return {"role": "user", "content": _json(message)}
    content = message.get("content")
    if isinstance(content, list):
        content = [_anthropic_part(block) for block in content]
    elif not isinstance(content, str):
        content = _json(content)
    return {"role": _text(message.get("role", "user")), "content": content}


def _messages(body: dict[str, Any]) -> EndpointRequest:
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if isinstance(system, list):
        messages.append({"role": "system", "content": [_anthropic_part(b) for b in system]})
    elif system is not None:
        messages.append({"role": "system", "content": _text(system)})
    given = body.get("messages")
    messages.extend(_anthropic_message(m) for m in (given if isinstance(given, list) else ()))
    view = {
        "model": body.get("model"),
        "messages": messages,
        "tools": _tools(body),
        "stream": body.get("stream"),
        "max_tokens": body.get("max_tokens"),
    }
    return EndpointRequest("messages", view, "max_tokens")


def endpoint_request(endpoint: str | None, body: dict[str, Any]) -> EndpointRequest | Refusal:
    """``body`` (a request to ``endpoint``, a ``routes`` kind) as the chat request the billing
    rules read, or the refusal of a request no record could bill."""
    if endpoint in (None, CHAT):
        return EndpointRequest(CHAT, body)
    if endpoint == "responses":
        return _responses(body)
    if endpoint == "completions":
        return _completions(body)
    if endpoint == "embeddings":
        return _embeddings(body)
    if endpoint == "messages":
        return _messages(body)
    if endpoint == "images":
        return _images(body)
    raise ValueError(f"no request view for endpoint {endpoint!r}")
