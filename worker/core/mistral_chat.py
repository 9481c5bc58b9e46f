"""Mistral's chat template for Tekken models (instruct version 3: ``open-mistral-nemo``,
``ministral-8b-2410``, ``mistral-small-2409``, ``pixtral-12b-2409``), as token counts.

The counts are those of ``mistral-common``'s ``MistralTokenizer.encode_chat_completion`` (1.13.1,
``InstructTokenizerV3`` over ``InstructRequestNormalizer``), which
``tests/test_mistral_chat.py`` checks call by call:

* one ``<s>`` opens the prompt;
* system messages are not turns: their texts, joined by a blank line, are prepended (with a blank
  line) to the *last* user turn;
* consecutive user messages are one turn, their texts (and a message's text parts) joined by a
  blank line; a user turn is ``[INST]`` text ``[/INST]``, and the last one is preceded by
  ``[AVAILABLE_TOOLS]`` + the tool definitions as JSON + ``[/AVAILABLE_TOOLS]`` when tools are sent;
* an assistant turn is its text without trailing spaces, or ``[TOOL_CALLS]`` + its calls as JSON
  (``name``, ``arguments`` parsed when they are JSON, ``id``), then ``</s>``;
* a tool result is ``[TOOL_RESULTS]`` + ``{"content": …, "call_id": …}`` + ``[/TOOL_RESULTS]``.

Every control token is one token. JSON is written as Python's ``json.dumps`` with
``ensure_ascii=False`` writes it (``", "`` and ``": "`` separators), as mistral-common does. The
completion is what the model generates: its text, or ``[TOOL_CALLS]`` and the calls' JSON, and
``</s>`` when it stopped by itself (``stop``, ``tool_calls``).

What the template cannot count is counted as well as it can and flagged (the second value):
images and other non-text parts, a gateway's cut (``omitted_chars``: scaled, as the OpenAI rules
do), a request mistral-common would refuse (no user turn).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from worker.core.result import Choice

Count = Callable[[str], int]

CONTROL = 1  # every control token ([INST], </s>, [TOOL_CALLS], ...) is one token
STOPPED = frozenset({"stop", "tool_calls"})


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def _parsed(text: object) -> object:
    """A string that is JSON as the value it holds, else the string (mistral-common's rule)."""
    if not isinstance(text, str):
        return "" if text is None else text
    try:
        return json.loads(text)
    except ValueError:
        return text


def _text_of(content: object) -> tuple[str, bool]:
    """A message's text (parts joined by a blank line) and whether a part was not text."""
    if isinstance(content, str):
        return content, False
    parts: Iterable[object]
    if isinstance(content, Mapping):
        parts = (content,)
    elif isinstance(content, list | tuple):
        parts = content
    else:
        return "", content is not None
    texts: list[str] = []
    other = False
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, Mapping) and part.get("type") == "text":
            text = part.get("text")
            texts.append(text if isinstance(text, str) else "")
            other = other or part.get("omitted_chars") not in (None, 0)
        else:
            other = True
    return "\n\n".join(texts), other


def _call(function: object, call_id: object) -> dict[str, Any]:
    function = function if isinstance(function, Mapping) else {}
    prepared: dict[str, Any] = {
        "name": function.get("name") or "",
        "arguments": _parsed(function.get("arguments")),
    }
    if isinstance(call_id, str) and call_id and call_id != "null":
        prepared["id"] = call_id
    return prepared


def _tool_definition(tool: object) -> dict[str, Any] | None:
    if not isinstance(tool, Mapping):
        return None
    function = tool.get("function")
    if not isinstance(function, Mapping):
        function = tool if "name" in tool else None
    if function is None:
        return None
    parameters = function.get("parameters")
    return {
        "type": "function",
        "function": {
            "name": function.get("name") or "",
            "description": function.get("description") or "",
            "parameters": parameters if isinstance(parameters, Mapping) else {},
        },
    }


def _role(message: Mapping[Any, Any]) -> str:
    role = message.get("role")
    return role if role in ("system", "developer", "user", "assistant", "tool") else "user"


def prompt_tokens(count: Count, messages: object, tools: object) -> tuple[int, bool]:
    """Tokens of the prompt of a chat request by the template above, and whether any part of it
    was not counted exactly."""
    listed = (
        [m for m in messages if isinstance(m, Mapping)]
        if isinstance(messages, Sequence) and not isinstance(messages, str | bytes)
        else []
    )
    inexact = False
    system: list[str] = []
    turns: list[tuple[str, Any]] = []  # ("user", text) | ("assistant", message) | ("tool", message)
    for message in listed:
        role = _role(message)
        inexact = inexact or message.get("omitted_chars") not in (None, 0)
        if role in ("system", "developer"):
            text, other = _text_of(message.get("content"))
            system.append(text)
            inexact = inexact or other
        elif role == "user":
            text, other = _text_of(message.get("content"))
            inexact = inexact or other
            if turns and turns[-1][0] == "user":
                turns[-1] = ("user", turns[-1][1] + "\n\n" + text)
            else:
                turns.append(("user", text))
        else:
            turns.append((role, message))
    last_user = max((i for i, (kind, _) in enumerate(turns) if kind == "user"), default=-1)
    if last_user < 0:
        inexact = True  # mistral-common refuses a request without a user turn
    definitions = [
        d
        for d in (_tool_definition(t) for t in (tools if isinstance(tools, list | tuple) else ()))
        if d is not None
    ]
    total = CONTROL  # <s>
    for index, (kind, value) in enumerate(turns):
        if kind == "user":
            text = value
            if index == last_user:
                if system:
                    text = "\n\n".join(system) + "\n\n" + text
                if definitions:
                    total += 2 * CONTROL + count(_dumps(definitions))
            total += 2 * CONTROL + count(text)
        elif kind == "assistant":
            calls = value.get("tool_calls")
            if isinstance(calls, list | tuple) and calls:
                prepared = [
                    _call(c.get("function"), c.get("id")) for c in calls if isinstance(c, Mapping)
                ]
                total += CONTROL + count(_dumps(prepared))
            elif isinstance(value.get("function_call"), Mapping):
                total += CONTROL + count(_dumps([_call(value["function_call"], None)]))
            else:
                text, other = _text_of(value.get("content"))
                inexact = inexact or other or not text
                total += count(text.rstrip(" "))
            total += CONTROL  # </s>
        else:
            content, other = _text_of(value.get("content"))
            inexact = inexact or other
            result = {"content": _parsed(content), "call_id": value.get("tool_call_id") or ""}
            total += 2 * CONTROL + count(_dumps(result))
    if last_user < 0 and system:
        total += count("\n\n".join(system))
    return total, inexact


def completion_tokens(count: Count, choices: Sequence[Choice]) -> int:
    """Tokens the model generated over every choice (the template above)."""
    total = 0
    for choice in choices:
        if not isinstance(choice, Choice):
            continue
        for text in (choice.content, choice.refusal, choice.reasoning_content):
            if text and isinstance(text, str):
                total += count(text)
        calls = [
            _call({"name": c.name, "arguments": c.arguments}, c.id)
            for c in (choice.tool_calls if isinstance(choice.tool_calls, list | tuple) else ())
        ]
        legacy = choice.function_call
        if legacy is not None:
            calls.append(_call({"name": legacy.name, "arguments": legacy.arguments}, None))
        if calls:
            total += CONTROL + count(_dumps(calls))
        if choice.finish_reason in STOPPED:
            total += CONTROL  # </s>
    return total
