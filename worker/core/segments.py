"""The content segment of a call: the class of text its estimate is mostly made of, seen from the
request and the response alone. Calibration learns one factor per segment
(``worker.core.calibration``), because tokenizers differ from one another by different ratios on
different text (measured: an o200k estimate of Tekken counts is off by about 1 % on English prose
and by 10-20 % on JSON, tool calls and Chinese).

Segments, first match wins:

* ``tools`` — the request defines tools, or a message or a choice holds tool calls;
* ``json`` — the last user message or the answer is a JSON object or array;
* ``code`` — the last user message or the answer holds a fenced code block;
* else the script most of the letters of the last user message and the answer are in:
  ``latin``, ``cyrillic``, ``other`` (any other script, or none), or for CJK text ``japanese``
  (kana are at least a tenth of its CJK letters), else ``korean`` (hangul the most), else
  ``chinese``: the three are tokenized differently enough to need their own factors (measured:
  one ``cjk`` factor left a shift from Japanese to Chinese 2.4 % off).

Pure; never raises on odd input.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from worker.core.result import Choice

SEGMENTS = ("tools", "json", "code", "chinese", "japanese", "korean", "cyrillic", "latin", "other")
_CJK = ("han", "kana", "hangul")
SAMPLE_CHARS = 2000  # the script is judged on this many characters of each text


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list | tuple):
        return "\n".join(
            p.get("text", "") if isinstance(p, Mapping) and isinstance(p.get("text"), str) else ""
            for p in content
        )
    return ""


def _is_json(text: str) -> bool:
    stripped = text.strip()
    return len(stripped) >= 2 and (stripped[0], stripped[-1]) in (("{", "}"), ("[", "]"))


def _script(char: str) -> str | None:
    if not char.isalpha():
        return None
    code = ord(char)
    if code < 0x250:
        return "latin"
    if 0x400 <= code < 0x530:
        return "cyrillic"
    if 0x3040 <= code < 0x3100 or 0xFF66 <= code < 0xFFA0:
        return "kana"
    if 0xAC00 <= code < 0xD7B0 or 0x1100 <= code < 0x1200:
        return "hangul"
    if 0x3400 <= code < 0xA000 or 0xF900 <= code < 0xFB00 or 0x20000 <= code < 0x30000:
        return "han"
    name = unicodedata.name(char, "")
    return "latin" if name.startswith("LATIN") else "other"


def segment_of(messages: object, tools: object, choices: Sequence[Choice]) -> str:
    """The call's segment (see the module)."""
    listed: list[Mapping[Any, Any]] = (
        [m for m in messages if isinstance(m, Mapping)]
        if isinstance(messages, Sequence) and not isinstance(messages, str | bytes)
        else []
    )
    if (isinstance(tools, Sequence) and not isinstance(tools, str | bytes) and tools) or any(
        m.get("tool_calls") or m.get("role") == "tool" for m in listed
    ):
        return "tools"
    if any(isinstance(c, Choice) and (c.tool_calls or c.function_call) for c in choices):
        return "tools"
    user = next((m for m in reversed(listed) if m.get("role") == "user"), None)
    texts = [_text(user.get("content")) if user is not None else ""]
    texts += [c.content for c in choices if isinstance(c, Choice) and isinstance(c.content, str)]
    if any(_is_json(t) for t in texts if t):
        return "json"
    if any("```" in t for t in texts):
        return "code"
    counts: dict[str, int] = {}
    for text in texts:
        for char in text[:SAMPLE_CHARS]:
            script = _script(char)
            if script is not None:
                counts[script] = counts.get(script, 0) + 1
    if not counts:
        return "other"
    cjk = sum(counts.get(script, 0) for script in _CJK)
    others = {s: n for s, n in counts.items() if s not in _CJK}
    if cjk > max(others.values(), default=0):
        if 10 * counts.get("kana", 0) >= cjk:
            return "japanese"
        return "korean" if counts.get("hangul", 0) > counts.get("han", 0) else "chinese"
    return max(sorted(others), key=lambda s: others[s])
