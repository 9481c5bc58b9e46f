"""How fast ``estimate_completion`` counts, against tiktoken's own ``encode_ordinary``.

Both sides count the same completion texts (a few tokens to a few thousand: chat answers, code, tool
arguments, non-English prose; fixed seed) with the same o200k_base encoding in the same process, so
the ratio measures only what the estimate adds around the encoder. Target: ratio >= 0.5.

    .venv/bin/python -m benchmarks.bench_estimate [--smoke]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable

from worker.estimate import DEFAULT_TABLE, estimate_completion
from worker.result import Choice, ToolCall
from worker.vocab import load_encoding

MODEL = "gpt-4o"
TARGET_RATIO = 0.5
SEED = 20240806

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


if __name__ == "__main__":
    main()
