"""The suite: each benchmark's figures turned into table rows, in the order they are run.

A benchmark module measures and returns a dict (``run(smoke) -> dict``); the functions here only
read those dicts, so a module can be run and inspected on its own. Rows that need another row's
figure (the naive design and the latency row use the end-to-end maximum rate) get it from the
``Context``, which runs the end-to-end benchmark first if ``--only`` skipped it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import bench_assembly, bench_estimate, bench_pipeline
from benchmarks.table import Row, rate


@dataclass
class Context:
    smoke: bool
    profile_dir: Path | None = None
    figures: dict[str, dict[str, Any]] = field(default_factory=dict)

    def e2e(self) -> dict[str, Any]:
        """The end-to-end figures, measured now if this run has not measured them yet."""
        if "e2e" not in self.figures:
            self.figures["e2e"] = bench_pipeline.run(self.smoke, self.profile_dir)
        return self.figures["e2e"]


def assembly(ctx: Context) -> list[Row]:
    f = ctx.figures["assembly"] = bench_assembly.run(ctx.smoke)
    return [
        Row(
            "1. stream assembly",
            rate(f["ours_frames_per_s"], "frames/s"),
            f"{rate(f['openai_frames_per_s'], 'frames/s')} (openai ChatCompletionStreamState)",
            f["ratio"],
            f"≥ {f['target_ratio']:.0f}x",
            bool(f["meets_target"]),
            [
                f"parse + assemble from SSE bytes; {f['streams']} seeded streams, {f['frames']:,} frames; results checked field by field"
            ],
        )
    ]


def e2e(ctx: Context) -> list[Row]:
    f = ctx.e2e()
    effects = ", ".join(f"{name} {count}" for name, count in sorted(f["effects"].items()))
    return [
        Row(
            "2. end-to-end, one consumer",
            f"{rate(f['ours_frames_per_s'], 'frames/s')} ({rate(f['ours_calls_per_s'], 'calls/s')})",
            f"{rate(f['transport_frames_per_s'], 'frames/s')} (transport limit)",
            f["ratio"],
            f"≥ {f['target_ratio']}",
            bool(f["meets_target"]),
            [
                "Redis → reconcile → PostgreSQL commit → ack, Consumer.poll in a loop, against "
                "XREADGROUP + pipelined XRANGE per call + XACK of the same entries; "
                f"{f['calls']:,} simulated calls (default fault mix), {f['closed_calls']:,} closed, "
                f"{f['frames']:,} frame entries ({f['frames_per_call']:.0f} per closed call), "
                f"{f['notifications']:,} notifications; drain {f['ours_seconds']:.2f} s vs "
                f"transport {f['transport_seconds']:.3f} s; effects: {effects}, dead {f['dead']}"
            ],
        ),
        Row(
            "Redis memory / in-flight frame",
            f"{f['redis_bytes_per_frame']:,.0f} bytes",
            notes=[
                "INFO used_memory after writing minus before, over the frame entries written "
                "(request entries and notifications included in the delta); other clients of the "
                "server add noise"
            ],
        ),
    ]


def estimate(ctx: Context) -> list[Row]:
    f = ctx.figures["estimate"] = bench_estimate.run(ctx.smoke)
    return [
        Row(
            "5. tiktoken fallback",
            rate(f["estimate_tokens_per_s"], "tokens/s"),
            f"{rate(f['tiktoken_tokens_per_s'], 'tokens/s')} (tiktoken encode_ordinary)",
            f["ratio"],
            f"≥ {f['target_ratio']}",
            bool(f["meets_target"]),
            [
                f"estimate_completion vs encode_ordinary on {f['texts']} texts, "
                f"{f['tokens']:,} tokens; short texts (<200 chars) ratio "
                f"{f['short_ratio']:.2f}"
            ],
        )
    ]


BENCHMARKS: dict[str, Callable[[Context], list[Row]]] = {
    "assembly": assembly,
    "e2e": e2e,
    "estimate": estimate,
}
