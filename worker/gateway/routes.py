"""What the gateway serves: the one table both gateways consult (pure).

Every request a gateway sees is one of three things:

* ``billed``: an endpoint the worker has a reader for (``Endpoint.billed``), published to the
  billing contract and settled;
* ``free``: declared free, because no model runs to answer it (``FREE_PATHS``: the model list and
  health checks), served unrecorded;
* ``refused``: everything else, known endpoints without a reader as much as paths this table has
  never heard of. A gateway answers it with ``NOT_BILLED`` (HTTP 403 in OpenAI's error shape), or,
  where the operator set ``BILLING_UNBILLED_ROUTES=pass``, serves it unbilled and publishes an
  ``unbilled`` notification the worker records and alerts on.

The ASGI middleware asks ``http_route(method, path)`` (any mount prefix: an HTTP path is matched by
its end, so ``/v1/chat/completions``, ``/chat/completions``, Azure OpenAI's
``/openai/deployments/{deployment}/chat/completions`` and ``/api/v1/chat/completions`` are one
endpoint; a trailing slash is ignored; the query string is not part of the path). The LiteLLM hook
asks ``call_type_route(call_type)`` with the ``call_type`` LiteLLM hands ``async_pre_call_hook``.
A WebSocket (the Realtime API, ``/v1/realtime``) is refused whatever its path:
``websocket_route(path)``.

Billing an endpoint once its reader exists (``worker.core.readers``) is one change here:
``billed=True`` on its row; the billed kinds are exactly the readers' ``ENDPOINTS`` (a test holds
the two lists equal).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from worker.gateway.refusals import Refusal


class Treatment(StrEnum):
    BILLED = "billed"
    FREE = "free"
    REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """An OpenAI-compatible endpoint: its ``kind``, the HTTP method and path suffix it is served
    at, the LiteLLM call types that reach it, and whether the worker reads it (``billed``)."""

    kind: str
    suffix: str
    call_types: tuple[str, ...]
    billed: bool
    method: str = "POST"


# Longest suffix first where one ends another (``/chat/completions`` before ``/completions``).
ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint("chat_completions", "/chat/completions", ("acompletion", "completion"), billed=True),
    Endpoint("completions", "/completions", ("atext_completion", "text_completion"), True),
    Endpoint("embeddings", "/embeddings", ("aembedding", "embedding"), billed=True),
    Endpoint("responses", "/responses", ("aresponses", "responses"), billed=True),
    Endpoint("messages", "/messages", ("anthropic_messages", "aanthropic_messages"), True),
    Endpoint("images", "/images/generations", ("aimage_generation", "image_generation"), True),
    Endpoint("image_edits", "/images/edits", ("aimage_edit", "image_edit"), billed=False),
    Endpoint("speech", "/audio/speech", ("aspeech", "speech"), billed=False),
    Endpoint("transcriptions", "/audio/transcriptions", ("atranscription", "transcription"), False),
    Endpoint("moderations", "/moderations", ("amoderation", "moderation"), billed=False),
    Endpoint("rerank", "/rerank", ("arerank", "rerank"), billed=False),
)

# Declared free: answered without running a model, so there is nothing to bill. Matched on GET
# and HEAD; and any path's ``OPTIONS``, a browser's CORS preflight, which carries no body and runs
# nothing.
#   …/models, …/models/{id}: the model list the openai client reads (``client.models.list()``)
#     and one model's card; the gateway or the upstream answers from its configuration.
#   …/health, …/healthz, …/livez, …/readyz, …/health/liveliness, …/health/liveness,
#     …/health/readiness: the probes a load balancer or Kubernetes sends (the last three are
#     LiteLLM's); they answer whether the gateway is up, and must never need an account.
FREE_PATHS = re.compile(
    r"(?:^|/)(?:models(?:/[^/]+)*|health|healthz|livez|readyz"
    r"|health/(?:liveliness|liveness|readiness))$"
)
FREE_METHODS = frozenset({"GET", "HEAD"})


@dataclass(frozen=True, slots=True)
class Route:
    """How a gateway treats one request: ``treatment``, and the ``endpoint`` kind when it is a
    known endpoint (billed, or refused until its reader exists)."""

    treatment: Treatment
    endpoint: str | None = None

    @property
    def billed(self) -> bool:
        return self.treatment is Treatment.BILLED


# ``POST …/threads/{thread_id}/messages`` (OpenAI's Assistants API) ends as Anthropic's path does.
_THREAD_MESSAGES = re.compile(r"/threads/[^/]+/messages$")
BILLED_KINDS = tuple(endpoint.kind for endpoint in ENDPOINTS if endpoint.billed)
FREE = Route(Treatment.FREE)
UNKNOWN = Route(Treatment.REFUSED)
# The endpoints whose answers the LiteLLM hook publishes (``litellm_hook``): its other call types
# are refused even where the ASGI middleware bills the endpoint: every billed endpoint but image
# generation (its LiteLLM call type is refused: the hook does not publish its answer yet).
LITELLM_BILLED = frozenset(
    {"chat_completions", "completions", "embeddings", "responses", "messages"}
)
_BY_CALL_TYPE = {
    call_type: Route(
        Treatment.BILLED
        if endpoint.billed and endpoint.kind in LITELLM_BILLED
        else Treatment.REFUSED,
        endpoint.kind,
    )
    for endpoint in ENDPOINTS
    for call_type in endpoint.call_types
}


def http_route(method: str, path: str) -> Route:
    """The treatment of an HTTP request (see the module docstring)."""
    trimmed = path.rstrip("/")
    if method == "OPTIONS" or (method in FREE_METHODS and FREE_PATHS.search(trimmed)):
        return FREE
    for endpoint in ENDPOINTS:
        if method == endpoint.method and trimmed.endswith(endpoint.suffix):
            if endpoint.kind == "messages" and _THREAD_MESSAGES.search(trimmed):
                continue  # the Assistants API's thread messages: no model runs, not Anthropic's
            return Route(Treatment.BILLED if endpoint.billed else Treatment.REFUSED, endpoint.kind)
    return UNKNOWN


def websocket_route(path: str) -> Route:
    """A WebSocket, whatever its path (the Realtime API is one): refused, no reader bills it."""
    return Route(Treatment.REFUSED, "realtime" if path.rstrip("/").endswith("/realtime") else None)


def call_type_route(call_type: Any) -> Route:
    """The treatment of a LiteLLM ``call_type`` (a ``CallTypes`` member or its string value):
    billed for the call types of a billed endpoint, refused for every other, known or not."""
    value = getattr(call_type, "value", call_type)
    return _BY_CALL_TYPE.get(value, UNKNOWN) if isinstance(value, str) else UNKNOWN


def is_chat_completion(method: str, path: str) -> bool:
    return http_route(method, path).endpoint == "chat_completions"


# A refused request's answer. 403: the gateway understood the request and will not serve it; the
# openai client raises ``PermissionDeniedError`` at once and never retries it (it retries 408, 409,
# 429 and 5xx only), where a 5xx would be retried and a 404 read as a wrong model or URL.
NOT_BILLED_STATUS = 403
NOT_BILLED_CODE = "route_not_billed"
_SHOWN_CHARS = 200
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def shown(text: str) -> str:
    """A client's path or call type as an error message or a notification may carry it: control
    characters replaced, cut to 200 characters."""
    return _UNPRINTABLE.sub("\ufffd", text)[:_SHOWN_CHARS]


_BILLED_SUFFIXES = tuple("…" + endpoint.suffix for endpoint in ENDPOINTS if endpoint.billed)


# The endpoint of a refused route that is a billed one whose call names no account (the ASGI
# hook answered None): the gateway cannot say who would pay.
NO_ACCOUNT_ENDPOINT = "no account"


def not_billed(what: str, route: Route) -> Refusal:
    """The refusal of ``what`` (``"POST /v1/embeddings"``, ``"call type aembedding"``)."""
    if route.endpoint == NO_ACCOUNT_ENDPOINT:
        why = "its authentication names no account to bill"
    elif route.endpoint is not None:
        why = f"no reader prices {route.endpoint} yet"
    else:
        why = "it is not an endpoint this gateway knows"
    return Refusal(
        NOT_BILLED_STATUS,
        f"{shown(what)} is not billed by this gateway ({why}), so it is not served. "
        "Billed here: POST " + ", ".join(_BILLED_SUFFIXES) + ".",
        None,
        NOT_BILLED_CODE,
    )
