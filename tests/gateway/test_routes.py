"""The one table of what the gateways serve (``worker.gateway.routes``), without any server."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from litellm.types.utils import CallTypes

from worker.core.readers import ENDPOINTS as READERS
from worker.gateway.routes import (
    BILLED_KINDS,
    ENDPOINTS,
    LITELLM_BILLED,
    NOT_BILLED_STATUS,
    Route,
    Treatment,
    call_type_route,
    http_route,
    not_billed,
    websocket_route,
)

PREFIXES = ["", "/v1", "/api/v1", "/openai/deployments/gpt-4o-prod", "/scenario/clean/v1"]


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("slash", ["", "/"])
def test_chat_completions_are_billed_under_any_prefix(prefix: str, slash: str) -> None:
    route = http_route("POST", f"{prefix}/chat/completions{slash}")
    assert (route.treatment, route.endpoint) == (Treatment.BILLED, "chat_completions")


@pytest.mark.parametrize(
    ("path", "endpoint"),
    [
        ("/v1/completions", "completions"),
        ("/v1/embeddings", "embeddings"),
        ("/openai/deployments/emb/embeddings", "embeddings"),
        ("/v1/responses", "responses"),
        ("/v1/messages", "messages"),
        ("/anthropic/v1/messages/", "messages"),
    ],
)
def test_every_endpoint_with_a_reader_is_billed(path: str, endpoint: str) -> None:
    assert http_route("POST", path) == Route(Treatment.BILLED, endpoint)


def test_the_billed_endpoints_are_exactly_the_worker_readers() -> None:
    assert sorted(BILLED_KINDS) == sorted(READERS)
    assert set(BILLED_KINDS) >= LITELLM_BILLED


def test_image_generation_is_billed_over_http_and_refused_as_a_litellm_call_type() -> None:
    assert http_route("POST", "/v1/images/generations") == Route(Treatment.BILLED, "images")
    assert "images" not in LITELLM_BILLED
    assert call_type_route("aimage_generation") == Route(Treatment.REFUSED, "images")


@pytest.mark.parametrize(
    ("path", "endpoint"),
    [
        ("/v1/images/edits", "image_edits"),
        ("/v1/audio/speech", "speech"),
        ("/v1/audio/transcriptions", "transcriptions"),
        ("/v1/moderations", "moderations"),
        ("/v1/rerank", "rerank"),
    ],
)
def test_endpoints_without_a_reader_are_refused_and_named(path: str, endpoint: str) -> None:
    route = http_route("POST", path)
    assert (route.treatment, route.endpoint) == (Treatment.REFUSED, endpoint)
    refused = not_billed(f"POST {path}", route)
    error = orjson.loads(refused.body())["error"]
    assert refused.status == NOT_BILLED_STATUS == 403
    assert path in error["message"] and "not billed by this gateway" in error["message"]
    assert endpoint in error["message"]
    assert error["code"] == "route_not_billed"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/models"),
        ("GET", "/v1/models/"),
        ("GET", "/v1/models/gpt-4o-mini"),
        ("GET", "/v1/models/openai/gpt-4o-mini"),
        ("HEAD", "/models"),
        ("GET", "/health"),
        ("GET", "/healthz"),
        ("GET", "/readyz"),
        ("GET", "/livez"),
        ("GET", "/health/liveliness"),
        ("GET", "/health/readiness"),
        ("OPTIONS", "/v1/chat/completions"),
    ],
)
def test_the_model_list_and_health_are_free(method: str, path: str) -> None:
    assert http_route(method, path).treatment is Treatment.FREE


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/chat/completions"),  # stored completions: not a chat completion
        ("DELETE", "/v1/models/ft:gpt-4o:acme"),  # deletes a fine-tuned model
        ("POST", "/v1/models"),
        ("GET", "/v1/mymodels"),
        ("POST", "/v1/responses/resp_1/cancel"),
        ("POST", "/v1/threads/thread_1/messages"),  # the Assistants API: no model runs
        ("POST", "/v1/batches"),
        ("POST", "/v1/chat/completions/extra"),
        ("GET", "/"),
    ],
)
def test_anything_else_is_refused_as_unknown(method: str, path: str) -> None:
    route = http_route(method, path)
    assert (route.treatment, route.endpoint) == (Treatment.REFUSED, None)
    message = orjson.loads(not_billed(f"{method} {path}", route).body())["error"]["message"]
    assert "not an endpoint this gateway knows" in message


@given(st.text(max_size=300))
def test_every_path_has_exactly_one_treatment_and_a_printable_refusal(path: str) -> None:
    for method in ("GET", "POST", "PUT", "DELETE"):
        route = http_route(method, path)
        assert route.treatment in Treatment
        message = orjson.loads(not_billed(f"{method} {path}", route).body())["error"]["message"]
        assert not any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F for c in message)
        assert len(message) < 600


def test_websockets_are_refused_the_realtime_api_by_name() -> None:
    assert websocket_route("/v1/realtime") == websocket_route("/openai/v1/realtime/")
    assert websocket_route("/v1/realtime").endpoint == "realtime"
    assert websocket_route("/anything").treatment is Treatment.REFUSED


def test_litellm_call_types_bill_the_billed_endpoints_and_refuse_every_other() -> None:
    for call_type in CallTypes:
        route = call_type_route(call_type)
        assert route == call_type_route(call_type.value)
        billed = [e for e in ENDPOINTS if e.kind in LITELLM_BILLED]
        expected = (
            Treatment.BILLED
            if any(call_type.value in e.call_types for e in billed)
            else (Treatment.REFUSED)
        )
        assert route.treatment is expected, call_type
    assert call_type_route("aembedding").endpoint == "embeddings"
    for billed in ("aresponses", "atext_completion", "aembedding", "anthropic_messages"):
        assert call_type_route(billed).treatment is Treatment.BILLED, billed
    for refused in ("aimage_generation", "amoderation", "aspeech", "atranscription"):
        assert call_type_route(refused).treatment is Treatment.REFUSED, refused
    assert call_type_route("_arealtime").endpoint is None
    assert call_type_route("pass_through_endpoint").treatment is Treatment.REFUSED
    assert call_type_route(None).treatment is Treatment.REFUSED


def test_each_endpoint_is_found_by_its_own_path_and_call_types() -> None:
    """A row's suffix is not shadowed by another's, so flipping ``billed`` bills that row alone."""
    for endpoint in ENDPOINTS:
        assert http_route(endpoint.method, "/v1" + endpoint.suffix).endpoint == endpoint.kind
        for call_type in endpoint.call_types:
            assert call_type_route(call_type).endpoint == endpoint.kind
