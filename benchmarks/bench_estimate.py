"""How fast ``estimate_completion`` counts, against tiktoken's own ``encode_ordinary``.

Both sides count the same completion texts (a few tokens to a few thousand: chat answers, code, tool
arguments, non-English prose; fixed seed) with the same o200k_base encoding in the same process, so
the ratio measures only what the estimate adds around the encoder. Target: ratio >= 0.5.

``run_spaceless`` (row 5's second line) measures the estimate on the worst texts we could
construct, text without spaces, which the pre-tokenizer makes one huge piece of (or, for a run of
a million spaces, overflows on): runs of letters, of one letter, of digits, of CJK, of emoji, of
punctuation, of spaces, base64, and random bytes decoded. Target: at least 1 MB/s (UTF-8 bytes)
on every one; the row's ratio is the slowest kind's MB/s over that. Each kind is also counted at a
quarter of the size (MB/s at full size over MB/s at a quarter: 1 when the time is linear), and
the process's peak RSS above its start while counting (``/proc/self/clear_refs``) is noted.

    .venv/bin/python -m benchmarks.bench_estimate [--smoke]
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import time
from collections.abc import Callable
from pathlib import Path

from worker.core.estimate import DEFAULT_TABLE, estimate_completion
from worker.core.result import Choice, ToolCall
from worker.core.vocab import load_encoding

MODEL = "gpt-4o"
TARGET_RATIO = 0.5
SEED = 20240806
SPACELESS_TARGET_MB_S = 1.0

_VOCABULARY = (
    "the invoice total usage token model request account billing reconcile stream response "
    "latency gateway customer project deploy region cache retry error because however therefore "
    "which would could should about between during before after every other simple complex "
    "function value return result data table index query update insert delete select where"
)
_WORDS = _VOCABULARY.split()
_CODE = [
    "def {name}(items: list[int]) -> int:\n    total = 0\n    for item in items:\n"
    "        total += item * {n}\n    return total\n",
    "for (let i = 0; i < {n}; i++) {{\n  console.log(`{name} ${{i}}`);\n}}\n",
    "SELECT {name}, COUNT(*) FROM usage WHERE tokens > {n} GROUP BY {name};\n",
]
_FOREIGN = [
    "Die Rechnung wurde am {n}. März erstellt und enthält alle Positionen. ",
    "La facture du mois contient {n} lignes détaillées pour chaque projet. ",
    "請求書には{n}件の明細が含まれています。",
    "Счёт содержит {n} строк с подробной информацией. ",  # noqa: RUF001
]


def _prose(rng: random.Random, words: int) -> str:
    sentences = []
    while words > 0:
        length = min(words, rng.randint(6, 22))
        sentence = " ".join(rng.choice(_WORDS) for _ in range(length))
        sentences.append(sentence.capitalize() + rng.choice([".", ".", ",", "?", "!"]))
        words -= length
    return " ".join(sentences)


def _text(rng: random.Random, words: int) -> str:
    kind = rng.random()
    if kind < 0.55:
        return _prose(rng, words)
    if kind < 0.75:
        parts = [_prose(rng, max(1, words // 3)), "\n\n```\n"]
        while sum(map(len, parts)) < words * 6:
            parts.append(rng.choice(_CODE).format(name=rng.choice(_WORDS), n=rng.randint(1, 999)))
        return "".join(parts) + "```\n"
    if kind < 0.9:
        return "".join(
            rng.choice(_FOREIGN).format(n=rng.randint(1, 99)) for _ in range(max(1, words // 8))
        )
    fields = {
        rng.choice(_WORDS): rng.choice([_prose(rng, 3), rng.randint(0, 10**6)])
        for _ in range(max(1, words // 6))
    }
    return json.dumps(fields)


def completion_texts(count: int, seed: int = SEED) -> list[str]:
    """``count`` texts whose lengths spread log-uniformly from ~2 to a few thousand tokens."""
    rng = random.Random(seed)
    return [_text(rng, max(1, int(2 ** rng.uniform(0.5, 11.3)))) for _ in range(count)]


def _best_time(work: Callable[[], int], rounds: int) -> tuple[float, int]:
    best = float("inf")
    tokens = 0
    for _ in range(rounds):
        started = time.perf_counter()
        tokens = work()
        best = min(best, time.perf_counter() - started)
    return best, tokens


def run(smoke: bool = False) -> dict[str, float | int | bool]:
    """Measure both sides; returns the figures (tokens/s, ratio, whether the target is met)."""
    count, rounds = (60, 2) if smoke else (600, 5)
    texts = completion_texts(count)
    encoding = load_encoding(DEFAULT_TABLE.resolve(MODEL).encoding)
    choice_lists = [[Choice(index=0, content=text)] for text in texts]
    estimate_completion(MODEL, choice_lists[0])  # warm the per-model lookup

    def baseline() -> int:
        encode = encoding.encode_ordinary
        return sum(len(encode(text)) for text in texts)

    def ours() -> int:
        return sum(estimate_completion(MODEL, choices) for choices in choice_lists)

    baseline_s, baseline_tokens = _best_time(baseline, rounds)
    ours_s, ours_tokens = _best_time(ours, rounds)
    if ours_tokens != baseline_tokens:
        raise AssertionError(f"counts differ: estimate {ours_tokens}, tiktoken {baseline_tokens}")

    # A mixed workload spreads per-call cost over long texts; short answers show the overhead.
    short = [choices for choices in choice_lists if len(choices[0].content or "") < 200]
    short_texts = [choices[0].content or "" for choices in short]
    short_base_s, short_tokens = _best_time(
        lambda: sum(len(encoding.encode_ordinary(text)) for text in short_texts), rounds
    )
    short_ours_s, _ = _best_time(
        lambda: sum(estimate_completion(MODEL, choices) for choices in short), rounds
    )
    tool_choices = [
        [Choice(index=0, tool_calls=[ToolCall(index=0, name="lookup", arguments=text)])]
        for text in texts[: count // 4]
    ]
    tool_s, tool_tokens = _best_time(
        lambda: sum(estimate_completion(MODEL, choices) for choices in tool_choices), rounds
    )

    ratio = (ours_tokens / ours_s) / (baseline_tokens / baseline_s)
    short_ratio = (short_tokens / short_ours_s) / (short_tokens / short_base_s)
    return {
        "texts": count,
        "tokens": baseline_tokens,
        "tiktoken_tokens_per_s": baseline_tokens / baseline_s,
        "estimate_tokens_per_s": ours_tokens / ours_s,
        "ratio": ratio,
        "short_texts": len(short),
        "short_ratio": short_ratio,
        "tool_call_tokens_per_s": tool_tokens / tool_s,
        "target_ratio": TARGET_RATIO,
        "meets_target": ratio >= TARGET_RATIO,
    }


def spaceless_texts(chars: int, seed: int = SEED) -> dict[str, str]:
    """Texts of ``chars`` characters without a space between two words (fixed seed)."""
    rng = random.Random(seed)

    def pick(alphabet: str) -> str:
        return "".join(rng.choices(alphabet, k=chars))

    return {
        "letters": pick("abcdefghijklmnopqrstuvwxyz"),
        "one letter": "a" * chars,
        "digits": pick("0123456789"),
        "CJK": "".join(chr(code) for code in rng.choices(range(0x4E00, 0xA000), k=chars)),
        "emoji": "".join(chr(code) for code in rng.choices(range(0x1F300, 0x1F650), k=chars)),
        "punctuation": pick('!"#$%&()*+,-./:;<=>?@[\\]^_`{|}~'),
        "spaces": " " * chars,
        "base64": base64.b64encode(rng.randbytes(chars)).decode()[:chars],
        "random bytes": rng.randbytes(chars).decode("utf-8", "replace")[:chars],
    }


def _peak_rss_above_start(work: Callable[[], object]) -> float | None:
    """MB the process's peak RSS rose above its RSS at the start of ``work`` (Linux: the peak is
    reset by writing 5 to ``/proc/self/clear_refs``); None where that cannot be done."""
    status = Path("/proc/self/status")

    def field(name: str) -> int:
        for line in status.read_text().splitlines():
            if line.startswith(name):
                return int(line.split()[1]) * 1024
        raise KeyError(name)

    try:
        Path("/proc/self/clear_refs").write_text("5")
        start = field("VmRSS:")
    except (OSError, KeyError):
        return None
    work()
    return (field("VmHWM:") - start) / 1e6


def run_spaceless(smoke: bool = False) -> dict[str, object]:
    """Row 5's second line: MB/s of ``estimate_completion`` on each text of ``spaceless_texts``."""
    chars, rounds = (200_000, 1) if smoke else (2_000_000, 3)
    estimate_completion(MODEL, [Choice(index=0, content="warm")])
    kinds: dict[str, dict[str, float | None]] = {}
    for kind, text in spaceless_texts(chars).items():
        quarter = text[: chars // 4]
        mb = len(text.encode("utf-8")) / 1e6
        quarter_mb = len(quarter.encode("utf-8")) / 1e6
        choices = [Choice(index=0, content=text)]
        quarter_choices = [Choice(index=0, content=quarter)]
        seconds, _ = _best_time(lambda c=choices: estimate_completion(MODEL, c), rounds)
        quarter_s, _ = _best_time(lambda c=quarter_choices: estimate_completion(MODEL, c), rounds)
        peak = _peak_rss_above_start(lambda c=choices: estimate_completion(MODEL, c))
        kinds[kind] = {
            "mb": mb,
            "mb_per_s": mb / seconds,
            "linearity": (mb / seconds) / (quarter_mb / quarter_s),
            "peak_rss_mb": peak,
        }
    worst = min(kinds, key=lambda kind: kinds[kind]["mb_per_s"] or 0.0)
    worst_rate = kinds[worst]["mb_per_s"] or 0.0
    return {
        "chars": chars,
        "kinds": kinds,
        "worst": worst,
        "worst_mb_per_s": worst_rate,
        "target_mb_per_s": SPACELESS_TARGET_MB_S,
        "ratio": worst_rate / SPACELESS_TARGET_MB_S,
        "meets_target": worst_rate >= SPACELESS_TARGET_MB_S,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a quick run with fewer texts")
    figures = run(smoke=parser.parse_args().smoke)
    print(f"texts: {figures['texts']}, tokens: {figures['tokens']}")
    print(f"tiktoken encode_ordinary: {figures['tiktoken_tokens_per_s']:>12,.0f} tokens/s")
    print(f"estimate_completion:      {figures['estimate_tokens_per_s']:>12,.0f} tokens/s")
    print(
        f"ratio: {figures['ratio']:.2f} (target >= {figures['target_ratio']}), "
        f"{'met' if figures['meets_target'] else 'NOT met'}"
    )
    print(f"short texts (<200 chars, {figures['short_texts']}): ratio {figures['short_ratio']:.2f}")
    print(f"tool-call arguments: {figures['tool_call_tokens_per_s']:,.0f} tokens/s")
    spaceless = run_spaceless(smoke=parser.parse_args().smoke)
    for kind, row in spaceless["kinds"].items():  # type: ignore[attr-defined]
        peak = row["peak_rss_mb"]
        print(
            f"{kind:>12}: {row['mb']:5.1f} MB at {row['mb_per_s']:6.2f} MB/s "
            f"(full / quarter size {row['linearity']:.2f}), peak RSS "
            + ("?" if peak is None else f"+{peak:.1f} MB")
        )
    print(f"slowest: {spaceless['worst']}, ratio {spaceless['ratio']:.2f} (target >= 1 MB/s)")


if __name__ == "__main__":
    main()
