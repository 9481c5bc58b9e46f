"""Bootstrap intervals of the benchmarks' figures (pure; imports nothing of the suite, so the tests
load it from its file). Seeded: the same figures always give the same interval."""

from __future__ import annotations

import random
from collections.abc import Callable


def bootstrap_interval(
    a: list[float], b: list[float], stat: Callable[[list[float]], float], rounds: int = 400
) -> tuple[float, float]:
    """The 95 % bootstrap interval of ``stat(a) - stat(b)`` (each resampled apart; seeded)."""
    rng = random.Random(0)
    diffs = sorted(
        stat(rng.choices(a, k=len(a))) - stat(rng.choices(b, k=len(b))) for _ in range(rounds)
    )
    return diffs[int(0.025 * rounds)], diffs[int(0.975 * rounds) - 1]


def ratio_interval(
    billed: list[float], plain: list[float], rounds: int = 2000
) -> tuple[float, float]:
    """The 95 % bootstrap interval of ``sum(billed) / sum(plain)``, rounds resampled in pairs (a
    round's two figures were measured in the same minutes, so they are drawn together; seeded)."""
    rng = random.Random(0)
    pairs = list(zip(billed, plain, strict=True))
    ratios = []
    for _ in range(rounds):
        drawn = rng.choices(pairs, k=len(pairs))
        total = sum(p for _, p in drawn)
        if total:
            ratios.append(sum(b for b, _ in drawn) / total)
    if not ratios:  # no round spent any CPU on the peer's side: no ratio to bound
        return float("nan"), float("nan")
    ratios.sort()
    return ratios[int(0.025 * len(ratios))], ratios[int(0.975 * len(ratios)) - 1]
