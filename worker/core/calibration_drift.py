"""Telling a tokenizer change from a traffic-mix change, from calibration's own figures. Pure;
integers only.

* **Segment statistic** — of one direction's (estimated, reported) pairs of one content segment
  (``worker.core.segments``): ``Stat(ratio_ppm, se_ppm, samples)``, the ratio of sums ``R``
  (``worker.core.calibration.ratio_of_sums``) and its standard error as a ratio estimator's: with
  the residuals ``d_i = reported_i - R * estimated_i``,
  ``se(R) = sqrt(n / (n - 1) * sum d_i^2) / sum estimated_i``. It is the spread of the per-call
  ratios (each weighted by its call's size) over the sample's size: measured noise, not a guess.
  The square root and the division are rounded up (never an interval too narrow). Pairs whose
  ratio calibration leaves out (``ratio_ppm`` is None) are left out here too. ``POOLED`` keys the
  statistic of every pair of the direction, whatever its segment.
* **Moved** — a statistic moved from ``before`` (what a calibration version was written with) to
  ``after`` (a new fit) when both hold at least ``min_samples`` pairs and
  ``|after.ratio - before.ratio| > max(floor_ppm, Z * sqrt(before.se^2 + after.se^2))`` with
  ``Z = 5``: five combined standard errors, which sampling noise alone passes about once in
  1.7 million comparisons (normal tails), and ``floor_ppm`` the least move worth a version (the
  calibration's reversion step: a smaller one does not change a bill by more than it).
* **Verdict** of a new fit against a version's statistics, over both directions:
  ``tokenizer`` when some segment moved (the provider counts the same kind of text differently: a
  page), else ``mix`` when a pooled ratio moved (the traffic's mix of segments changed, each
  segment steady: expected, recorded), else ``steady``. ``moves`` lists what moved: the segments
  for ``tokenizer``, the pooled ratios for ``mix``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from worker.core.calibration import PPM, ratio_of_sums, ratio_ppm

POOLED = "*"
Z = 5
TOKENIZER, MIX, STEADY = "tokenizer", "mix", "steady"


@dataclass(frozen=True, slots=True)
class Stat:
    """A ratio of sums in ppm, its standard error in ppm, and the pairs it was computed from."""

    ratio_ppm: int
    se_ppm: int
    samples: int


@dataclass(frozen=True, slots=True)
class Move:
    """One statistic that moved: which, from what, to what, past which threshold (ppm)."""

    direction: str
    segment: str
    before: Stat
    after: Stat
    threshold_ppm: int


@dataclass(frozen=True, slots=True)
class Verdict:
    cause: str
    moves: tuple[Move, ...] = ()


def _ceil_sqrt(value: int) -> int:
    root = math.isqrt(value)
    return root if root * root == value else root + 1


def stat(pairs: Iterable[tuple[int, int]]) -> Stat | None:
    """The statistic of (estimated, reported) pairs; None without a usable pair."""
    kept = [(e, r) for e, r in pairs if ratio_ppm(r, e) is not None]
    ratio = ratio_of_sums(kept)
    if ratio is None:
        return None
    n = len(kept)
    if n < 2:
        return Stat(ratio, 0, n)
    squares = sum((r * PPM - ratio * e) ** 2 for e, r in kept)
    total = sum(e for e, _ in kept)
    spread = _ceil_sqrt(-(-squares * n // (n - 1)))
    return Stat(ratio, -(-spread // total), n)


def direction_stats(rows: Iterable[tuple[int, int, str]]) -> dict[str, Stat]:
    """Of one direction's (estimated, reported, segment) rows: each segment's statistic (a row
    without a segment counts only in the pool) and the pooled one under ``POOLED``."""
    listed = list(rows)
    by_segment: dict[str, list[tuple[int, int]]] = {}
    for e, r, s in listed:
        if s:
            by_segment.setdefault(s, []).append((e, r))
    found = {s: stat(pairs) for s, pairs in by_segment.items()}
    found[POOLED] = stat((e, r) for e, r, _ in listed)
    return {s: v for s, v in sorted(found.items()) if v is not None}


def threshold_ppm(before: Stat, after: Stat, floor_ppm: int) -> int:
    """The move past which ``after`` differs from ``before`` by more than noise and the floor."""
    noise = _ceil_sqrt(Z * Z * (before.se_ppm**2 + after.se_ppm**2))
    return max(floor_ppm, noise)


def moved(before: Stat, after: Stat, *, min_samples: int, floor_ppm: int) -> int | None:
    """The threshold ``after`` moved past (see the module), or None when it did not or either
    statistic holds fewer than ``min_samples`` pairs."""
    if min(before.samples, after.samples) < max(2, min_samples):
        return None
    limit = threshold_ppm(before, after, floor_ppm)
    return limit if abs(after.ratio_ppm - before.ratio_ppm) > limit else None


Stats = Mapping[str, Mapping[str, Stat]]  # direction → segment (or POOLED) → statistic


def verdict(before: Stats, after: Stats, *, min_samples: int, floor_ppm: int) -> Verdict:
    """Whether a new fit's statistics ``after`` show a tokenizer change, a mix change, or
    neither, against a version's ``before`` (see the module)."""
    segments: list[Move] = []
    pooled: list[Move] = []
    for direction in sorted(after):
        was = before.get(direction, {})
        for segment, now in sorted(after[direction].items()):
            then = was.get(segment)
            if then is None:
                continue
            limit = moved(then, now, min_samples=min_samples, floor_ppm=floor_ppm)
            if limit is not None:
                move = Move(direction, segment, then, now, limit)
                (pooled if segment == POOLED else segments).append(move)
    if segments:
        return Verdict(TOKENIZER, tuple(segments))
    if pooled:
        return Verdict(MIX, tuple(pooled))
    return Verdict(STEADY)
