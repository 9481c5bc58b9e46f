"""Reading the SSE text a simulated call put on the wire, with plain string splitting and ``json``.

Not with ``worker.core.assembly``: the simulator's output is what the assembly is tested against, so it
must not be checked by it.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from worker.simulation.wire import Deferred, Frames


def split_events(entry: str) -> list[str]:
    """The ``data:`` payloads of one gateway record (one or more SSE events)."""
    assert entry.endswith("\n\n"), entry[-20:]
    payloads = []
    for event in entry.split("\n\n")[:-1]:
        assert event.startswith("data: "), event[:20]
        payloads.append(event[len("data: ") :])
    return payloads


def events(call: Any, *, late: bool = True) -> tuple[Any, ...]:
    """Every event of a streamed call in wire order: decoded JSON objects, and ``"[DONE]"``."""
    return _events(call.ops, late)


@lru_cache(maxsize=4096)
def _events(ops: tuple[Any, ...], late: bool) -> tuple[Any, ...]:
    out: list[Any] = []
    for op in ops:
        entries = op.entries if isinstance(op, Frames) else ()
        if late and isinstance(op, Deferred):
            entries = op.frames.entries
        for entry in entries:
            for payload in split_events(entry):
                out.append(payload if payload == "[DONE]" else json.loads(payload))
    return tuple(out)


def chunks(call: Any, *, late: bool = True) -> list[dict[str, Any]]:
    return [e for e in events(call, late=late) if isinstance(e, dict) and "choices" in e]


def usages(call: Any, *, late: bool = True) -> list[dict[str, Any]]:
    return [c["usage"] for c in chunks(call, late=late) if c.get("usage")]


def finishes(call: Any) -> list[tuple[int, str]]:
    return [
        (choice["index"], choice["finish_reason"])
        for chunk in chunks(call)
        for choice in chunk["choices"]
        if choice["finish_reason"] is not None
    ]
