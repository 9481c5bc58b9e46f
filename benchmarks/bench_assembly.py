"""How fast we parse and assemble streams, against the openai SDK's ``ChatCompletionStreamState``.

Both sides assemble the same seeded streams (benchmarks/streams.py). Ours starts from the raw SSE body
bytes (split, UTF-8 decode, orjson, assemble). The SDK is handed each event's data string already
split out of the body (a head start: its SSE line decoder is not timed) and does what its ``Stream``
does per frame: ``json.loads``, ``construct_type`` into ``ChatCompletionChunk``, then
``handle_chunk``. Results are checked field by field before any figure is reported. Target: >= 100x.

Also measured, not compared: what the consumer pays per frame for a whole call (``reconcile_stream``:
decode, assemble, estimate, price) on the simulator's calls as the consumer reads them (records of
one or a few events), and where both spend their time (cProfile's own time).

    .venv/bin/python -m benchmarks.bench_assembly [--smoke]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from openai._models import construct_type
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

from benchmarks.harness.own_time import own_time
from benchmarks.harness.streams import streams, to_sse
from benchmarks.harness.workload import streamed_calls
from worker.core.assembly import Assembled, assemble_stream
from worker.core.prices import load_price_book
from worker.core.reconcile import reconcile_stream

TARGET_RATIO = 100.0


def _sdk_assemble(datas: list[str]) -> Any:
    state = ChatCompletionStreamState()
    for data in datas:
        if data.startswith("[DONE]"):
            break
        chunk = construct_type(type_=ChatCompletionChunk, value=json.loads(data))
        state.handle_chunk(chunk)
    return state.current_completion_snapshot


def _same(ours: Assembled, sdk: Any) -> None:
    def check(what: str, mine: Any, theirs: Any) -> None:
        if mine != theirs:
            raise AssertionError(f"{sdk.id}: {what} differs: ours {mine!r:.80}, sdk {theirs!r:.80}")

    check("id", ours.completion_id, sdk.id)
    check("model", ours.model, sdk.model)
    check("system_fingerprint", ours.system_fingerprint, sdk.system_fingerprint)
    check("usage", ours.usage_raw, sdk.usage.to_dict() if sdk.usage else None)
    check("choices", len(ours.choices), len(sdk.choices))
    for mine, theirs in zip(ours.choices, sdk.choices, strict=True):
        message = theirs.message
        check("role", mine.role, message.role)
        check("content", mine.content, message.content)
        check("refusal", mine.refusal, message.refusal)
        check("finish_reason", mine.finish_reason, theirs.finish_reason)
        check(
            "tool_calls",
            [(t.id, t.type, t.name, t.arguments) for t in mine.tool_calls],
            [
                (t.id, t.type, t.function.name, t.function.arguments)
                for t in message.tool_calls or []
            ],
        )


def _best(work: Callable[[], object], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best


def per_call(smoke: bool) -> dict[str, Any]:
    """Per frame, what reconciling a whole streamed call costs, and the assembly's part of it."""
    book = load_price_book()
    calls = streamed_calls(150 if smoke else 1500)
    frames = sum(len(records) for _, records in calls)

    def reconcile() -> None:
        for meta, records in calls:
            reconcile_stream(meta, records, book)

    def assemble() -> None:
        for _, records in calls:
            assemble_stream(records)

    rounds = 2 if smoke else 5
    reconcile()
    return {
        "calls": len(calls),
        "call_frames": frames,
        "reconcile_ns_per_frame": _best(reconcile, rounds) / frames * 1e9,
        "assemble_ns_per_frame": _best(assemble, rounds) / frames * 1e9,
        "reconcile_profile": own_time(reconcile),
    }


def run(smoke: bool = False) -> dict[str, Any]:
    """Measure both sides on identical frames; returns the figures (frames/s, ratio, target met)."""
    count, ours_rounds, sdk_rounds = (6, 3, 1) if smoke else (60, 7, 2)
    chunk_lists = streams(count)
    bodies = [to_sse(chunks) for chunks in chunk_lists]
    # What the SDK's SSE decoder would hand its Stream: each event's data, [DONE] included.
    datas = [[event[6:] for event in body.decode().split("\n\n") if event] for body in bodies]
    frames = sum(len(d) for d in datas)

    ours_results = [assemble_stream(body) for body in bodies]
    sdk_results = [_sdk_assemble(d) for d in datas]
    for ours, sdk in zip(ours_results, sdk_results, strict=True):
        _same(ours, sdk)

    ours_s = _best(lambda: [assemble_stream(body) for body in bodies], ours_rounds)
    sdk_s = _best(lambda: [_sdk_assemble(d) for d in datas], sdk_rounds)
    ours_rate, sdk_rate = frames / ours_s, frames / sdk_s
    return {
        "ours_profile": own_time(lambda: [assemble_stream(body) for body in bodies]),
        **per_call(smoke),
        "streams": count,
        "frames": frames,
        "bytes": sum(map(len, bodies)),
        "ours_frames_per_s": ours_rate,
        "openai_frames_per_s": sdk_rate,
        "ratio": ours_rate / sdk_rate,
        "target_ratio": TARGET_RATIO,
        "meets_target": ours_rate / sdk_rate >= TARGET_RATIO,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a quick run with fewer streams")
    figures = run(smoke=parser.parse_args().smoke)
    print(f"streams: {figures['streams']}, frames: {figures['frames']}, bytes: {figures['bytes']}")
    print(f"ours (parse+assemble from bytes): {figures['ours_frames_per_s']:>12,.0f} frames/s")
    print(f"openai ChatCompletionStreamState: {figures['openai_frames_per_s']:>12,.0f} frames/s")
    print(
        f"ratio: {figures['ratio']:.1f}x (target >= {figures['target_ratio']:.0f}x), "
        f"{'met' if figures['meets_target'] else 'NOT met'}"
    )
    print(
        f"reconcile_stream: {figures['reconcile_ns_per_frame']:,.0f} ns/frame, of which "
        f"assembly {figures['assemble_ns_per_frame']:,.0f} ({figures['calls']} calls)"
    )


if __name__ == "__main__":
    main()
