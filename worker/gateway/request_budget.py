"""The ``request`` entry within a byte budget, with what billing needs and no more (pure).

The worker refuses an entry over ``MAX_ENTRY_BYTES`` (1 MiB: the call is a dead letter, served and
never billed), and reads ``messages`` and ``tools`` only to estimate the prompt's tokens. So the
ASGI middleware and the LiteLLM hook both publish the entry through ``entry_body``:

1. **Media, always** (``slim_messages``; whatever the size: a prompt should sit in Redis no more
   than billing needs). An image part becomes ``{"type": "image_url", "image_url": {"detail":
   <as sent, or "auto">, "width": W, "height": H}}``: no ``url``; the size read from the image's
   header (``image_header``), omitted when unknown (a remote URL, unreadable data). An
   ``input_audio`` part becomes ``{"type": "input_audio", "input_audio": {"format": F,
   "omitted_bytes": N}}`` and a ``file`` part ``{"type": "file", "file": {"file_id": …,
   "omitted_bytes": N}}`` (N: the bytes its data stood for). An ``omitted_chars`` the client put
   on a message or a text part is dropped: only the gateway says what it cut. A part already a
   placeholder (no ``url``, no data) keeps its size or count, so slimming twice changes nothing.
2. **JSON the worker can read** (``clean``, when orjson cannot write the entry as it is): a lone
   surrogate becomes U+FFFD, an integer past 64 bits a float, anything nested deeper than
   ``MAX_DEPTH`` null (orjson writes none of them).
3. **Within ``REQUEST_BUDGET_BYTES``**, when the entry is still larger: the longest strings of
   ``messages`` and ``tools`` (those longer than ``cap + MARK_BYTES`` characters) are cut to a
   prefix of ``cap`` characters, the largest cap whose cuts surely free the excess (every
   character cut frees at least one byte; a marker costs at most ``MARK_BYTES``), halved until
   the entry fits. What was cut is counted: a string
   ``content`` becomes ``[{"type": "text", "text": <prefix>, "omitted_chars": N}]``; any other
   object whose strings were cut (a text part, a tool's function, a tool call's function) gains
   ``"omitted_chars": N``, the characters cut from the strings directly in it (its values and the
   items of its lists). Structural strings (``role``, ``type``, ids…) are never cut.
4. If even a cap of 0 does not fit (a prompt of very many small parts), the entry goes with
   ``messages`` and ``tools`` empty and ``"omitted_messages": true``; past that (an enormous
   idempotency key), with the contract's money fields alone. The money always gets through.
5. **What was cut is counted**: whenever 3 or 4 applies, the entry carries ``prompt_estimate``,
   the prompt tokens of ``messages`` and ``tools`` before the cut (media as their placeholders),
   counted with the worker's own estimate (``worker.core.estimate.estimate_prompt``), so that the
   worker's estimate covers the whole request as sent, whatever was left out. It costs a
   tokenizer pass over the prompt, only for an entry past the budget.

Never logs: prompts are personal data.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from itertools import accumulate
from typing import Any

import orjson

from worker.contract.entries import MAX_ENTRY_BYTES
from worker.core.estimate import estimate_prompt
from worker.gateway.image_header import MAX_SIDE, Base64Bytes, data_url, image_size

# The request entry's budget: three quarters of what the worker accepts, so the entry never meets
# the limit whatever the fields beside the prompt hold.
REQUEST_BUDGET_BYTES = MAX_ENTRY_BYTES * 3 // 4
# What marking a cut string may add at most: a string content turned into a text part,
# ``[{"type":"text","text":…,"omitted_chars":N}]``, 42 bytes and N's digits.
MARK_BYTES = 64
# Nested deeper than this, a value is published as null (orjson writes at most 254 levels).
MAX_DEPTH = 128
# Strings never cut: they say what a part or a message is, and are short.
KEPT_KEYS = frozenset({"role", "type", "detail", "format", "id", "tool_call_id", "file_id"})
# The fields kept when nothing else fits: the contract's, all bounded (docs/events.md §1).
MONEY_FIELDS = (
    "request_id", "account_id", "model", "stream", "include_usage", "reserved_micros",
    "created_at", "n", "max_tokens", "temperature", "seed", "provider", "upstream_key",
    "account_fallback", "authorization", "prompt_estimate",
)  # fmt: skip
# Short labels (an image's detail, an audio's format) are kept as sent up to this length.
MAX_LABEL_CHARS = 32

_SURROGATES = re.compile("[\ud800-\udfff]")
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # what orjson writes


# -------------------------------------------------------------------------------- media


def _label(value: object) -> str | None:
    if isinstance(value, str) and 0 < len(value) <= MAX_LABEL_CHARS:
        return value
    return None


def _side(value: object) -> bool:
    return type(value) is int and 0 < value <= MAX_SIDE


def _data_bytes(data: object) -> int:
    """How many bytes a base64 payload (or a base64 data URL) stands for; 0 for anything else."""
    if not isinstance(data, str) or not data:
        return 0
    found = data_url(data)
    if found is not None:
        return len(found[1])
    if data.startswith(("http://", "https://")):
        return 0
    return len(Base64Bytes(data))


def _omitted_bytes(media: dict[str, Any], key: str) -> int:
    """The bytes of ``media[key]``; a placeholder's own count when it has no data (kept)."""
    if key not in media:
        count = media.get("omitted_bytes")
        return count if type(count) is int and count >= 0 else 0
    return _data_bytes(media[key])


def _image(part: dict[str, Any]) -> dict[str, Any]:
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    detail = image.get("detail") if isinstance(image, dict) else None
    placeholder: dict[str, Any] = {"detail": _label(detail) or "auto"}
    if isinstance(image, dict) and "url" not in image:  # a placeholder already: kept
        width, height = image.get("width"), image.get("height")
        if _side(width) and _side(height):
            placeholder["width"], placeholder["height"] = width, height
    elif isinstance(url, str):
        found = data_url(url)
        if found is not None:
            try:
                size = image_size(found[1].read)
            except Exception:  # a header reader's bug must not fail the call
                size = None
            if size is not None:
                placeholder["width"], placeholder["height"] = size
    return {"type": "image_url", "image_url": placeholder}


def _audio(part: dict[str, Any]) -> dict[str, Any]:
    audio = part.get("input_audio")
    audio = audio if isinstance(audio, dict) else {}
    placeholder: dict[str, Any] = {}
    fmt = _label(audio.get("format"))
    if fmt is not None:
        placeholder["format"] = fmt
    placeholder["omitted_bytes"] = _omitted_bytes(audio, "data")
    return {"type": "input_audio", "input_audio": placeholder}


def _file(part: dict[str, Any]) -> dict[str, Any]:
    file = part.get("file")
    file = file if isinstance(file, dict) else {}
    placeholder: dict[str, Any] = {}
    file_id = file.get("file_id")
    if isinstance(file_id, str) and 0 < len(file_id) <= 200:
        placeholder["file_id"] = file_id
    placeholder["omitted_bytes"] = _omitted_bytes(file, "file_data")
    return {"type": "file", "file": placeholder}


_MEDIA = {"image_url": _image, "input_audio": _audio, "file": _file}


def _slim_part(part: object) -> object:
    if not isinstance(part, dict):
        return part
    kind = part.get("type")
    media = _MEDIA.get(kind) if isinstance(kind, str) else None
    if media is not None:
        return media(part)
    if "omitted_chars" in part:
        return {key: value for key, value in part.items() if key != "omitted_chars"}
    return part


def _slim_message(message: object) -> object:
    if not isinstance(message, dict):
        return message
    content = message.get("content")
    if isinstance(content, list):
        slim: object = content
        for i, part in enumerate(content):
            new = _slim_part(part)
            if new is not part:
                if slim is content:
                    slim = list(content)
                slim[i] = new  # type: ignore[index]
    elif isinstance(content, dict):
        slim = _slim_part(content)
    else:
        slim = content
    if slim is content and "omitted_chars" not in message:
        return message
    out = {key: value for key, value in message.items() if key != "omitted_chars"}
    if "content" in message:
        out["content"] = slim
    return out


def slim_messages(messages: object) -> object:
    """``messages`` with every image, audio and file part replaced by its placeholder (see the
    module's docstring). The given messages are never changed (the proxy sends them on): what
    differs is copied."""
    if not isinstance(messages, list):
        return messages
    out = messages
    for i, message in enumerate(messages):
        new = _slim_message(message)
        if new is not message:
            if out is messages:
                out = list(messages)
            out[i] = new
    return out


# -------------------------------------------------------------------------------- writable JSON


def _text(value: str) -> str:
    if value.isascii():
        return value
    return _SURROGATES.sub("\ufffd", value)


def clean(value: Any, depth: int = 0) -> Any:
    """A copy of ``value`` orjson can write: lone surrogates replaced by U+FFFD (in keys too), an
    integer outside 64 bits as a float (or its decimal text past a float's range), keys as text,
    an object with ``model_dump`` (pydantic) as its dump, anything else not JSON, or nested past
    ``MAX_DEPTH``, null."""
    if isinstance(value, str):
        return _text(value)
    if value is None or isinstance(value, bool | float):
        return value
    if isinstance(value, int):
        if _INT_MIN <= value <= _INT_MAX:
            return value
        try:
            return float(value)
        except OverflowError:
            return str(value)
    if depth >= MAX_DEPTH:
        return None
    if isinstance(value, dict):
        return {
            _text(key) if isinstance(key, str) else str(key): clean(item, depth + 1)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [clean(item, depth + 1) for item in value]
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return clean(dump(), depth + 1)
        except Exception:
            return None
    return None


def _dumps(entry: dict[str, Any]) -> bytes | None:
    try:
        return orjson.dumps(entry)
    except TypeError:  # orjson.JSONEncodeError
        return None


# -------------------------------------------------------------------------------- cutting


def _lengths(value: object, owned: bool, out: list[int]) -> None:
    """The lengths of the strings ``_cut`` may cut in ``value`` (``owned``: a dict holds it)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, str):
                if key not in KEPT_KEYS:
                    out.append(len(item))
            else:
                _lengths(item, True, out)
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, str):
                if owned:
                    out.append(len(item))
            else:
                _lengths(item, owned, out)


def _cut_list(values: list[Any], cap: int, limit: int, owned: bool) -> tuple[list[Any], int]:
    out = values
    cut = 0
    for i, item in enumerate(values):
        new = item
        if isinstance(item, str):
            if owned and len(item) > limit:
                new = item[:cap]
                cut += len(item) - cap
        elif isinstance(item, dict):
            new = _cut_dict(item, cap, limit)
        elif isinstance(item, list):
            new, count = _cut_list(item, cap, limit, owned)
            cut += count
        if new is not item:
            if out is values:
                out = list(values)
            out[i] = new
    return out, cut


def _cut_dict(value: dict[str, Any], cap: int, limit: int, *, message: bool = False) -> Any:
    """``value`` with its strings longer than ``limit`` cut to ``cap`` characters and counted in
    its ``omitted_chars``; a message's string ``content`` becomes a text part instead."""
    out = value
    cut = 0
    for key, item in value.items():
        new = item
        if isinstance(item, str):
            if len(item) > limit and key not in KEPT_KEYS:
                if message and key == "content":
                    new = [{"type": "text", "text": item[:cap], "omitted_chars": len(item) - cap}]
                else:
                    new = item[:cap]
                    cut += len(item) - cap
        elif isinstance(item, dict):
            new = _cut_dict(item, cap, limit)
        elif isinstance(item, list):
            new, count = _cut_list(item, cap, limit, True)
            cut += count
        if new is not item:
            if out is value:
                out = dict(value)
            out[key] = new
    if cut:
        before = out.get("omitted_chars")
        ok = isinstance(before, int) and not isinstance(before, bool) and before >= 0
        out["omitted_chars"] = (before if ok else 0) + cut
    return out


def _cut(entry: dict[str, Any], cap: int) -> dict[str, Any]:
    limit = cap + MARK_BYTES
    messages = entry.get("messages")
    if isinstance(messages, list):
        messages = [
            _cut_dict(m, cap, limit, message=True)
            if isinstance(m, dict)
            else _cut_list(m, cap, limit, False)[0]
            if isinstance(m, list)
            else m
            for m in messages
        ]
    tools = entry.get("tools")
    if isinstance(tools, list):
        tools = _cut_list(tools, cap, limit, False)[0]
    return {**entry, "messages": messages, "tools": tools}


def _cap(lengths: list[int], excess: int) -> int | None:
    """The largest cap whose cuts surely free ``excess`` bytes, None when even 0 does not: a
    string longer than ``cap + MARK_BYTES`` frees at least its length less both (a character
    takes at least a byte; more when escaped or not ASCII, so the cut may free more than needed,
    never less)."""
    lengths = sorted(lengths, reverse=True)
    sums = [0, *accumulate(lengths)]
    negated = [-n for n in lengths]

    def freed(cap: int) -> int:
        limit = cap + MARK_BYTES
        k = bisect_right(negated, -limit - 1)  # how many are longer than limit
        return sums[k] - k * limit

    low, high = 0, lengths[0] if lengths else 0
    if freed(0) < excess:
        return None
    while low < high:  # freed() never grows with the cap
        mid = (low + high + 1) // 2
        if freed(mid) >= excess:
            low = mid
        else:
            high = mid - 1
    return low


def whole_prompt_tokens(entry: dict[str, Any]) -> int | None:
    """The prompt tokens of ``entry``'s ``messages`` and ``tools`` as they are, by the worker's
    estimate; None when the entry names no model or the count fails (the entry then goes
    without it, and the worker says what it could not count)."""
    model = entry.get("model")
    messages, tools = entry.get("messages"), entry.get("tools")
    if not isinstance(model, str):
        return None
    try:
        return estimate_prompt(
            model,
            messages if isinstance(messages, list) else [],
            tools if isinstance(tools, list) else [],
        )
    except Exception:  # a tokenizer's bug must not cost the call its record
        return None


def _fit(entry: dict[str, Any], size: int, budget: int) -> bytes:
    counted = whole_prompt_tokens(entry)
    if counted is not None:
        entry = {**entry, "prompt_estimate": counted}
    lengths: list[int] = []
    _lengths(entry.get("messages"), False, lengths)
    _lengths(entry.get("tools"), False, lengths)
    cap = _cap(lengths, size - budget) if lengths else None
    if cap is not None:
        while True:
            body = _dumps(_cut(entry, cap))
            if body is not None and len(body) <= budget:
                return body
            if cap == 0:
                break
            cap //= 2
    minimal = {**entry, "messages": [], "tools": [], "omitted_messages": True}
    body = _dumps(minimal)
    if body is not None and len(body) <= budget:
        return body
    core = {key: entry[key] for key in MONEY_FIELDS if key in entry}
    return orjson.dumps(clean({**core, "messages": [], "tools": [], "omitted_messages": True}))


def entry_body(entry: dict[str, Any], budget: int = REQUEST_BUDGET_BYTES) -> bytes:
    """The ``request`` entry's JSON, at most ``budget`` bytes: ``entry`` with its media replaced,
    made writable and cut to fit (the module's docstring). ``entry`` itself is not changed."""
    if isinstance(entry.get("messages"), list):
        entry = {**entry, "messages": slim_messages(entry["messages"])}
    body = _dumps(entry)
    if body is None:
        entry = clean(entry)
        body = orjson.dumps(entry)
    if len(body) <= budget:
        return body
    return _fit(entry, len(body), budget)


__all__ = ["REQUEST_BUDGET_BYTES", "clean", "entry_body", "slim_messages"]
