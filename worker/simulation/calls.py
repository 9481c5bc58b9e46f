"""Simulated gateway calls: pure functions of a seed, an index and the fault rates.

Each call draws from its own ``random.Random`` seeded with ``"{seed}:{index}"``, so a call does not
depend on the calls before it, the same seed gives the same calls on every machine, and a plan can be
produced lazily (``iter_calls``) for runs too large to hold in memory.

A call is generated in three steps: the conversation (``conversation.py``), then the wire
(``streams.py``: the operations a gateway performs, bent by the call's fault), then the expected
fate, derived from what was put on the wire (``expected.py``).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from worker.core.money import Micros
from worker.core.prices import PriceBook, load_price_book
from worker.simulation import expected as fate
from worker.simulation.conversation import (
    Conversation,
    completion_id,
    conversation,
    rfc3339,
    token,
)
from worker.simulation.expected import Expected
from worker.simulation.faults import (
    DROPPED_CONNECTION,
    DUPLICATE_ENTRIES,
    ERROR_FINISH,
    ERROR_OBJECT,
    GATEWAY_CRASH,
    HTTP_ERROR,
    LATE_USAGE,
    MALFORMED,
    MISSING_USAGE,
    NO_FAULTS,
    FaultRates,
)
from worker.simulation.streams import response_body, stream_wire
from worker.simulation.wire import (
    Close,
    Deferred,
    Frames,
    Notify,
    Op,
    Open,
    Response,
    group_entries,
)

DEFAULT_START = datetime(2025, 7, 1, tzinfo=UTC)
STREAM_SHARE = 0.75
PASSTHROUGH_SHARE = 0.15  # streamed calls whose client did not ask for usage
PAIR_RATE = 0.06  # chance that two consecutive SSE events share one gateway record

_ERROR_BODIES = (
    (500, {"message": "The server had an error while processing your request.", "type": "server_error"}),
    (503, {"message": "The engine is currently overloaded, please try again later.", "type": "server_error"}),
    (429, {"message": "Rate limit reached for requests per min.", "type": "requests", "code": "rate_limit_exceeded"}),
    (400, {"message": "This model's maximum context length is 128000 tokens.", "type": "invalid_request_error", "code": "context_length_exceeded"}),
)  # fmt: skip
_BAD_GATEWAY = (
    b"<html><head><title>502 Bad Gateway</title></head><body>502 Bad Gateway</body></html>"
)
_UNKNOWN_KINDS = ("cancel", "heartbeat", "opened", "retry")


@dataclass(frozen=True, slots=True)
class SimCall:
    """One simulated call: its request metadata, what the gateway writes, and its expected fate.

    ``meta`` is None for an orphan close (a close for a request whose stream never existed). ``ops``
    hold completion text and ``meta`` prompt text: never log either. ``twin_of`` names the other call
    of a streamed / non-streamed pair with identical output and usage.
    """

    index: int
    request_id: str
    stream: bool
    fault: str | None
    variant: str | None
    meta: dict[str, Any] | None
    ops: tuple[Op, ...]
    expected: Expected
    features: tuple[str, ...] = ()
    twin_of: str | None = None

    @property
    def kind(self) -> str:
        if self.meta is None:
            return "orphan"
        return "stream" if self.stream else "response"


def _reserve(rng: random.Random, conv: Conversation, prices: PriceBook) -> Micros:
    """A hold a bit above the cost; one call in ten is under-reserved so settling must true up."""
    cost = prices.charge(conv.model.name, conv.usage(), conv.created_at)
    base = int(cost) if cost is not None else 2 * conv.usage().total_tokens
    if rng.random() < 0.1:
        return Micros(int(base * rng.uniform(0.4, 0.95)))
    return Micros(int(base * rng.uniform(1.1, 1.8)) + rng.randint(1, 200))


# The gateway's upstream keys, by label (never a secret): an account's calls go out under one of them.
UPSTREAM_KEYS = ("key_sim_a", "key_sim_b")


def upstream_key_of(account_id: str) -> str:
    """The upstream key label the simulated gateway uses for ``account_id`` (``acct_N``)."""
    digits = "".join(ch for ch in account_id if ch.isdigit())
    return UPSTREAM_KEYS[int(digits or 0) % len(UPSTREAM_KEYS)]


def _meta(
    request_id: str,
    conv: Conversation,
    *,
    stream: bool,
    include_usage: bool,
    reserved: Micros,
    idempotency_key: str | None = None,
) -> dict[str, Any]:
    return {
        "request_id": request_id,
        "account_id": conv.account_id,
        "model": conv.model.name,
        "stream": stream,
        "include_usage": include_usage,
        "reserved_micros": int(reserved),
        "created_at": rfc3339(conv.created_at),
        "messages": conv.messages,
        "tools": conv.tools,
        "n": conv.n,
        "max_tokens": conv.max_tokens,
        "temperature": conv.temperature,
        "seed": conv.seed,
        "idempotency_key": idempotency_key,
        "provider": conv.model.provider,
        "upstream_key": upstream_key_of(conv.account_id),
    }


def _malformed_variant(rng: random.Random) -> str:
    return rng.choices(fate.DEAD_LETTERS, weights=(4, 3, 3))[0]


def _call(
    rng: random.Random,
    index: int,
    request_id: str,
    conv: Conversation,
    *,
    stream: bool,
    fault: str | None,
    include_usage: bool,
    reserved: Micros,
    prices: PriceBook,
    idempotency_key: str | None = None,
) -> SimCall:
    """Put one conversation on the wire, bent by ``fault``, and derive its expected fate."""
    features = list(conv.features)
    variant: str | None = None
    if fault == MALFORMED:
        variant = _malformed_variant(rng)
        if variant == fate.ORPHAN_CLOSE:
            ops: tuple[Op, ...] = (Close("done"),)
            return SimCall(
                index, request_id, stream, fault, variant, None, ops, fate.dead_only(variant)
            )
    meta = _meta(
        request_id,
        conv,
        stream=stream,
        include_usage=include_usage,
        reserved=reserved,
        idempotency_key=idempotency_key,
    )
    body = orjson.dumps(meta)
    if variant == fate.REQUEST_NOT_JSON:
        body = body[: rng.randint(1, len(body) - 1)]
    cid = completion_id(rng, conv)
    middle: list[Op] = []
    close = "done"
    late: Deferred | None = None
    if stream:
        cut = fault == DROPPED_CONNECTION or (fault == GATEWAY_CRASH and rng.random() < 0.5)
        if fault == GATEWAY_CRASH:
            variant = "mid_stream" if cut else "before_close"
        shown = stream_wire(rng, conv, cid, include_usage=include_usage, fault=fault, cut=cut)
        entries = group_entries(shown.events, PAIR_RATE, rng)
        if any(entry.count("data: ") > 1 for entry in entries):
            features.append("multi_event_entry")
        middle.append(Frames(entries))
        if fault in (ERROR_FINISH, ERROR_OBJECT):
            close = "upstream_error"
        elif fault == DROPPED_CONNECTION:
            close = "client_disconnect"
        if shown.late_entry is not None:
            delay = rng.randint(200, 800) if rng.random() < 0.7 else None
            late = Deferred(Frames((shown.late_entry,)), delay)
            variant = "at_end_of_run" if delay is None else "after_ms"
        outcome = fate.stream_fate(
            finished=shown.finished,
            errored=shown.errored,
            usage=shown.usage,
            include_usage=include_usage,
        )
        usage = shown.usage
        features.append(f"usage:{conv.placement}" if include_usage else "passthrough")
    else:
        status, response = 200, response_body(conv, cid)
        usage = conv.usage()
        if fault == HTTP_ERROR:
            status, error = rng.choice(_ERROR_BODIES)
            response = orjson.dumps({"error": {**error, "param": None, "code": error.get("code")}})
            if status == 503 and rng.random() < 0.5:
                status, response = 502, _BAD_GATEWAY
            usage, close = None, "upstream_error"
            variant = str(status)
        if fault == GATEWAY_CRASH:
            variant = "before_close"
        middle.append(Response(status, response))
        outcome = fate.response_fate(status=status, usage=usage)
    ops_list: list[Op] = [Open(body)]
    if fault == DUPLICATE_ENTRIES:
        variant = rng.choice(("open", "close", "both"))
        if variant in ("open", "both"):
            ops_list.append(Notify("open"))
    ops_list.extend(middle)
    if variant == fate.UNKNOWN_KIND:
        ops_list.append(Notify(rng.choice(_UNKNOWN_KINDS)))
    if fault != GATEWAY_CRASH:
        ops_list.append(Close(close))
        if variant in ("close", "both"):
            ops_list.append(Close(close))
    if late is not None:
        ops_list.append(late)
    if variant == fate.REQUEST_NOT_JSON:
        expected = fate.unreadable(variant)
    else:
        expected = fate.expected(
            outcome,
            model=conv.model.name,
            at=conv.created_at,
            usage=usage,
            reserved=reserved,
            prices=prices,
            dead_letter=fate.UNKNOWN_KIND if variant == fate.UNKNOWN_KIND else None,
            late=late is not None,
            swept=fault == GATEWAY_CRASH,
        )
    return SimCall(
        index, request_id, stream, fault, variant, meta, tuple(ops_list), expected, tuple(features)
    )


def _account_weights(accounts: int) -> list[float]:
    """A few busy accounts and a long tail, as real tenants are."""
    return [1.0 / (rank**0.8) for rank in range(1, accounts + 1)]


def iter_calls(
    n: int,
    seed: int,
    faults: FaultRates = NO_FAULTS,
    *,
    twins: float = 0.0,
    accounts: int = 10,
    start: datetime = DEFAULT_START,
    run_id: str | None = None,
    prices: PriceBook | None = None,
) -> Iterator[SimCall]:
    """Yield ``n`` calls lazily; see ``plan``."""
    if n < 0:
        raise ValueError("n must not be negative")
    if accounts < 1:
        raise ValueError("accounts must be at least 1")
    if not 0.0 <= twins <= 1.0:
        raise ValueError("twins must be between 0 and 1")
    prices = prices or load_price_book()
    run = run_id or f"s{seed}"
    weights = _account_weights(accounts)
    index = 0
    while index < n:
        rng = random.Random(f"{seed}:{index}")
        twin = rng.random() < twins and index + 1 < n
        stream = twin or rng.random() < STREAM_SHARE
        fault = None if twin else faults.draw(rng, stream=stream)
        conv = conversation(rng, start, index, weights)
        request_id = f"req_{run}_{index:06d}"
        if twin:
            conv.temperature = 0
            reserved = _reserve(rng, conv, prices)
            other = f"req_{run}_{index + 1:06d}"
            pair = (
                _call(rng, index, request_id, conv, stream=True, fault=None,
                      include_usage=True, reserved=reserved, prices=prices),
                _call(rng, index + 1, other, conv, stream=False, fault=None,
                      include_usage=True, reserved=reserved, prices=prices),
            )  # fmt: skip
            yield _twin(pair[0], other)
            yield _twin(pair[1], request_id)
            index += 2
            continue
        include_usage = True
        if stream and fault not in (MISSING_USAGE, LATE_USAGE):
            include_usage = rng.random() >= PASSTHROUGH_SHARE
        key = f"idem-{token(rng, 16)}" if not stream and rng.random() < 0.2 else None
        reserved = _reserve(rng, conv, prices)
        yield _call(
            rng,
            index,
            request_id,
            conv,
            stream=stream,
            fault=fault,
            include_usage=include_usage,
            reserved=reserved,
            prices=prices,
            idempotency_key=key,
        )
        index += 1


def _twin(call: SimCall, other: str) -> SimCall:
    return SimCall(
        call.index,
        call.request_id,
        call.stream,
        call.fault,
        call.variant,
        call.meta,
        call.ops,
        call.expected,
        (*call.features, "twin"),
        twin_of=other,
    )


def plan(
    n: int,
    seed: int,
    faults: FaultRates = NO_FAULTS,
    *,
    twins: float = 0.0,
    accounts: int = 10,
    start: datetime = DEFAULT_START,
    run_id: str | None = None,
) -> list[SimCall]:
    """The ``n`` calls of a run with their expected fates, without publishing anything.

    Deterministic for ``(seed, faults, twins, accounts, start, run_id)``. Request ids are
    ``req_{run_id}_{index:06d}`` (``run_id`` defaults to ``s{seed}``); give each run against the same
    Redis its own ``run_id`` or the ids collide. ``created_at`` starts at ``start`` and advances about
    25 ms per call.
    """
    return list(
        iter_calls(n, seed, faults, twins=twins, accounts=accounts, start=start, run_id=run_id)
    )
