"""The Tekken estimate counts a call exactly as Mistral's own tokenizer does (``mistral-common``,
the oracle: ``tests/mistral_oracle.py``), on the corpus of ``tests/mistral_corpus.py`` and on the
template's edges: system prompts, merged turns, text parts, tools, tool results."""

from __future__ import annotations

import json

import pytest

from tests.mistral_corpus import SEGMENTS, calls
from worker.core.estimate import (
    DEFAULT_TABLE,
    MISTRAL_TEMPLATE,
    TEKKEN,
    estimate,
    estimate_completion,
    estimate_prompt,
)
from worker.core.result import Choice, ToolCall
from worker.core.vocab import load_encoding

oracle = pytest.importorskip("tests.mistral_oracle", reason="the mistral extra is not installed")

MODEL = "open-mistral-nemo"


@pytest.mark.parametrize(
    "model",
    [
        "open-mistral-nemo",
        "open-mistral-nemo-2407",
        "mistralai/Mistral-Nemo-Instruct-2407",
        "ministral-8b-2410",
        "mistral-small-2409",
        "pixtral-12b-2409",
    ],
)
def test_the_tekken_family_resolves_to_the_real_tokenizer(model: str) -> None:
    tokenizer = DEFAULT_TABLE.resolve(model)
    assert (tokenizer.encoding, tokenizer.template, tokenizer.approximate) == (
        TEKKEN,
        MISTRAL_TEMPLATE,
        False,
    )


@pytest.mark.parametrize("model", ["mistral-large-2411", "mistral-small-2501", "claude-3-5-sonnet"])
def test_a_family_without_a_shipped_tokenizer_stays_approximate(model: str) -> None:
    assert DEFAULT_TABLE.resolve(model).approximate


def test_the_shipped_ranks_count_every_text_as_mistral_common_does() -> None:
    encoding = load_encoding(TEKKEN)
    texts = []
    for call in calls(300, 11):
        texts += [m["content"] for m in call.messages if isinstance(m.get("content"), str)]
        texts += [c.content for c in call.choices if c.content]
    texts += [
        "",
        " ",
        "\n\n\n",
        "a" * 5000,
        "\uff11\uff12\uff13 fullwidth digits",
        "naïve café 😀🎉",
        "\t\tx  y\r\n",
    ]
    differ = [t for t in texts if len(encoding.encode_ordinary(t)) != oracle.text_tokens(t)]
    assert len(texts) > 1000
    assert differ == []


@pytest.mark.parametrize("kind", SEGMENTS)
def test_every_call_of_the_corpus_is_counted_exactly(kind: str) -> None:
    corpus = calls(120, 3, {kind: 1})
    for call in corpus:
        assert estimate_prompt(MODEL, call.messages, call.tools) == oracle.prompt_tokens(
            call.messages, call.tools
        )
        assert estimate_completion(MODEL, call.choices) == oracle.completion_tokens(call.choices[0])


EDGES = [
    # two system messages, one after a turn: joined and put before the last user turn
    [
        {"role": "system", "content": "First rule."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!   "},
        {"role": "user", "content": "Again"},
    ],
    # consecutive user messages and text parts are one turn, joined by blank lines
    [
        {"role": "user", "content": "one"},
        {
            "role": "user",
            "content": [{"type": "text", "text": "two"}, {"type": "text", "text": "3"}],
        },
    ],
    # a tool result whose content is not JSON, and arguments that are not JSON
    [
        {"role": "user", "content": "call it"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "abcdefghi",
                    "type": "function",
                    "function": {"name": "f", "arguments": "{x"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "abcdefghi", "content": "plain words, not JSON"},
    ],
]


@pytest.mark.parametrize("messages", EDGES)
@pytest.mark.parametrize("with_tools", [False, True])
def test_the_template_edges_match(messages: list[dict[str, object]], with_tools: bool) -> None:
    tools = [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "g", "description": "Gets. Things."}},
    ]
    tools = tools if with_tools else []
    assert estimate_prompt(MODEL, messages, tools) == oracle.prompt_tokens(messages, tools)


def test_a_tool_call_completion_and_a_cut_one() -> None:
    call = ToolCall(0, "abcdefghi", "function", "lookup", json.dumps({"q": "Zürich", "n": 3}))
    stopped = Choice(0, "assistant", tool_calls=[call], finish_reason="tool_calls")
    assert estimate_completion(MODEL, [stopped]) == oracle.completion_tokens(stopped)
    cut = Choice(0, "assistant", "Once upon a time", finish_reason="length")
    # no </s> when the model was stopped by the length limit
    assert estimate_completion(MODEL, [cut]) == oracle.text_tokens("Once upon a time")


def test_an_image_part_makes_the_estimate_approximate() -> None:
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
            ],
        }
    ]
    assert estimate(MODEL, messages, [], []).approximate
    assert not estimate(MODEL, [{"role": "user", "content": "x"}], [], []).approximate
