"""The requests the contract refuses, answered before any hold is placed (pure).

docs/events.md and docs/alerts.md: a streamed request must not carry an ``Idempotency-Key`` (a
stream cannot be replayed from a cache, so a retried key would bill twice or serve nothing), and a
model listed in ``BILLING_NON_STREAMABLE_MODELS`` must not stream. "Streamed" is read as the app
reads ``stream`` (``metadata.asks_to_stream``: truthy, so ``"true"`` and ``1`` are streams). A body
that is not a JSON object even to Python's ``json`` (``NOT_JSON``) is refused too: the middleware
cannot bill it, so the app must not serve it. The answer is an HTTP 400 with
OpenAI's error object, ``{"error": {"message", "type", "param", "code"}}``, the shape the openai
client raises ``BadRequestError`` from (https://platform.openai.com/docs/guides/error-codes).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from worker.core.anomalies import is_non_streamable
from worker.gateway.metadata import asks_to_stream


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int
    message: str
    param: str | None
    code: str
    type: str = "invalid_request_error"
    # Figures beside OpenAI's four keys (a spend refusal's account and amounts), never text of
    # the request.
    extra: tuple[tuple[str, Any], ...] = ()
    request_id: str | None = None  # sent as X-Billing-Request-Id when the call had one

    def body(self) -> bytes:
        error = {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        error.update(self.extra)
        return orjson.dumps({"error": error})


NOT_JSON = Refusal(
    400,
    "The request body is not a JSON object: send the chat completion as JSON "
    "(Content-Type: application/json).",
    None,
    "invalid_json",
)


def refusal(
    body: dict[str, Any], idempotency_key: str | None, non_streamable: Iterable[str]
) -> Refusal | None:
    """Why this request is refused, or None. ``body`` is the parsed request JSON."""
    if not asks_to_stream(body):
        return None
    if idempotency_key:
        return Refusal(
            400,
            "A streamed request cannot carry an Idempotency-Key: send it without the header, "
            "or with stream: false.",
            "stream",
            "idempotency_key_on_stream",
        )
    model = body.get("model")
    if isinstance(model, str) and is_non_streamable(model, non_streamable):
        return Refusal(
            400,
            f"The model {model[:200]} cannot be streamed here: send the request with stream: false.",
            "stream",
            "model_not_streamable",
        )
    return None
