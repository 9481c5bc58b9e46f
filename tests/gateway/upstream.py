"""The tests' recorded upstream: ``devtools.recorded_upstream`` serving the tests' fixtures.

| scenario | recorded in (tests/fixtures) | what it is |
|---|---|---|
| ``clean`` | providers/openai/n_ignored_stream.json | one choice, stop, a ``choices: []`` usage chunk |
| ``clean_body`` | providers/openai/chat_object_details.json | a non-streamed body with usage details |
| ``tool_calls`` | streams/tool_calls_parallel.sse | two parallel tool calls by index, usage chunk |
| ``n2`` | streams/n2_interleaved.sse | two choices interleaved, finishes stop and length |
| ``usage_less`` | providers/openai/function_call_stream.json | a stream that never carries usage |
| ``error_finish`` | providers/deepseek/insufficient_system_resource.json | an interrupted generation, usage sent |
| ``dropped`` | ``clean``, cut | the connection dropped after the first chunk, mid-stream |
| ``slow`` | ``clean``, paused | three seconds of silence after the first chunk (a client leaves); a non-streamed answer, before its body |
| ``endpoints/<name>`` | endpoints/<name>.json | another endpoint's stream and body (Responses, Completions, Embeddings, Anthropic Messages) |

Any provider fixture is a scenario too, as ``<provider>/<name>``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devtools import recorded_upstream
from devtools.recorded_upstream import SCENARIO_HEADER, Recording, Scenario, Sent

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
PROVIDERS = FIXTURES / "providers"
_CLEAN = FIXTURES / "providers/openai/n_ignored_stream.json"

SCENARIOS: dict[str, Scenario] = {
    "clean": Scenario(_CLEAN),
    "clean_body": Scenario(FIXTURES / "providers/openai/chat_object_details.json"),
    "tool_calls": Scenario(FIXTURES / "streams/tool_calls_parallel.sse"),
    "n2": Scenario(FIXTURES / "streams/n2_interleaved.sse"),
    "usage_less": Scenario(FIXTURES / "providers/openai/function_call_stream.json"),
    "error_finish": Scenario(FIXTURES / "providers/deepseek/insufficient_system_resource.json"),
    "dropped": Scenario(_CLEAN, drop_after=1),
    "slow": Scenario(_CLEAN, pause=(1, 3.0)),
}
# The endpoints beside chat (tests/fixtures/endpoints): each recording holds its stream and its
# body, named ``endpoints/<file>``.
ENDPOINTS = FIXTURES / "endpoints"
SCENARIOS.update(
    {f"endpoints/{path.stem}": Scenario(path) for path in sorted(ENDPOINTS.glob("*.json"))}
)

__all__ = ["SCENARIOS", "SCENARIO_HEADER", "Sent", "Upstream", "load", "reply"]


class Upstream(recorded_upstream.Upstream):
    @classmethod
    def start(  # type: ignore[override]
        cls,
        scenarios: dict[str, Scenario] | None = None,
        library: Path | None = None,
        port: int = 0,
    ) -> recorded_upstream.Upstream:
        """The recorded upstream serving the tests' scenarios and every provider fixture."""
        return recorded_upstream.Upstream.start(scenarios or SCENARIOS, library or PROVIDERS, port)


def load(name: str) -> Recording:
    return recorded_upstream.load(recorded_upstream.find(name, SCENARIOS, PROVIDERS).path)


def reply(name: str, request: dict[str, Any]) -> Sent:
    return recorded_upstream.reply(
        name, recorded_upstream.find(name, SCENARIOS, PROVIDERS), request
    )
