"""The recorded upstream's replies (tests/gateway/upstream.py) and the hook's payer setting."""

from __future__ import annotations

import pytest

from devtools.recorded_upstream import DEMO_SCENARIOS, fold, unfold
from devtools.recorded_upstream import reply as recorded_reply
from worker.gateway.litellm_hook import account_sources

from .upstream import SCENARIOS, load, reply

CHAT = sorted(name for name in SCENARIOS if not name.startswith("endpoints/"))


@pytest.mark.parametrize("scenario", CHAT)
def test_twins_carry_the_same_usage(scenario: str) -> None:
    streamed = reply(scenario, {"stream": True, "stream_options": {"include_usage": True}})
    plain = reply(scenario, {"stream": False})
    usages = [f["usage"] for f in streamed.frames or [] if isinstance(f, dict) and f.get("usage")]
    if streamed.dropped:
        assert not usages and streamed.frames[-1] != "[DONE]"
    else:
        assert (usages[-1] if usages else None) == (plain.body or {}).get("usage")


@pytest.mark.parametrize("scenario", CHAT)
def test_usage_only_when_asked(scenario: str) -> None:
    frames = reply(scenario, {"stream": True}).frames or []
    assert not any(isinstance(f, dict) and "usage" in f for f in frames)


def test_unfold_then_fold_keeps_the_body() -> None:
    body = load("clean_body").body
    assert body is not None
    again = fold(unfold(body))
    assert again["usage"] == body["usage"]
    assert again["choices"][0]["message"]["content"] == body["choices"][0]["message"]["content"]
    assert again["choices"][0]["finish_reason"] == body["choices"][0]["finish_reason"]


def test_fold_joins_tool_calls_by_index() -> None:
    body = fold(load("tool_calls").frames or [])
    calls = body["choices"][0]["message"]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["get_weather", "get_time"]
    assert calls[1]["function"]["arguments"] == '{"tz": "Europe/Paris"}'


def test_unknown_scenario_and_escapes_are_refused() -> None:
    for name in ("nope", "../../pyproject", "openai/../../streams/cr"):
        with pytest.raises(KeyError):
            load(name)


def test_account_sources() -> None:
    assert account_sources(None) == ("team", "user", "key")
    assert account_sources(" end_user , key ") == ("end_user", "key")
    for bad in (",", "team,owner"):
        with pytest.raises(ValueError, match="BILLING_LITELLM_ACCOUNT"):
            account_sources(bad)


@pytest.mark.parametrize("name", sorted(DEMO_SCENARIOS))
def test_demo_scenarios_load_and_their_twins_carry_the_same_usage(name: str) -> None:
    scenario = DEMO_SCENARIOS[name]
    streamed = recorded_reply(
        name, scenario, {"stream": True, "stream_options": {"include_usage": True}}
    )
    plain = recorded_reply(name, scenario, {"stream": False})
    assert plain.body is not None and plain.body["choices"]
    usages = [f["usage"] for f in streamed.frames or [] if isinstance(f, dict) and f.get("usage")]
    if scenario.drop_after is None:
        assert usages[-1] == plain.body["usage"]
    else:
        assert streamed.dropped and not usages
