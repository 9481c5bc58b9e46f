"""Where a piece of work spends its time: cProfile's own time per function, as shares of the whole.

Quoted in a row's notes so that BENCHMARKS.md says what bounds a figure, measured in the same run.
cProfile slows Python calls more than C work, so the shares lean towards the Python functions; the
order is what to read, not the exact percentages.
"""

from __future__ import annotations

import cProfile
import pstats
import re
from collections.abc import Callable
from pathlib import Path


def _label(where: tuple[str, int, str]) -> str:
    filename, _, name = where
    if filename == "~":  # a built-in: "<method 'decode' of 'msgspec.json.Decoder' objects>"
        method = _METHOD.fullmatch(name)
        if method:
            return f"{method['owner']}.{method['name']}"
        return name.strip("<>").removeprefix("built-in method ")
    return f"{Path(filename).stem}.{name}"


_METHOD = re.compile(r"<method '(?P<name>[^']+)' of '(?P<owner>[^']+)' objects>")


def own_time(work: Callable[[], object], top: int = 5) -> list[tuple[str, float]]:
    """The ``top`` functions by own time while ``work`` runs once, with their share of the total."""
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        work()
    finally:
        profiler.disable()
    stats = pstats.Stats(profiler)
    total = stats.total_tt or 1.0  # type: ignore[attr-defined]
    rows = sorted(
        ((entry[2], where) for where, entry in stats.stats.items()),  # type: ignore[attr-defined]
        reverse=True,
    )
    return [(_label(where), seconds / total) for seconds, where in rows[:top]]


def describe(shares: list[tuple[str, float]]) -> str:
    return ", ".join(f"{name} {share:.0%}" for name, share in shares)
