"""Stream/non-stream parity, the pure part: request fingerprints, output hashes, drift, verdicts.

The promise (seed 001): the same prompt at ``temperature: 0`` with and without ``stream`` costs the
same. Twins are found by a *fingerprint*: a salted HMAC-SHA256 of what determines the output — model,
messages, tools and sampling parameters — and nothing about who sent it or how (account, request id,
``stream``, ``include_usage``, idempotency key, time). Only deterministic calls qualify (temperature 0,
or a fixed seed); any other call gets None, because two samples at temperature 1 may legitimately
differ in length and cost.

Canonical form: JSON with sorted keys at every level, so ``{"role":…, "content":…}`` and
``{"content":…, "role":…}`` fingerprint alike, while the order of messages (a list) still counts.
Numbers are normalised so ``temperature: 0`` and ``0.0`` agree. Nothing here keeps or returns text:
only hex digests leave these functions.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from worker.core.request import RequestMeta
from worker.core.result import Choice


class Verdict(StrEnum):
    MATCH = "match"
    MISMATCH = "mismatch"


PPM = 1_000_000
# Domain tags keep a fingerprint and an output hash of the same bytes from ever being equal.
_FINGERPRINT_TAG = b"parity-fingerprint-v1\x00"
_OUTPUT_TAG = b"parity-output-v1\x00"


def _digest(salt: str, tag: bytes, document: Any) -> str:
    body = orjson.dumps(document, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    return hmac.new(salt.encode(), tag + body, hashlib.sha256).hexdigest()


def _number(value: float | int | None) -> float | None:
    return None if value is None else float(value)


def is_deterministic(meta: RequestMeta) -> bool:
    """Temperature 0 or a fixed seed: the calls whose twin must produce the same output."""
    return meta.seed is not None or (meta.temperature is not None and meta.temperature == 0)


def fingerprint(
    meta: RequestMeta, salt: str, sampling: Mapping[str, Any] | None = None
) -> str | None:
    """The request's salted fingerprint, or None when the call is not deterministic.

    ``sampling`` adds parameters the metadata does not carry yet (``top_p``, ``stop``, penalties…):
    whatever changes the output must be in the fingerprint, or unlike calls would pair.
    """
    if not is_deterministic(meta):
        return None
    params: dict[str, Any] = {
        "temperature": _number(meta.temperature),
        "seed": meta.seed,
        "n": meta.n,
        "max_tokens": meta.max_tokens,
    }
    for key, value in (sampling or {}).items():
        params[key] = _number(value) if isinstance(value, int | float) else value
    document: dict[str, Any] = {
        "model": meta.model,
        "messages": list(meta.messages),
        "tools": list(meta.tools),
        "sampling": params,
    }
    if meta.endpoint != "chat_completions":  # a chat call and a Responses call are not twins
        document["endpoint"] = meta.endpoint
    return _digest(salt, _FINGERPRINT_TAG, document)


def output_hash(choices: Iterable[Choice], salt: str) -> str:
    """A salted hash of what the model said (content, refusal, reasoning, tool calls by index, a
    legacy function call).

    Ids, roles, logprobs and finish reasons are left out: they differ between a stream and a body
    that carry the same words, and the words are what the completion tokens count.
    """
    document = [
        [
            choice.index,
            choice.content,
            choice.refusal,
            choice.reasoning_content,
            [[call.index, call.name, call.arguments] for call in choice.tool_calls],
        ]
        # A legacy function call is appended only when there is one, so every other output hashes
        # as it always did.
        + (
            []
            if choice.function_call is None
            else [[choice.function_call.name, choice.function_call.arguments]]
        )
        for choice in sorted(choices, key=lambda choice: choice.index)
    ]
    return _digest(salt, _OUTPUT_TAG, document)


def drift_ppm(reported: int, estimated: int) -> int | None:
    """(reported - estimated) / estimated in parts per million, truncated toward zero (as SQL's
    integer division does, so the migration's backfill agrees); None when the estimate is 0."""
    if estimated <= 0:
        return None
    difference = (reported - estimated) * PPM
    magnitude = abs(difference) // estimated
    return magnitude if difference >= 0 else -magnitude


@dataclass(frozen=True, slots=True)
class Side:
    """One call of a pair as the ledger recorded it; ``book_charge`` is the price book's charge for
    its recorded usage (None when it cannot be priced now)."""

    prompt_tokens: int
    completion_tokens: int
    charge_micros: int
    output_hash: str | None
    book_charge: int | None = None


def compare(streamed: Side, plain: Side) -> tuple[Verdict, tuple[str, ...], bool | None]:
    """The verdict on a pair: (match | mismatch, the fields that differ, outputs identical?).

    * ``prompt_tokens`` always: the same input must count the same.
    * ``completion_tokens`` and ``charge`` only when both outputs are known to be identical: two
      different answers may differ in length and so in cost without breaking any promise.
    * ``charge_per_token`` always: each side must have been charged the price book's rate for the
      tokens it was billed (its recorded charge equals the book's charge for its recorded usage).
    """
    identical = (
        None
        if streamed.output_hash is None or plain.output_hash is None
        else streamed.output_hash == plain.output_hash
    )
    fields = []
    if streamed.prompt_tokens != plain.prompt_tokens:
        fields.append("prompt_tokens")
    if identical and streamed.completion_tokens != plain.completion_tokens:
        fields.append("completion_tokens")
    if any(
        side.book_charge is not None and side.book_charge != side.charge_micros
        for side in (streamed, plain)
    ):
        fields.append("charge_per_token")
    if identical and streamed.charge_micros != plain.charge_micros:
        fields.append("charge")
    return (Verdict.MISMATCH if fields else Verdict.MATCH), tuple(fields), identical
