"""Simulated conversation text: prompts, completions and tool definitions from a small vocabulary.

The words are random; in spirit they are personal data, so nothing here or downstream logs them.
Token counts are plausible rather than exact: about 1.3 tokens per word plus a per-message overhead,
as the OpenAI cookbook counts them.
"""

from __future__ import annotations

import random
from typing import Any

import orjson

_WORDS = """
    the a an of to in and or for with on at by from about into over after before under between
    account invoice order payment refund balance customer service request report summary update
    please could would should can will may might must need want help explain describe compare
    list show find check review write draft translate summarize fix improve suggest plan schedule
    meeting project team deadline budget quarter revenue cost price usage token model stream
    data table chart query error issue bug feature release version server client network cache
    database index record field value number date time week month year today tomorrow morning
    weather city travel flight hotel train ticket booking address phone email message letter
    recipe dinner garden music movie book story poem song history science physics biology
    question answer reason example detail step result option choice idea problem solution
    quick short long simple clear careful friendly formal brief complete correct important new
    first second third next last final main other same different small large high low early late
    is are was were be been has have had do does did make made take took give gave get got
    it this that these those they we you he she i my your our their its what which who how why
    """
VOCABULARY = tuple(_WORDS.split())
PUNCTUATION = (".", ",", ".", "?", "!", ":", ";")
REFUSAL_TEXT = "I'm sorry, but I can't help with that request."

TOOLS: tuple[dict[str, Any], ...] = (
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "description": "Find an order by its number",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_docs",
            "description": "Search the knowledge base",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                "required": ["query"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "create_ticket",
            "description": "Open a support ticket",
            "parameters": {
                "type": "object",
                "properties": {"title": {"type": "string"}, "priority": {"type": "string"}},
                "required": ["title"],
            },
        },
    },
)


def words(rng: random.Random, count: int) -> str:
    """``count`` random words as a sentence-ish string."""
    out = []
    for i in range(count):
        word = rng.choice(VOCABULARY)
        if i == 0 or out[-1].endswith("."):
            word = word.capitalize()
        if i == count - 1 or rng.random() < 0.08:
            word += "."
        out.append(word)
    return " ".join(out)


def lognormal_int(rng: random.Random, mu: float, sigma: float, low: int, high: int) -> int:
    return max(low, min(high, int(rng.lognormvariate(mu, sigma))))


def messages(rng: random.Random) -> list[dict[str, str]]:
    """A system and a user message; now and then an earlier exchange in between."""
    result = [{"role": "system", "content": words(rng, lognormal_int(rng, 2.8, 0.6, 3, 200))}]
    if rng.random() < 0.2:
        result.append({"role": "user", "content": words(rng, lognormal_int(rng, 3.0, 0.8, 2, 400))})
        result.append(
            {"role": "assistant", "content": words(rng, lognormal_int(rng, 3.5, 0.8, 2, 600))}
        )
    # Mostly short questions, sometimes a pasted document of a few thousand words.
    size = lognormal_int(rng, 3.8, 1.2, 3, 3000)
    if rng.random() < 0.06:
        size = rng.randint(800, 3000)
    result.append({"role": "user", "content": words(rng, size)})
    return result


def tools(rng: random.Random) -> list[dict[str, Any]]:
    return rng.sample(TOOLS, rng.randint(1, len(TOOLS)))


def prompt_tokens(msgs: list[dict[str, str]], tool_defs: list[dict[str, Any]]) -> int:
    """Plausible prompt tokens: ~1.3 per word, 4 per message, 3 to prime the reply, tools as JSON."""
    word_count = sum(len(m["content"].split()) for m in msgs)
    tool_tokens = len(orjson.dumps(tool_defs)) // 4 + 8 if tool_defs else 0
    return round(word_count * 1.3) + 4 * len(msgs) + 3 + tool_tokens


def completion_tokens(rng: random.Random, count: int) -> list[str]:
    """``count`` text tokens as providers stream them: a word with its leading space, or a mark."""
    out: list[str] = []
    for i in range(count):
        if i and rng.random() < 0.1 and out[-1] not in PUNCTUATION:
            out.append(rng.choice(PUNCTUATION))
            continue
        if i and rng.random() < 0.01:
            out.append("\n\n")
            continue
        word = rng.choice(VOCABULARY)
        out.append(word.capitalize() if i == 0 else " " + word)
    return out


def refusal_tokens() -> list[str]:
    pieces = REFUSAL_TEXT.split(" ")
    return [pieces[0]] + [" " + piece for piece in pieces[1:]]


def tool_arguments(rng: random.Random, tool: dict[str, Any]) -> str:
    """Arguments JSON for a call of ``tool``, with random word values."""
    params = tool["function"]["parameters"]["properties"]
    args: dict[str, Any] = {}
    for name, schema in params.items():
        if name not in tool["function"]["parameters"]["required"] and rng.random() < 0.5:
            continue
        if schema.get("enum"):
            args[name] = rng.choice(schema["enum"])
        elif schema["type"] == "integer":
            args[name] = rng.randint(1, 20)
        else:
            args[name] = words(rng, rng.randint(1, 6)).rstrip(".")
    return orjson.dumps(args).decode()


def fragments(rng: random.Random, text: str) -> list[str]:
    """Split arguments text into the few-character pieces providers stream."""
    out = []
    i = 0
    while i < len(text):
        step = rng.randint(1, 5)
        out.append(text[i : i + step])
        i += step
    return out
