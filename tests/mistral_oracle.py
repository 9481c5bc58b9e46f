"""Mistral's own counts of a chat call (``mistral-common``, the ``mistral`` extra): the oracle the
Tekken estimate is checked against. Imported only where ``mistral_common`` is installed."""

from __future__ import annotations

import functools
import warnings
from typing import Any

from mistral_common.protocol.instruct.messages import AssistantMessage
from mistral_common.protocol.instruct.request import ChatCompletionRequest
from mistral_common.protocol.instruct.tool_calls import FunctionCall, ToolCall
from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

from worker.core.result import Choice


@functools.cache
def tekken() -> MistralTokenizer:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return MistralTokenizer.v3(is_tekken=True)


def prompt_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
    request = ChatCompletionRequest.from_openai(messages=messages, tools=tools or None)
    return len(tekken().encode_chat_completion(request).tokens)


def completion_tokens(choice: Choice) -> int:
    """The assistant turn the choice is, as mistral-common encodes it (``</s>`` included)."""
    calls = [
        ToolCall(id=c.id or "null", function=FunctionCall(name=c.name or "", arguments=c.arguments))
        for c in choice.tool_calls
    ]
    message = AssistantMessage(content=None if calls else choice.content, tool_calls=calls or None)
    instruct = tekken().instruct_tokenizer
    return len(instruct.encode_assistant_message(message, is_before_last_user_message=False))


def text_tokens(text: str) -> int:
    return len(tekken().instruct_tokenizer.tokenizer.encode(text, bos=False, eos=False))
