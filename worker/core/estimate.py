"""Offline token estimates of a call, for when the upstream usage block is missing or doubted.

Which tokenizer counts a model's text is a registry by model family (``DEFAULT_RULES``: a name
prefix → a shipped vocabulary); the vocabulary names the chat template its counts follow
(``TEMPLATES``): OpenAI's models and every model no rule matches by the cookbook rules below,
Mistral's Tekken models by Mistral's own template (``worker.core.mistral_chat``). A family whose
tokenizer is not public (Claude, Gemini) is counted with o200k and marked approximate: its
estimates are calibrated against reported usage (``worker.core.calibration``).

The OpenAI prompt rules are the ones OpenAI publishes in the cookbook "How to count tokens with tiktoken"
(``num_tokens_from_messages`` and ``num_tokens_for_tools``); for the cookbook's worked examples they
reproduce what the API reported. The completion count is the text the model produced, encoded
without special tokens.

Every function here is pure (the vocabularies are read once per process from the package), never
raises on odd input (what is not text is skipped) and never logs: prompts and completions are
customer data. Only a damaged vocabulary raises (``VocabularyError``): that is a broken deployment,
not a bad call.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import tiktoken

from worker.core import mistral_chat
from worker.core.image_tokens import image_part_tokens
from worker.core.result import Choice, Estimate
from worker.core.segments import segment_of
from worker.core.vocab import VOCABULARIES, load_encoding

O200K = "o200k_base"
CL100K = "cl100k_base"
TEKKEN = "tekken_240718"

# The chat template a vocabulary's counts follow.
OPENAI_TEMPLATE = "openai"
MISTRAL_TEMPLATE = "mistral_v3"
TEMPLATES: dict[str, str] = {
    O200K: OPENAI_TEMPLATE,
    CL100K: OPENAI_TEMPLATE,
    TEKKEN: MISTRAL_TEMPLATE,
}

# Cookbook: "every message follows <|start|>{role/name}\n{content}<|end|>\n" and "every reply is
# primed with <|start|>assistant<|message|>"; identical for gpt-3.5-turbo-0125, gpt-4 and gpt-4o.
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMER = 3


@dataclass(frozen=True, slots=True)
class ToolConstants:
    """The cookbook's per-function, per-property and per-enum overheads of tool definitions."""

    func_init: int
    prop_init: int
    prop_key: int
    enum_init: int
    enum_item: int
    func_end: int


# The cookbook gives these for gpt-4o/gpt-4o-mini and for gpt-3.5-turbo/gpt-4; they are keyed by
# encoding here so that every model sharing a tokenizer (and the approximate ones) gets a value.
TOOL_CONSTANTS: dict[str, ToolConstants] = {
    O200K: ToolConstants(
        func_init=7, prop_init=3, prop_key=3, enum_init=-3, enum_item=3, func_end=12
    ),
    CL100K: ToolConstants(
        func_init=10, prop_init=3, prop_key=3, enum_init=-3, enum_item=3, func_end=12
    ),
}

DEFAULT_RULES: dict[str, str] = {
    "gpt-5": O200K,
    "gpt-5.": O200K,
    "gpt-4.5": O200K,
    "gpt-4.1": O200K,
    "gpt-4o": O200K,
    "chatgpt-4o": O200K,
    "o1": O200K,
    "o3": O200K,
    "o4": O200K,
    "gpt-4": CL100K,
    "gpt-3.5": CL100K,
    "gpt-35": CL100K,
    # Mistral's Tekken generation (the models mistral-common 1.13.1 maps to tekken_240718 and
    # tekken_240911, whose text ranks are the same): API names and the open weights' names.
    "open-mistral-nemo": TEKKEN,
    "mistral-nemo": TEKKEN,
    "ministral-8b-2410": TEKKEN,
    "mistral-small-2409": TEKKEN,
    "pixtral-12b-2409": TEKKEN,
    "pixtral-12b": TEKKEN,
}

# A prefix matches a whole name, or a name continuing with a separator: "o1" takes "o1-mini" but not
# "o100", and "gpt-4" takes neither "gpt-4o" nor an unknown "gpt-4.2". A prefix that ends with a
# separator ("gpt-5.") takes whatever follows it.
_SEPARATORS = frozenset("-:_@")
_PREFIX_ENDS = frozenset("-:_@.")


@dataclass(frozen=True, slots=True)
class Tokenizer:
    """How one model's text is counted."""

    encoding: str
    approximate: bool

    @property
    def template(self) -> str:
        return TEMPLATES[self.encoding]


class EncodingTable:
    """Model name → shipped encoding, by longest matching prefix.

    Names are compared lowercased after removing a fine-tune wrapper (``ft:gpt-4o-mini:org::id`` is
    ``gpt-4o-mini``) and a routing prefix (``openai/gpt-4o`` is ``gpt-4o``). A model no rule matches
    is counted with ``default`` and marked approximate: its real tokenizer is not one we ship.
    """

    def __init__(self, rules: Mapping[str, str], default: str = O200K) -> None:
        for encoding in (*rules.values(), default):
            if encoding not in VOCABULARIES or encoding not in TEMPLATES:
                known = ", ".join(sorted(VOCABULARIES))
                raise ValueError(f"unknown encoding {encoding!r} (known: {known})")
        # Longest first, so the first match is the most specific rule.
        self._rules = sorted(
            ((prefix.lower(), encoding) for prefix, encoding in rules.items()),
            key=lambda rule: len(rule[0]),
            reverse=True,
        )
        self.default = default
        self._resolve = functools.lru_cache(maxsize=1024)(self._lookup)

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, str], default: str = O200K) -> EncodingTable:
        return cls(mapping, default)

    def rules(self) -> dict[str, str]:
        return dict(self._rules)

    def resolve(self, model: object) -> Tokenizer:
        if not isinstance(model, str):
            return Tokenizer(self.default, approximate=True)
        return self._resolve(model)

    def _lookup(self, model: str) -> Tokenizer:
        name = base_model_name(model)
        for prefix, encoding in self._rules:
            if _matches(name, prefix):
                return Tokenizer(encoding, approximate=False)
        return Tokenizer(self.default, approximate=True)


def _matches(name: str, prefix: str) -> bool:
    if not prefix or not name.startswith(prefix):
        return False
    return (
        len(name) == len(prefix) or prefix[-1] in _PREFIX_ENDS or name[len(prefix)] in _SEPARATORS
    )


def base_model_name(model: str) -> str:
    """``ft:gpt-4o-mini-2024-07-18:org::abc`` → ``gpt-4o-mini-2024-07-18``; ``openai/x`` → ``x``."""
    name = model.strip().lower()
    if name.startswith("ft:"):
        name = name[3:].split(":", 1)[0]
    return name.rsplit("/", 1)[-1]


DEFAULT_TABLE = EncodingTable(DEFAULT_RULES)


def is_approximate(model: str, table: EncodingTable = DEFAULT_TABLE) -> bool:
    """True when the model's tokenizer is not one we ship, so counts are only indicative."""
    return table.resolve(model).approximate


def _encoder(model: object, table: EncodingTable) -> tuple[tiktoken.Encoding, Tokenizer]:
    tokenizer = table.resolve(model)
    return load_encoding(tokenizer.encoding), tokenizer


# The encoder is never handed more than this many characters at once (``count_text``).
COUNT_PIECE_CHARS = 1 << 12

# The last space of a window that follows a non-space and precedes one (``.*`` is greedy, so the
# match backs off from the window's end; the lookbehind may see the character before the window).
_LAST_EXACT_CUT = re.compile(r"(?s:.*)(?<=\S) (?=\S)")


def text_pieces(text: str, piece: int = COUNT_PIECE_CHARS) -> Iterator[tuple[int, int, bool]]:
    """The ``(start, end, exact)`` pieces ``count_text`` encodes one at a time, in order, each at
    most ``piece`` characters; ``exact`` says whether the piece ends at a cut that leaves the count
    unchanged (the last piece, and the pieces that end before a space, below).

    A piece ends before the last space of its window that follows a non-space and precedes one:
    every encoding's pre-tokenizer starts a new piece there (a space joins only the word after it),
    and BPE works within pieces, so the counts of the parts add up to the whole's. A window with no
    such space (a run of letters, digits, CJK, emoji, punctuation, base64, or of whitespace) is cut
    at its end anyway, which may split one of the pre-tokenizer's pieces and so change the count by
    a few tokens (``tests/test_estimate_count.py`` bounds it): without that cut, one such run of
    a few MB was a single BPE piece, whose merge (tiktoken's heap of every byte of the piece) took
    about 45 bytes of memory per byte of text and more than linear time."""
    start, end = 0, len(text)
    while end - start > piece:
        found = _LAST_EXACT_CUT.match(text, start + 1, start + piece + 1)
        if found is None:
            yield start, start + piece, False
            start += piece
        else:
            cut = found.end() - 1
            yield start, cut, True
            start = cut
    yield start, end, True


def count_text(encoding: tiktoken.Encoding, text: str, piece: int = COUNT_PIECE_CHARS) -> int:
    """Tokens of ``text``, counted a piece at a time (``text_pieces``): time linear in the text and
    memory bounded by ``piece``, whatever the text. The count is
    ``len(encoding.encode_ordinary(text))`` exactly when every piece ends at an exact cut (text with
    a space between two words at least every ``piece`` characters), and within a few tokens per
    other cut otherwise (-2 to +5 measured, ``tests/test_estimate_count.py``)."""
    encode = encoding.encode_ordinary
    if len(text) <= piece:
        return len(encode(text))
    return sum(len(encode(text[start:end])) for start, end, _exact in text_pieces(text, piece))


def _count(encoding: tiktoken.Encoding, text: object) -> int:
    if isinstance(text, str) and text:
        return count_text(encoding, text)
    return 0


# ---------------------------------------------------------------- prompt


# A text part's ``omitted_chars`` beyond this is not a count the gateway could have made.
MAX_OMITTED_CHARS = 1 << 40


def scaled(tokens: int, kept: int, omitted: object) -> tuple[int, bool]:
    """The tokens of ``kept`` characters the gateway left of strings it cut (``"omitted_chars":
    N`` on the object that held them) scaled to the whole's length, ``(kept + N) / kept``, rounded
    up, and flagged (the rest is assumed to read like what was kept). No ``N`` (or 0): as counted,
    unflagged. No characters kept, or an ``N`` that is not a count: the rest uncounted, flagged."""
    if omitted is None or omitted == 0:
        return tokens, False
    if (
        not isinstance(omitted, int)
        or isinstance(omitted, bool)
        or not 0 < omitted <= MAX_OMITTED_CHARS
        or kept <= 0
    ):
        return tokens, True
    return -(-tokens * (kept + omitted) // kept), True


def _length(value: object) -> int:
    return len(value) if isinstance(value, str) else 0


def _text_part_tokens(encoding: tiktoken.Encoding, part: Mapping[Any, Any]) -> tuple[int, bool]:
    """A text part; one the gateway cut to a prefix is scaled up from it (``scaled``)."""
    text = part.get("text")
    return scaled(_count(encoding, text), _length(text), part.get("omitted_chars"))


def _content_tokens(encoding: tiktoken.Encoding, content: object, model: str) -> tuple[int, bool]:
    """Tokens of a content value; the flag is set when a part was not counted exactly: an image
    whose size or rule was assumed (``worker.core.image_tokens``), a text cut by the gateway, an audio or
    file part (not counted)."""
    if isinstance(content, str):
        return _count(encoding, content), False
    parts: Iterable[object]
    if isinstance(content, Mapping):
        parts = (content,)
    elif isinstance(content, list | tuple):
        parts = content
    else:
        return 0, False
    total = 0
    uncounted = False
    for part in parts:
        if isinstance(part, str):
            total += _count(encoding, part)
        elif isinstance(part, Mapping):
            kind = part.get("type")
            if kind == "text":
                tokens, inexact = _text_part_tokens(encoding, part)
                total += tokens
                uncounted = uncounted or inexact
            elif kind == "refusal":
                refusal = part.get("refusal")
                tokens, inexact = scaled(
                    _count(encoding, refusal), _length(refusal), part.get("omitted_chars")
                )
                total += tokens
                uncounted = uncounted or inexact
            elif kind in ("image_url", "input_image"):
                image = image_part_tokens(model, part)
                total += image.tokens
                uncounted = uncounted or image.assumed
            else:
                uncounted = True
    return total, uncounted


def _call_tokens(encoding: tiktoken.Encoding, function: object) -> tuple[int, bool]:
    """A tool call's name and arguments; arguments the gateway cut are scaled up (``scaled``)."""
    if not isinstance(function, Mapping):
        return 0, False
    name, arguments = function.get("name"), function.get("arguments")
    tokens = _count(encoding, name) + _count(encoding, arguments)
    return scaled(tokens, _length(name) + _length(arguments), function.get("omitted_chars"))


def _message_tokens(
    encoding: tiktoken.Encoding, message: Mapping[Any, Any], model: str
) -> tuple[int, bool]:
    total = TOKENS_PER_MESSAGE
    uncounted = False
    strings = chars = 0  # the message's own strings, which its ``omitted_chars`` counts cuts of
    for key, value in message.items():
        if isinstance(value, str):
            strings += _count(encoding, value)
            chars += len(value)
            if key == "name":
                total += TOKENS_PER_NAME
        elif key == "content":
            tokens, skipped = _content_tokens(encoding, value, model)
            total += tokens
            uncounted = uncounted or skipped
        elif key == "tool_calls" and isinstance(value, list | tuple):
            # Not in the cookbook (its examples have none): the call's name and arguments are text
            # the model reads back, so they are counted like any other string.
            for call in value:
                if isinstance(call, Mapping):
                    tokens, inexact = _call_tokens(encoding, call.get("function"))
                    total += tokens
                    uncounted = uncounted or inexact
        elif key == "function_call":
            tokens, inexact = _call_tokens(encoding, value)
            total += tokens
            uncounted = uncounted or inexact
    tokens, inexact = scaled(strings, chars, message.get("omitted_chars"))
    return total + tokens, uncounted or inexact


def _strip_period(text: str) -> str:
    return text[:-1] if text.endswith(".") else text


def _as_text(value: object) -> str:
    """Text of a field the cookbook formats with an f-string; absent or null is empty."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return str(value)
    if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
        return str(list(value))
    return ""


def _cut_of(value: object, depth: int = 0) -> tuple[int, int]:
    """The characters of every string nested in ``value`` (values and list items), and the sum of
    the ``omitted_chars`` counts in it (a count that is not one: -1, so ``scaled`` flags it)."""
    if depth > 64:
        return 0, 0
    chars = omitted = 0
    items: Iterable[object] = ()
    if isinstance(value, Mapping):
        count = value.get("omitted_chars")
        if count is not None:
            ok = isinstance(count, int) and not isinstance(count, bool) and count >= 0
            omitted = count if ok else -1
        items = value.values()
    elif isinstance(value, list | tuple):
        items = value
    for item in items:
        if isinstance(item, str):
            chars += len(item)
        elif isinstance(item, Mapping | list | tuple):
            more, cut = _cut_of(item, depth + 1)
            chars += more
            omitted = -1 if -1 in (omitted, cut) else omitted + cut
    return chars, omitted


def _tool_tokens(encoding: tiktoken.Encoding, tool: object, constants: ToolConstants) -> int:
    """One tool definition, by the cookbook's ``num_tokens_for_tools``.

    Accepts the ``tools`` shape (``{"type": "function", "function": {...}}``) and the legacy
    ``functions`` shape (the function object itself). Missing descriptions count as empty. A
    definition whose strings the gateway cut (``omitted_chars`` anywhere in it) is scaled up from
    what was kept (``scaled``: the whole definition's characters).
    """
    tokens = _tool_tokens_as_sent(encoding, tool, constants)
    chars, omitted = _cut_of(tool)
    return scaled(tokens, chars, omitted or None)[0]


def _tool_cut(tool: object) -> bool:
    return _cut_of(tool)[1] != 0


def _tool_tokens_as_sent(
    encoding: tiktoken.Encoding, tool: object, constants: ToolConstants
) -> int:
    if not isinstance(tool, Mapping):
        return 0
    function = tool.get("function")
    if not isinstance(function, Mapping):
        if "name" not in tool:
            return 0
        function = tool
    total = constants.func_init
    name = _as_text(function.get("name"))
    description = _strip_period(_as_text(function.get("description")))
    total += _count(encoding, f"{name}:{description}")
    parameters = function.get("parameters")
    properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
    if isinstance(properties, Mapping) and len(properties) > 0:
        total += constants.prop_init
        for key, spec in properties.items():
            total += constants.prop_key
            spec = spec if isinstance(spec, Mapping) else {}
            if "enum" in spec:
                total += constants.enum_init
                items = spec["enum"]
                for item in items if isinstance(items, list | tuple) else ():
                    total += constants.enum_item
                    total += _count(encoding, _as_text(item))
            p_type = _as_text(spec.get("type"))
            p_desc = _strip_period(_as_text(spec.get("description")))
            total += _count(encoding, f"{_as_text(key)}:{p_type}:{p_desc}")
    return total


def _prompt_tokens(
    model: str, messages: object, tools: object, table: EncodingTable
) -> tuple[int, bool]:
    encoding, tokenizer = _encoder(model, table)
    return _prompt_tokens_with(encoding, tokenizer, model, messages, tools)


def _prompt_tokens_with(
    encoding: Any, tokenizer: Tokenizer, model: str, messages: object, tools: object
) -> tuple[int, bool]:
    if tokenizer.template == MISTRAL_TEMPLATE:
        return mistral_chat.prompt_tokens(lambda text: _count(encoding, text), messages, tools)
    name = base_model_name(model) if isinstance(model, str) else ""
    total = 0
    uncounted = False
    if isinstance(messages, Sequence) and not isinstance(messages, str | bytes):
        for message in messages:
            if isinstance(message, Mapping):
                tokens, skipped = _message_tokens(encoding, message, name)
                total += tokens
                uncounted = uncounted or skipped
    total += REPLY_PRIMER
    if isinstance(tools, Sequence) and not isinstance(tools, str | bytes) and len(tools) > 0:
        constants = TOOL_CONSTANTS[tokenizer.encoding]
        total += sum(_tool_tokens(encoding, tool, constants) for tool in tools)
        total += constants.func_end
        uncounted = uncounted or any(_tool_cut(tool) for tool in tools)
    return total, uncounted


def estimate_prompt(
    model: str,
    messages: Sequence[Any],
    tools: Sequence[Any] = (),
    table: EncodingTable = DEFAULT_TABLE,
) -> int:
    """Prompt tokens of a chat completion request, by the cookbook's rules.

    Messages that are not mappings are skipped; of a message, string values are counted (plus one
    per ``name``), text and refusal parts of a list ``content``, image parts by OpenAI's formula for
    the model (``worker.core.image_tokens``), and the name and arguments of assistant tool calls. A text
    part the gateway cut (``omitted_chars``) is scaled up from its prefix. Audio and file parts are
    not counted. ``estimate`` reports the result as approximate when a part was not counted, or
    counted on an assumption (an image's unknown size, a cut text's rest).
    """
    return _prompt_tokens(model, messages, tools, table)[0]


class _ByteCount:
    """Stands in for an encoding: a text's "tokens" are its UTF-8 bytes (``prompt_bytes_bound``)."""

    @staticmethod
    def encode_ordinary(text: str) -> bytes:
        return text.encode("utf-8", "surrogatepass")


def prompt_bytes_bound(
    model: str,
    messages: Sequence[Any],
    tools: Sequence[Any] = (),
    table: EncodingTable = DEFAULT_TABLE,
) -> int:
    """An upper bound of ``estimate_prompt`` without the tokenizer: the same rules with each text
    counted as its UTF-8 bytes. Every token of the shipped encodings is at least one byte, so a
    text has at most as many tokens as bytes; the per-message, per-name, per-tool and image counts
    are the estimate's own. Linear in the text, a few ms for megabytes."""
    tokenizer = table.resolve(model)
    return _prompt_tokens_with(_ByteCount(), tokenizer, model, messages, tools)[0]


# ---------------------------------------------------------------- completion


def estimate_completion(
    model: str, choices: Sequence[Choice], table: EncodingTable = DEFAULT_TABLE
) -> int:
    """Completion tokens: content, refusal, reasoning, tool calls and a legacy function call of every
    choice, summed (for a Mistral template, as ``worker.core.mistral_chat`` counts them)."""
    encoding, tokenizer = _encoder(model, table)
    if tokenizer.template == MISTRAL_TEMPLATE:
        return mistral_chat.completion_tokens(lambda text: _count(encoding, text), choices)
    total = 0
    for choice in choices:
        if not isinstance(choice, Choice):
            continue
        for text in (choice.content, choice.refusal, choice.reasoning_content):
            if text and isinstance(text, str):
                total += count_text(encoding, text)
        calls = choice.tool_calls if isinstance(choice.tool_calls, list | tuple) else ()
        for call in calls:
            total += _count(encoding, getattr(call, "name", None))
            total += _count(encoding, getattr(call, "arguments", None))
        legacy = choice.function_call
        if legacy is not None:
            total += _count(encoding, legacy.name) + _count(encoding, legacy.arguments)
    return total


def estimate(
    model: str,
    messages: Sequence[Any],
    tools: Sequence[Any],
    choices: Sequence[Choice],
    table: EncodingTable = DEFAULT_TABLE,
) -> Estimate:
    """Both counts of a call, and its content segment; approximate when the tokenizer is unknown or
    a part went uncounted."""
    prompt, uncounted = _prompt_tokens(model, messages, tools, table)
    completion = estimate_completion(model, choices, table)
    approximate = uncounted or table.resolve(model).approximate
    return Estimate(
        prompt_tokens=prompt,
        completion_tokens=completion,
        approximate=approximate,
        segment=segment_of(messages, tools, choices),
    )
