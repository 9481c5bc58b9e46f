"""One reader per endpoint a gateway bills: its stream or body, assembled into ``Assembled``.

Every endpoint's answer becomes the one ``Assembled`` the outcome rules (``worker.core.outcome``)
and the reconciler read, so "settled, unsettled with a reason, or void" means the same for every
endpoint: a choice per answer that finished (``finish_reason``), the provider's usage block as it
came (``usage_raw``, read by ``worker.core.usage``), an error when one arrived.

| endpoint | request path | reader | usage block |
|---|---|---|---|
| ``chat_completions`` | ``…/chat/completions`` | ``worker.core.assembly`` | OpenAI's (and every gateway's variants) |
| ``completions`` | ``…/completions`` | ``completions`` | OpenAI's, as chat |
| ``responses`` | ``…/responses`` | ``responses`` | Responses API ``input_tokens``/``output_tokens`` |
| ``embeddings`` | ``…/embeddings`` | ``embeddings`` | ``prompt_tokens`` (and ``total_tokens``) |
| ``messages`` | ``…/messages`` | ``messages`` | Anthropic's, cumulative over the stream |
| ``images`` | ``…/images/generations`` | ``images`` | GPT Image's tokens; else the images, billed per image |

``ENDPOINTS`` is the one list of endpoints the worker reads; a gateway bills exactly these
(``worker.gateway.routes``), and a request entry naming another is refused at the boundary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from worker.core.assembly import Assembled, assemble_response, assemble_stream
from worker.core.readers import completions, embeddings, images, messages, responses

CHAT = "chat_completions"

_Records = bytes | str | Iterable[bytes | str]
_STREAMS: dict[str, Callable[[Any], Assembled]] = {
    CHAT: assemble_stream,
    "completions": completions.assemble_stream,
    "responses": responses.assemble_stream,
    "embeddings": embeddings.assemble_stream,
    "messages": messages.assemble_stream,
    "images": images.assemble_stream,
}
_BODIES: dict[str, Callable[[Any], Assembled]] = {
    CHAT: assemble_response,
    "completions": completions.assemble_body,
    "responses": responses.assemble_body,
    "embeddings": embeddings.assemble_body,
    "messages": messages.assemble_body,
    "images": images.assemble_body,
}
ENDPOINTS: tuple[str, ...] = tuple(_STREAMS)


def read_stream(endpoint: str, records: _Records) -> Assembled:
    """The streamed answer of a call to ``endpoint`` (one of ``ENDPOINTS``). Never raises on it."""
    return _STREAMS[endpoint](records)


def read_body(endpoint: str, body: Any) -> Assembled:
    """The non-streamed answer (a parsed JSON body) of a call to ``endpoint``. Never raises."""
    return _BODIES[endpoint](body)


__all__ = ["CHAT", "ENDPOINTS", "read_body", "read_stream"]
