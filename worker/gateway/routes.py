"""Which HTTP requests are OpenAI-compatible chat completions (pure).

A ``POST`` whose path ends with ``/chat/completions``: OpenAI's ``/v1/chat/completions``, the bare
``/chat/completions`` some gateways serve, Azure OpenAI's
``/openai/deployments/{deployment}/chat/completions`` and any prefix a gateway mounts them under.
A trailing slash is accepted; the query string is not part of the path.
"""

from __future__ import annotations

CHAT_COMPLETIONS_SUFFIX = "/chat/completions"


def is_chat_completion(method: str, path: str) -> bool:
    return method == "POST" and path.rstrip("/").endswith(CHAT_COMPLETIONS_SUFFIX)
