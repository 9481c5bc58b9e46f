"""Real calls for parity and alert tests: request metadata, SSE bodies and response bodies built
from one usage block, reconciled by the real reconciler and applied to a real ledger session."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

import orjson
from sqlalchemy.orm import Session

from worker.core.parity import fingerprint
from worker.core.prices import load_price_book
from worker.core.reconcile import reconcile_response, reconcile_stream
from worker.core.request import request_from_dict
from worker.core.result import Result
from worker.ledger.findings import record_findings
from worker.ledger.operations import apply_result, hold

BOOK = load_price_book()
SALT = "test-salt"
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
MESSAGES = [{"role": "user", "content": "Count to three."}]
_ids = itertools.count(1)


def meta_dict(
    *,
    stream: bool,
    account: str = "acct_7",
    model: str = "gpt-4o",
    created_at: datetime = T0,
    reserved: int = 100_000,
    temperature: float | None = 0,
    seed: int | None = None,
    messages: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "request_id": f"req_{next(_ids)}_{'s' if stream else 'p'}",
        "account_id": account,
        "model": model,
        "stream": stream,
        "include_usage": True,
        "reserved_micros": reserved,
        "created_at": created_at.isoformat().replace("+00:00", "Z"),
        "messages": messages if messages is not None else MESSAGES,
        "temperature": temperature,
        "seed": seed,
        **extra,
    }


def sse_body(
    text: str, usage: dict[str, Any] | None, *, model: str = "gpt-4o", finish: str = "stop"
) -> list[bytes]:
    def frame(obj: dict[str, Any]) -> bytes:
        chunk = {"id": "chatcmpl-S", "object": "chat.completion.chunk", "model": model, **obj}
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    out = [frame({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})]
    for word in text.split(" "):
        out.append(frame({"choices": [{"index": 0, "delta": {"content": word + " "}}]}))
    out.append(frame({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}))
    if usage is not None:
        out.append(frame({"choices": [], "usage": usage}))
    out.append(b"data: [DONE]\n\n")
    return out


def response_body(text: str, usage: dict[str, Any], *, model: str = "gpt-4o") -> bytes:
    content = "".join(word + " " for word in text.split(" "))
    return orjson.dumps(
        {
            "id": "chatcmpl-P",
            "object": "chat.completion",
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": usage,
        }
    )


def usage(prompt: int = 11, completion: int = 3, cached: int = 0) -> dict[str, Any]:
    block: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached:
        block["prompt_tokens_details"] = {"cached_tokens": cached}
    return block


def reconcile(
    data: dict[str, Any], text: str, block: dict[str, Any] | None, finish: str = "stop"
) -> Result:
    meta = request_from_dict(data)
    if meta.stream:
        body = sse_body(text, block, model=meta.model, finish=finish)
        return reconcile_stream(meta, body, BOOK)
    assert block is not None
    return reconcile_response(meta, 200, response_body(text, block, model=meta.model), BOOK)


def run_call(
    session: Session,
    data: dict[str, Any],
    text: str = "One two three.",
    block: dict[str, Any] | None = None,
    *,
    now: datetime = T0,
    non_streamable: tuple[str, ...] = (),
    opened: bool = True,
    finish: str = "stop",
) -> tuple[Result, str]:
    """Hold (unless ``opened`` is False), reconcile, apply and record findings, as the consumer
    does; returns the result and the ledger's effect."""
    from datetime import timedelta

    meta = request_from_dict(data)
    block = usage() if block is None else block
    if opened:
        hold(session, meta, now=now)
    result = reconcile(data, text, block, finish)
    effect = apply_result(session, result, now=now, grace=timedelta(hours=1))
    record_findings(
        session, result, effect, salt=SALT, now=now, non_streamable=non_streamable, meta=meta,
        opened=opened,
    )  # fmt: skip
    return result, effect


def fingerprint_of(data: dict[str, Any], salt: str = SALT) -> str | None:
    return fingerprint(request_from_dict(data), salt)
