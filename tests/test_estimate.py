"""Token estimates: the model table, the cookbook's worked examples, completions, odd input."""

from __future__ import annotations

import logging
import socket
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worker.core import estimate as est
from worker.core.estimate import (
    EncodingTable,
    estimate,
    estimate_completion,
    estimate_prompt,
    is_approximate,
)
from worker.core.result import Choice, Estimate, ToolCall
from worker.core.vocab import load_encoding

# ------------------------------------------------------------------ the cookbook's worked examples
#
# Source: openai/openai-cookbook, examples/How_to_count_tokens_with_tiktoken.ipynb (commit
# c81359cdc6744f001e40c08a192604c5113fdab3), cells 15 and 17. The inputs are copied verbatim; the
# expected numbers are the ones the notebook prints as "prompt tokens counted by the OpenAI API".

COOKBOOK_MESSAGES = [
    {
        "role": "system",
        "content": "You are a helpful, pattern-following assistant that translates corporate jargon into plain English.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "New synergies will help drive top-line growth.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Things working well together will increase revenue.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Let's talk later when we're less busy about how to do better.",
    },
    {
        "role": "user",
        "content": "This late pivot means we don't have time to boil the ocean for the client deliverable.",
    },
]

COOKBOOK_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_current_weather",
            "description": "Get the current weather in a given location",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {
                        "type": "string",
                        "description": "The city and state, e.g. San Francisco, CA",
                    },
                    "unit": {
                        "type": "string",
                        "description": "The unit of temperature to return",
                        "enum": ["celsius", "fahrenheit"],
                    },
                },
                "required": ["location"],
            },
        },
    }
]

COOKBOOK_TOOL_MESSAGES = [
    {
        "role": "system",
        "content": "You are a helpful assistant that can answer to questions about the weather.",
    },
    {
        "role": "user",
        "content": "What's the weather like in San Francisco?",
    },
]


@pytest.mark.parametrize(
    ("model", "api_prompt_tokens"),
    [
        ("gpt-3.5-turbo", 129),
        ("gpt-4-0613", 129),
        ("gpt-4", 129),
        ("gpt-4o", 124),
        ("gpt-4o-mini", 124),
    ],
)
def test_cookbook_messages_match_api(model: str, api_prompt_tokens: int) -> None:
    assert estimate_prompt(model, COOKBOOK_MESSAGES) == api_prompt_tokens


@pytest.mark.parametrize(
    ("model", "api_prompt_tokens"),
    [
        ("gpt-3.5-turbo", 105),
        ("gpt-4", 105),
        ("gpt-4o", 101),
        ("gpt-4o-mini", 101),
    ],
)
def test_cookbook_tools_match_api(model: str, api_prompt_tokens: int) -> None:
    assert estimate_prompt(model, COOKBOOK_TOOL_MESSAGES, COOKBOOK_TOOLS) == api_prompt_tokens


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        # The dated snapshots the cookbook's function resolves the aliases above to.
        ("gpt-3.5-turbo-0125", 129),
        ("gpt-4o-2024-08-06", 124),
        ("gpt-4o-mini-2024-07-18", 124),
        ("ft:gpt-4o-mini-2024-07-18:acme::abc123", 124),
    ],
)
def test_cookbook_messages_for_snapshots(model: str, expected: int) -> None:
    assert estimate_prompt(model, COOKBOOK_MESSAGES) == expected


def test_cookbook_example_is_not_approximate() -> None:
    result = estimate("gpt-4o", COOKBOOK_TOOL_MESSAGES, COOKBOOK_TOOLS, [])
    assert result == Estimate(
        prompt_tokens=101, completion_tokens=0, approximate=False, segment="tools"
    )


# ------------------------------------------------------------------ model table


@pytest.mark.parametrize(
    ("model", "encoding", "approximate"),
    [
        ("gpt-4o", "o200k_base", False),
        ("gpt-4o-2024-08-06", "o200k_base", False),
        ("gpt-4o-mini", "o200k_base", False),
        ("chatgpt-4o-latest", "o200k_base", False),
        ("ft:gpt-4o-mini:org::id", "o200k_base", False),
        ("ft:gpt-4o-mini-2024-07-18:my-org:custom:9abc", "o200k_base", False),
        ("gpt-4.1", "o200k_base", False),
        ("gpt-4.1-mini-2025-04-14", "o200k_base", False),
        ("gpt-4.5-preview", "o200k_base", False),
        ("gpt-5", "o200k_base", False),
        ("gpt-5-mini", "o200k_base", False),
        ("gpt-5.1", "o200k_base", False),
        ("o1", "o200k_base", False),
        ("o1-mini", "o200k_base", False),
        ("o1-2024-12-17", "o200k_base", False),
        ("o3-mini", "o200k_base", False),
        ("o4-mini", "o200k_base", False),
        ("GPT-4o", "o200k_base", False),
        ("openai/gpt-4o", "o200k_base", False),
        ("gpt-4", "cl100k_base", False),
        ("gpt-4-0613", "cl100k_base", False),
        ("gpt-4-32k", "cl100k_base", False),
        ("gpt-4-turbo", "cl100k_base", False),
        ("gpt-4-turbo-2024-04-09", "cl100k_base", False),
        ("gpt-4-1106-preview", "cl100k_base", False),
        ("ft:gpt-4-0613:org::id", "cl100k_base", False),
        ("gpt-3.5-turbo", "cl100k_base", False),
        ("gpt-3.5-turbo-0125", "cl100k_base", False),
        ("gpt-35-turbo", "cl100k_base", False),
        ("ft:gpt-3.5-turbo-0125:org::id", "cl100k_base", False),
        ("llama-3.1-8b", "o200k_base", True),
        ("meta-llama/llama-3.1-8b-instruct", "o200k_base", True),
        ("mistral-large-latest", "o200k_base", True),
        ("o100", "o200k_base", True),
        ("gpt-4.2", "o200k_base", True),
        ("", "o200k_base", True),
    ],
)
def test_default_table(model: str, encoding: str, approximate: bool) -> None:
    tokenizer = est.DEFAULT_TABLE.resolve(model)
    assert (tokenizer.encoding, tokenizer.approximate) == (encoding, approximate)
    assert is_approximate(model) is approximate


def test_table_from_mapping_uses_longest_prefix() -> None:
    table = EncodingTable.from_mapping(
        {"acme": "cl100k_base", "acme-next": "o200k_base"}, default="cl100k_base"
    )
    assert table.resolve("acme-1").encoding == "cl100k_base"
    assert table.resolve("acme-next-2").encoding == "o200k_base"
    assert table.resolve("acme-next-2").approximate is False
    assert table.resolve("gpt-4o") == est.Tokenizer("cl100k_base", approximate=True)
    assert estimate_prompt("acme-1", COOKBOOK_MESSAGES, table=table) == 129
    assert estimate_prompt("acme-next", COOKBOOK_MESSAGES, table=table) == 124


def test_table_refuses_unknown_encoding() -> None:
    with pytest.raises(ValueError, match="p50k_base"):
        EncodingTable({"davinci": "p50k_base"})


def test_non_string_model_is_approximate() -> None:
    assert is_approximate(None) is True  # type: ignore[arg-type]
    assert estimate_prompt(42, [{"role": "user", "content": "hi"}]) > 0  # type: ignore[arg-type]


# ------------------------------------------------------------------ prompt rules


def _tokens(model: str, text: str) -> int:
    return len(load_encoding(est.DEFAULT_TABLE.resolve(model).encoding).encode_ordinary(text))


def test_empty_prompt_is_the_reply_primer() -> None:
    assert estimate_prompt("gpt-4o", []) == 3


def test_message_and_name_overheads() -> None:
    plain = {"role": "user", "content": "hello there"}
    named = {"role": "user", "name": "alice", "content": "hello there"}
    base = estimate_prompt("gpt-4o", [plain])
    assert base == 3 + _tokens("gpt-4o", "user") + _tokens("gpt-4o", "hello there") + 3
    assert estimate_prompt("gpt-4o", [named]) == base + _tokens("gpt-4o", "alice") + 1


def test_content_parts_count_text_and_images() -> None:
    as_string = [{"role": "user", "content": "Describe this picture. Be brief."}]
    as_parts = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Describe this picture."},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                {"type": "text", "text": " Be brief."},
            ],
        }
    ]
    text_only = (
        estimate_prompt("gpt-4o", as_string)
        - _tokens("gpt-4o", "Describe this picture. Be brief.")
        + _tokens("gpt-4o", "Describe this picture.")
        + _tokens("gpt-4o", " Be brief.")
    )
    # The image's size is unknown: a 1024 x 1024 image at detail auto (high) is assumed, which the
    # guide prices at 765 tokens on gpt-4o (4 tiles x 170 + 85), and the estimate is approximate.
    assert estimate_prompt("gpt-4o", as_parts) == text_only + 765
    assert estimate("gpt-4o", as_parts, (), []).approximate is True
    assert estimate("gpt-4o", as_string, (), []).approximate is False


def _image_message(
    image: dict[str, Any], model_text: str = "What is this?"
) -> list[dict[str, Any]]:
    return [
        {
            "role": "user",
            "content": [{"type": "text", "text": model_text}, {"type": "image_url", **image}],
        }
    ]


@pytest.mark.parametrize(
    ("model", "image", "image_tokens"),
    [
        # The gateway's placeholder: detail and size, the URL dropped. Figures from OpenAI's guide
        # "Images and vision", "Calculating costs" (tests/test_image_tokens.py cites it).
        ("gpt-4o", {"image_url": {"detail": "high", "width": 1024, "height": 1024}}, 765),
        ("gpt-4o", {"image_url": {"detail": "high", "width": 2048, "height": 4096}}, 1105),
        ("gpt-4o", {"image_url": {"detail": "low", "width": 4096, "height": 8192}}, 85),
        (
            "gpt-4o-2024-08-06",
            {"image_url": {"detail": "auto", "width": 2048, "height": 4096}},
            1105,
        ),
        ("gpt-4o-mini", {"image_url": {"detail": "low", "width": 10, "height": 10}}, 2833),
        ("gpt-4.1-mini", {"image_url": {"detail": "high", "width": 1024, "height": 1024}}, 1659),
        ("openai/o3", {"image_url": {"detail": "low"}}, 75),  # low: the size does not matter
    ],
)
def test_image_parts_are_priced_by_the_guide(
    model: str, image: dict[str, Any], image_tokens: int
) -> None:
    text_only = estimate_prompt(model, [{"role": "user", "content": "What is this?"}])
    got = estimate(model, _image_message(image), (), [])
    assert got.prompt_tokens == text_only + image_tokens
    assert got.approximate is False


@pytest.mark.parametrize(
    "image",
    [
        {"image_url": {"detail": "high"}},  # the gateway could not read the size
        {"image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "high"}},
        {"image_url": {"detail": "high", "width": 0, "height": 1024}},
        {"image_url": {"detail": "high", "width": "1024", "height": 1024}},
        {"image_url": {"detail": "high", "width": True, "height": 1024}},
    ],
)
def test_an_image_of_unknown_size_is_assumed_square_and_flagged(image: dict[str, Any]) -> None:
    text_only = estimate_prompt("gpt-4o", [{"role": "user", "content": "What is this?"}])
    got = estimate("gpt-4o", _image_message(image), (), [])
    assert got.prompt_tokens == text_only + 765  # 1024 x 1024 at high
    assert got.approximate is True


def test_a_text_cut_by_the_gateway_is_scaled_from_its_prefix() -> None:
    prefix = "The quick brown fox jumps over the lazy dog. " * 20  # 900 characters
    whole = [{"role": "user", "content": [{"type": "text", "text": prefix}]}]
    cut = [{"role": "user", "content": [{"type": "text", "text": prefix, "omitted_chars": 2700}]}]
    prefix_tokens = _tokens("gpt-4o", prefix)
    base = estimate_prompt("gpt-4o", whole) - prefix_tokens
    got = estimate("gpt-4o", cut, (), [])
    # (900 + 2,700) / 900 = 4 times the prefix's tokens.
    assert got.prompt_tokens == base + 4 * prefix_tokens
    assert got.approximate is True
    # Rounded up: 1 character omitted after 900 is 1/900 more of the prefix's tokens.
    one_more = [{"role": "user", "content": [{"type": "text", "text": prefix, "omitted_chars": 1}]}]
    assert estimate_prompt("gpt-4o", one_more) == base + prefix_tokens + 1
    # Nothing omitted is the plain count.
    none = [{"role": "user", "content": [{"type": "text", "text": prefix, "omitted_chars": 0}]}]
    assert estimate("gpt-4o", none, (), []) == estimate("gpt-4o", whole, (), [])


@pytest.mark.parametrize("omitted", [-5, "12", 1.5, True, 2**60, None])
def test_a_cut_text_without_a_usable_count_is_its_prefix(omitted: object) -> None:
    part = {"type": "text", "text": "hello there", "omitted_chars": omitted}
    got = estimate("gpt-4o", [{"role": "user", "content": [part]}], (), [])
    plain = estimate("gpt-4o", [{"role": "user", "content": "hello there"}], (), [])
    assert got.prompt_tokens == plain.prompt_tokens
    assert got.approximate is (omitted is not None)


def test_an_empty_prefix_with_omitted_text_is_flagged() -> None:
    part = {"type": "text", "text": "", "omitted_chars": 5000}
    assert estimate("gpt-4o", [{"role": "user", "content": [part]}], (), []).approximate is True


@pytest.mark.parametrize(
    "part",
    [
        {"type": "input_audio", "input_audio": {"format": "wav", "omitted_bytes": 48000}},
        {"type": "file", "file": {"filename": "a.pdf", "omitted_bytes": 120000}},
    ],
)
def test_audio_and_file_placeholders_stay_uncounted(part: dict[str, Any]) -> None:
    text = {"type": "text", "text": "Transcribe this."}
    got = estimate("gpt-4o", [{"role": "user", "content": [text, part]}], (), [])
    plain = estimate("gpt-4o", [{"role": "user", "content": [text]}], (), [])
    assert got.prompt_tokens == plain.prompt_tokens
    assert got.approximate is True


def test_assistant_tool_calls_and_tool_results_are_counted() -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_current_weather", "arguments": '{"location": "Paris"}'},
    }
    without = [{"role": "assistant", "content": None}]
    with_call = [{"role": "assistant", "content": None, "tool_calls": [call]}]
    added = _tokens("gpt-4o", "get_current_weather") + _tokens("gpt-4o", '{"location": "Paris"}')
    assert estimate_prompt("gpt-4o", with_call) == estimate_prompt("gpt-4o", without) + added

    result = [{"role": "tool", "tool_call_id": "call_1", "content": "22C"}]
    assert estimate_prompt("gpt-4o", result) == (
        3 + sum(_tokens("gpt-4o", text) for text in ("tool", "call_1", "22C")) + 3
    )


def test_legacy_functions_shape_counts_like_tools() -> None:
    functions = [COOKBOOK_TOOLS[0]["function"]]
    assert estimate_prompt("gpt-4o", COOKBOOK_TOOL_MESSAGES, functions) == 101


def test_tool_without_properties_or_description() -> None:
    tool = {"type": "function", "function": {"name": "ping", "parameters": {"type": "object"}}}
    expected = 3 + 7 + _tokens("gpt-4o", "ping:") + 12
    assert estimate_prompt("gpt-4o", [], [tool]) == expected


def test_enum_and_trailing_period_rules() -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "f",
            "description": "Does a thing.",
            "parameters": {
                "type": "object",
                "properties": {"mode": {"type": "string", "description": "Mode.", "enum": ["a"]}},
            },
        },
    }
    t = _tokens
    expected = (
        3  # reply primer
        + 10  # func_init (cl100k)
        + t("gpt-4", "f:Does a thing")
        + 3  # prop_init
        + 3  # prop_key
        - 3  # enum_init
        + 3  # enum_item
        + t("gpt-4", "a")
        + t("gpt-4", "mode:string:Mode")
        + 12  # func_end
    )
    assert estimate_prompt("gpt-4", [], [tool]) == expected


# ------------------------------------------------------------------ completions


def test_completion_counts_every_text_field_of_every_choice() -> None:
    choices = [
        Choice(index=0, content="The weather in Paris is mild.", reasoning_content="Think."),
        Choice(index=1, refusal="I can't help with that."),
        Choice(
            index=2,
            tool_calls=[
                ToolCall(index=0, name="get_current_weather", arguments='{"location":"Paris"}'),
                ToolCall(index=1, name=None, arguments=""),
            ],
        ),
    ]
    texts = [
        "The weather in Paris is mild.",
        "Think.",
        "I can't help with that.",
        "get_current_weather",
        '{"location":"Paris"}',
    ]
    for model in ("gpt-4o", "gpt-4"):
        assert estimate_completion(model, choices) == sum(_tokens(model, text) for text in texts)


def test_completion_known_count() -> None:
    # "tiktoken is great!" is 6 tokens in both encodings (the cookbook's encode example).
    assert estimate_completion("gpt-4o", [Choice(index=0, content="tiktoken is great!")]) == 6
    assert estimate_completion("gpt-4", [Choice(index=0, content="tiktoken is great!")]) == 6


def test_completion_of_nothing() -> None:
    assert estimate_completion("gpt-4o", []) == 0
    assert estimate_completion("gpt-4o", [Choice(index=0)]) == 0


def test_special_token_text_is_ordinary_text() -> None:
    choice = Choice(index=0, content="<|endoftext|>")
    assert estimate_completion("gpt-4o", [choice]) == _tokens("gpt-4o", "<|endoftext|>") > 1
    assert estimate_prompt("gpt-4", [{"role": "user", "content": "<|endofprompt|>"}]) > 7


def test_lone_surrogates_do_not_raise() -> None:
    assert estimate_completion("gpt-4o", [Choice(index=0, content="a\ud800b")]) > 0
    assert estimate_prompt("gpt-4o", [{"role": "user", "content": "\udfff"}]) > 3


def test_estimate_combines_and_flags_unknown_models() -> None:
    choices = [Choice(index=0, content="Hello!")]
    known = estimate("gpt-4o-mini", COOKBOOK_MESSAGES, (), choices)
    assert known == Estimate(124, _tokens("gpt-4o", "Hello!"), approximate=False, segment="latin")
    unknown = estimate("llama-3.1-8b", COOKBOOK_MESSAGES, (), choices)
    assert unknown == Estimate(124, _tokens("gpt-4o", "Hello!"), approximate=True, segment="latin")


def test_nothing_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    secret = "the launch code is 0000 swordfish"
    with caplog.at_level(logging.DEBUG):
        estimate(
            "mystery-model",
            [{"role": "user", "content": secret}, "junk", {"content": [{"type": "image_url"}]}],
            [{"function": {"name": secret}}],
            [Choice(index=0, content=secret)],
        )
    assert secret not in caplog.text
    assert not [record for record in caplog.records if record.name.startswith("worker")]


def test_estimates_use_no_network(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("network used")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    load_encoding.cache_clear()
    try:
        assert estimate_prompt("gpt-4", COOKBOOK_MESSAGES) == 129
        assert estimate_prompt("gpt-4o", COOKBOOK_MESSAGES) == 124
    finally:
        load_encoding.cache_clear()
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ odd input never raises

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=40),
    st.binary(max_size=10),
    st.sampled_from(
        ["text", "image_url", "input_image", "refusal", "function", "name", "content", ".", "low"]
    ),
)
_json = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(
            st.one_of(
                st.sampled_from(
                    [
                        "role",
                        "content",
                        "name",
                        "text",
                        "type",
                        "tool_calls",
                        "function",
                        "function_call",
                        "arguments",
                        "description",
                        "parameters",
                        "properties",
                        "enum",
                        "refusal",
                        "image_url",
                        "url",
                        "detail",
                        "width",
                        "height",
                        "omitted_chars",
                    ]
                ),
                st.text(max_size=8),
                st.integers(),
            ),
            children,
            max_size=5,
        ),
    ),
    max_leaves=20,
)
_models = st.one_of(
    st.sampled_from(["gpt-4o", "gpt-4", "llama-3.1-8b", "ft:gpt-4o-mini:x::y", "ft:", "/"]),
    st.text(max_size=20),
)
_optional_text = st.one_of(st.none(), st.text(max_size=60), st.integers())
_choices = st.lists(
    st.builds(
        Choice,
        index=st.integers(0, 3),
        content=_optional_text,
        refusal=_optional_text,
        reasoning_content=_optional_text,
        tool_calls=st.one_of(
            st.lists(
                st.builds(ToolCall, index=st.integers(0, 3), name=_optional_text, arguments=_json),
                max_size=3,
            ),
            st.none(),
        ),
    ),
    max_size=3,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=_models, messages=_json, tools=_json, choices=_choices)
def test_odd_input_never_raises(model: str, messages: Any, tools: Any, choices: Any) -> None:
    result = estimate(model, messages, tools, choices)
    assert isinstance(result, Estimate)
    assert result.prompt_tokens >= 3
    assert result.completion_tokens >= 0
    assert estimate_prompt(model, messages, tools) == result.prompt_tokens
    assert estimate_completion(model, choices) == result.completion_tokens


@settings(max_examples=100, deadline=None)
@given(
    messages=st.lists(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["system", "user", "assistant"]), "content": st.text()},
            optional={"name": st.text(min_size=1, max_size=10)},
        ),
        max_size=5,
    )
)
def test_well_formed_messages_follow_the_cookbook_formula(messages: list[dict[str, str]]) -> None:
    encoding = load_encoding("o200k_base")
    expected = 3
    for message in messages:
        expected += 3
        for key, value in message.items():
            expected += len(encoding.encode_ordinary(value))
            if key == "name":
                expected += 1
    assert estimate_prompt("gpt-4o", messages) == expected
