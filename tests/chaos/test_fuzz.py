"""Fuzzing the SSE parser, the assembler and the reconciler through the consumer's own path.

Three fuzzers share one target (``fuzzing.target``): a seeded mutation fuzzer over the recorded
fixture streams and simulated calls, hypothesis strategies that write SSE from scratch, and atheris
(coverage-guided) when it is installed. Every input must end in a result or an ``InputError`` within
the time bound. SHORT (``make test``): a few thousand inputs; FULL (``make chaos``): over 100,000.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worker.consumer.reconciling import reconcile_record
from worker.core.result import Outcome, UsageSource

from .fuzzing import (
    BOOK,
    BOUND_SECONDS,
    atheris_entries,
    corpus,
    meta,
    mutate,
    response_entries,
    streamed_entries,
    target,
    time_bound,
)

pytestmark = [pytest.mark.chaos]

ROOT = Path(__file__).resolve().parents[2]
ATHERIS_TARGET = Path(__file__).with_name("atheris_target.py")
REGRESSIONS = ROOT / "tests" / "fixtures" / "fuzz"
# What libFuzzer names the inputs it keeps (``-artifact_prefix`` + kind + sha1).
ARTIFACTS = ("crash-*", "leak-*", "timeout-*", "oom-*", "slow-unit-*")


@dataclass
class FuzzFigures:
    fuzzer: str
    inputs: int = 0
    slowest_ms: float = 0.0
    seconds: float = 0.0
    endings: Counter[str] = field(default_factory=Counter)

    def run(self, entries) -> None:
        started = time.perf_counter()
        with time_bound(BOUND_SECONDS):
            ending = target(entries)
        self.slowest_ms = max(self.slowest_ms, (time.perf_counter() - started) * 1000)
        self.inputs += 1
        self.endings[ending] += 1

    def line(self) -> str:
        endings = " ".join(f"{k}={v}" for k, v in sorted(self.endings.items()))
        slowest = f"{self.slowest_ms:.0f}ms" if self.slowest_ms else f"<{BOUND_SECONDS:.0f}s"
        return (
            f"fuzz {self.fuzzer:<17} inputs={self.inputs} crashes=0 hangs=0 "
            f"slowest={slowest} time={self.seconds:.0f}s {endings}"
        ).rstrip()


def test_mutation_fuzzer(scale, record) -> None:
    """Seeded mutations of real and simulated calls: flips, splices, odd JSON values, deep nests."""
    streams, bodies = corpus()
    rng = random.Random(20250701)
    figures = FuzzFigures("mutation")
    started = time.monotonic()
    for _ in range(scale.pick(3_000, 100_000)):
        kind = rng.random()
        if kind < 0.8:
            frames = mutate(rng, rng.choice(streams), streams)
            request = None
            if rng.random() < 0.1:
                request = meta(n=rng.choice((1, 2, 3, 0, -1)), include_usage=rng.random() < 0.5)
            if rng.random() < 0.02:
                request = mutate(rng, [meta()], streams)[0]
            figures.run(streamed_entries(frames, request))
        else:
            body = mutate(rng, [rng.choice(bodies)], streams)[0]
            status = rng.choice((b"200", b"200", b"400", b"500", b"502", b"99", b"abc", b""))
            figures.run(response_entries(status, body))
    figures.seconds = time.monotonic() - started
    record.append(figures)


_json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)
)
_json = st.recursive(
    _json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
_choice = st.fixed_dictionaries(
    {"index": st.integers(-2, 4) | _json_scalars},
    optional={
        "delta": st.fixed_dictionaries(
            {},
            optional={
                "role": st.sampled_from(["assistant", "tool", ""]) | _json_scalars,
                "content": st.text(max_size=30) | _json_scalars,
                "tool_calls": st.lists(_json, max_size=3),
                "refusal": st.text(max_size=10) | st.none(),
            },
        )
        | _json,
        "finish_reason": st.sampled_from(["stop", "length", "error", "tool_calls", None])
        | _json_scalars,
        "logprobs": _json,
    },
)
_usage = st.fixed_dictionaries(
    {},
    optional={
        "prompt_tokens": st.integers(-10, 10**12) | _json_scalars,
        "completion_tokens": st.integers(-10, 10**12) | _json_scalars,
        "total_tokens": _json_scalars,
        "prompt_tokens_details": _json,
    },
)
_chunk = st.fixed_dictionaries(
    {},
    optional={
        "id": st.sampled_from(["chatcmpl-a", "chatcmpl-b"]) | _json_scalars,
        "object": st.sampled_from(["chat.completion.chunk", "chat.completion"]) | _json_scalars,
        "choices": st.lists(_choice, max_size=3) | _json,
        "usage": _usage | st.none() | _json,
        "error": _json,
        "model": st.text(max_size=10),
    },
)


def _event(chunk: dict, name: str | None, style: str) -> str:
    data = json.dumps(chunk, ensure_ascii=False) if style != "raw" else str(chunk)
    head = f"event: {name}\n" if name else ""
    return (
        head
        + f"data: {data}"
        + {"lf": "\n\n", "crlf": "\r\n\r\n", "none": "", "raw": "\n\n"}[style]
    )


_events = st.builds(
    _event,
    _chunk,
    st.sampled_from([None, None, "error", "message", "ping"]),
    st.sampled_from(["lf", "lf", "crlf", "none", "raw"]),
)
_record = st.lists(
    _events
    | st.sampled_from(["data: [DONE]\n\n", ": keep-alive\n\n", "\n", "data:\n\n", "retry: 5\n"])
    | st.text(max_size=40),
    max_size=4,
).map(lambda parts: "".join(parts).encode("utf-8", "surrogatepass"))


def _dumps(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _hypothesis_settings(scale, short: int, full: int):
    return settings(
        max_examples=scale.pick(short, full),
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def test_hypothesis_streams(scale, record) -> None:
    """Streams written from scratch: plausible chunks with wrong types, odd SSE framing, junk."""
    figures = FuzzFigures("hypothesis-stream")
    started = time.monotonic()

    @_hypothesis_settings(scale, 1_000, 20_000)
    @given(
        records=st.lists(_record, max_size=12),
        n=st.integers(1, 3),
        include_usage=st.booleans(),
        model=st.sampled_from(["gpt-4o", "gpt-4o-mini", "no-such-model"]),
    )
    def run(records: list[bytes], n: int, include_usage: bool, model: str) -> None:
        request = meta(n=n, include_usage=include_usage, model=model)
        figures.run(streamed_entries(records, request))

    run()
    figures.seconds = time.monotonic() - started
    record.append(figures)


def test_hypothesis_responses_and_entries(scale, record) -> None:
    """Non-streamed bodies, request metadata and entry kinds from scratch (InputError allowed)."""
    figures = FuzzFigures("hypothesis-entries")
    started = time.monotonic()

    @_hypothesis_settings(scale, 1_000, 10_000)
    @given(
        status=st.sampled_from([b"200", b"404", b"500", b"0", b"x", b"2000"]),
        body=st.one_of(_json.map(_dumps), st.binary(max_size=60), _chunk.map(_dumps)),
        request=st.one_of(
            st.just(None),
            _json.map(_dumps),
            st.dictionaries(
                st.sampled_from(["request_id", "model", "stream", "n", "created_at", "messages"]),
                _json,
            ).map(lambda extra: meta(**{"stream": False, **extra})),
        ),
        kinds=st.lists(st.sampled_from([b"frame", b"response", b"request", b"junk"]), max_size=3),
    )
    def run(status: bytes, body: bytes, request: bytes | None, kinds: list[bytes]) -> None:
        entries = response_entries(status, body, request)
        for i, kind in enumerate(kinds, start=2):
            entries.append((f"1-{i}".encode(), {b"kind": kind, b"body": body}))
        figures.run(entries)

    run()
    figures.seconds = time.monotonic() - started
    record.append(figures)


# Runs its arguments as a child of its own and exits with the child's status.
LAUNCHER = "import subprocess, sys; sys.exit(subprocess.run(sys.argv[1:]).returncode)"


def test_atheris(scale, record, tmp_path: Path) -> None:
    """Coverage-guided fuzzing with atheris (libFuzzer), when it is installed: no crash, no hang."""
    import atheris  # noqa: F401  (a test extra: missing it is a broken install, not a skip)

    runs = scale.pick(3_000, 100_000)
    seeds = tmp_path / "corpus"
    seeds.mkdir()
    streams, _bodies = corpus(calls=40)
    for i, frames in enumerate(streams):
        (seeds / f"seed{i}").write_bytes(b"\x00".join(frames))
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    # Started from a small launcher process: libFuzzer's RSS limit reads the peak RSS
    # (getrusage), which Linux carries across exec from the mm that exec replaces, so a fuzzer
    # started straight from this (long-lived, large) xdist worker began at the worker's own peak:
    # once at 2,083 MB, an out-of-memory before its first input.
    argv = [
        sys.executable, "-c", LAUNCHER,
        sys.executable, str(ATHERIS_TARGET),
        f"-runs={runs}", f"-timeout={int(BOUND_SECONDS)}", "-rss_limit_mb=2048",
        "-max_len=65536", "-seed=7", f"-artifact_prefix={artifacts}/", str(seeds),
    ]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=3600,
        cwd=tmp_path,  # whatever libFuzzer writes stays out of the working tree
    )
    seconds = time.monotonic() - started
    tail = proc.stderr[-3000:]
    found = sorted(path.name for path in artifacts.iterdir())
    assert proc.returncode == 0, (
        f"atheris found a crash or a hang (inputs in {artifacts}: {found}); keep one as a named "
        f"fixture in {REGRESSIONS} with a test of what it must do:\n{tail}"
    )
    done = [line for line in proc.stderr.splitlines() if line.startswith("Done ")]
    figures = FuzzFigures("atheris", inputs=runs, seconds=seconds)
    record.append(figures)
    assert done, tail


def test_the_plain_chunk_path_survives_a_frame_that_is_not_utf8() -> None:
    """``plain-chunk-not-utf8.bin`` (found by atheris while the msgspec path for plain chunks was
    written): a streamed call whose third frame holds ``"caf\\xe9"``, Latin-1 inside a plain content
    chunk. The frame reaches the plain path (``StreamAssembler.feed_plain``, now compiled) as
    surrogate-escaped text, which cannot be encoded back to UTF-8; the ``UnicodeEncodeError`` once
    escaped the reconciler and would crash the batch. It must take the general path instead: one
    bad frame (an anomaly), the call settled from the rest.
    """
    entries = atheris_entries((REGRESSIONS / "plain-chunk-not-utf8.bin").read_bytes())
    assert target(entries) == "result:settled"
    result = reconcile_record(entries, "req_fuzz", BOOK)
    assert result.outcome is Outcome.SETTLED and result.usage_source is UsageSource.REPORTED
    assert result.usage is not None
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (11, 3)
    assert [choice.content for choice in result.choices] == ["Hello there."]
    assert "bad_frames" in result.anomalies


def test_every_regression_input_has_its_test_and_passes_the_atheris_target(tmp_path: Path) -> None:
    """The kept inputs, replayed by the atheris target itself (libFuzzer runs each file once); run
    without ``-artifact_prefix`` it writes to a temporary directory, never to its working directory.
    No fuzzer artifact lies at the repository root."""
    kept = sorted(REGRESSIONS.glob("*.bin"))
    source = Path(__file__).read_text()
    for path in kept:
        assert path.name in source, f"{path.name} has no test here"
    proc = subprocess.run(
        [sys.executable, str(ATHERIS_TARGET), *map(str, kept)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"Executed {kept[0]}" in proc.stderr, proc.stderr[-3000:]
    assert list(tmp_path.iterdir()) == []
    [line] = [line for line in proc.stderr.splitlines() if "artifacts go to" in line]
    directory = Path(line.split("artifacts go to ", 1)[1].rstrip("/"))
    assert not directory.is_relative_to(ROOT) and directory.is_dir()
    directory.rmdir()  # empty: nothing crashed
    for pattern in ARTIFACTS:
        assert not list(ROOT.glob(pattern)), f"a fuzzer artifact at the repository root: {pattern}"
