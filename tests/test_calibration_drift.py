"""Telling a tokenizer change from a mix change (``worker.core.calibration_drift``), against
simulated traffic whose truth is known: calls of a few segments, each segment's reported counts its
estimate times a fixed ratio with per-call noise. The oracle is the simulation's parameters: the
same per-segment ratios under another mix must not be a tokenizer change, one segment's ratio moved
well past its noise must be, and a fresh draw of the same traffic must be steady."""

from __future__ import annotations

import math
import random

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from worker.core.calibration import ratio_of_sums
from worker.core.calibration_drift import (
    MIX,
    POOLED,
    STEADY,
    TOKENIZER,
    Stat,
    direction_stats,
    moved,
    stat,
    verdict,
)

SEGMENTS = ("latin", "chinese", "json", "tools")
RATIOS = {"latin": 1.02, "chinese": 1.30, "json": 0.88, "tools": 1.18}
STEP = 5_000  # the calibration's reversion step, 0.5 %


def _calls(
    rng: random.Random, mix: dict[str, int], ratios: dict[str, float], spread: float
) -> list[tuple[int, int, str]]:
    """``mix[s]`` calls of segment ``s``: estimates of 20 to ~2,000 tokens (log-normal), reported
    counts the estimate times ``ratios[s]`` times a uniform noise of ± ``spread``."""
    rows = []
    for segment, count in mix.items():
        for _ in range(count):
            estimated = int(rng.lognormvariate(5, 0.8)) + 20
            reported = round(estimated * ratios[segment] * (1 + rng.uniform(-spread, spread)))
            rows.append((estimated, reported, segment))
    rng.shuffle(rows)
    return rows


def _both(rows: list[tuple[int, int, str]]) -> dict[str, dict[str, Stat]]:
    return {"prompt": direction_stats(rows), "completion": direction_stats(rows)}


mixes = st.fixed_dictionaries({s: st.integers(60, 600) for s in SEGMENTS})
spreads = st.sampled_from([0.01, 0.05, 0.15])


def test_the_statistic_is_the_ratio_of_sums_and_its_standard_error() -> None:
    pairs = [(100, 110), (200, 230), (300, 330), (400, 420)]
    found = stat(pairs)
    assert found is not None and found.samples == 4
    assert found.ratio_ppm == ratio_of_sums(pairs) == 1_090_000
    # by hand: residuals r - 1.09 e = 1, 12, 3, -16 tokens; sum of squares 410; n/(n-1) = 4/3;
    # sqrt(546.67) = 23.38; over sum e = 1000: 0.02338 → 23_381 ppm (rounded up)
    assert found.se_ppm == 23_381
    assert stat([(100, 110)]) == Stat(1_100_000, 0, 1)
    assert stat([(0, 5)]) is None
    # identical per-call ratios: no noise at all
    assert stat([(100, 120), (250, 300), (40, 48)]) == Stat(1_200_000, 0, 3)


def test_a_move_needs_the_sample_the_floor_and_the_noise() -> None:
    before = Stat(1_000_000, 1_000, 100)
    assert moved(before, Stat(1_006_000, 1_000, 100), min_samples=50, floor_ppm=STEP) is None
    # 5 * sqrt(2) * 1,000 = 7,072 ppm: the noise, above the floor, decides
    assert moved(before, Stat(1_007_000, 1_000, 100), min_samples=50, floor_ppm=STEP) is None
    assert moved(before, Stat(1_008_000, 1_000, 100), min_samples=50, floor_ppm=STEP) == 7_072
    # exact ratios (no noise): the floor decides — a 0.25 % move is no version of its own
    flat = Stat(1_200_000, 0, 500)
    assert moved(flat, Stat(1_203_000, 0, 500), min_samples=50, floor_ppm=STEP) is None
    assert moved(flat, Stat(1_206_000, 0, 500), min_samples=50, floor_ppm=STEP) == STEP
    assert moved(flat, Stat(1_500_000, 0, 49), min_samples=50, floor_ppm=STEP) is None


@settings(max_examples=60, deadline=None)
@given(mixes, mixes, spreads, st.integers(0, 2**32))
def test_a_mix_shift_is_never_a_tokenizer_change(
    before: dict[str, int], after: dict[str, int], spread: float, seed: int
) -> None:
    rng = random.Random(seed)
    old = _both(_calls(rng, before, RATIOS, spread))
    new = _both(_calls(rng, after, RATIOS, spread))
    found = verdict(old, new, min_samples=50, floor_ppm=STEP)
    assert found.cause in (MIX, STEADY)
    assert all(m.segment == POOLED for m in found.moves)


@settings(max_examples=60, deadline=None)
@given(
    mixes,
    mixes,
    spreads,
    st.sampled_from(SEGMENTS),
    st.sampled_from([-0.12, -0.06, 0.06, 0.15]),
    st.integers(0, 2**32),
)
def test_one_segment_s_tokenizer_change_is_found_whatever_the_mix(
    before: dict[str, int],
    after: dict[str, int],
    spread: float,
    changed: str,
    by: float,
    seed: int,
) -> None:
    # the simulation's own noise on the changed segment's ratio: uniform ± spread has a standard
    # deviation of spread / sqrt(3); log-normal(5, 0.8) sizes weigh it by exp(0.8^2 / 2) = 1.377
    noise = spread / math.sqrt(3) * 1.377 * math.sqrt(1 / before[changed] + 1 / after[changed])
    assume(abs(by) >= 7 * noise)  # a change well past 5 standard errors must be found
    rng = random.Random(seed)
    old = _both(_calls(rng, before, RATIOS, spread))
    ratios = {**RATIOS, changed: RATIOS[changed] * (1 + by)}
    new = _both(_calls(rng, after, ratios, spread))
    found = verdict(old, new, min_samples=50, floor_ppm=STEP)
    assert found.cause == TOKENIZER
    assert {m.segment for m in found.moves} == {changed}
    for move in found.moves:
        assert (move.after.ratio_ppm > move.before.ratio_ppm) == (by > 0)


@settings(max_examples=60, deadline=None)
@given(mixes, spreads, st.integers(0, 2**32))
def test_noise_alone_is_steady(mix: dict[str, int], spread: float, seed: int) -> None:
    rng = random.Random(seed)
    old = _both(_calls(rng, mix, RATIOS, spread))
    new = _both(_calls(rng, mix, RATIOS, spread))
    assert verdict(old, new, min_samples=50, floor_ppm=STEP).cause == STEADY


def test_noise_alone_passes_no_threshold_in_six_hundred_draws() -> None:
    """The false-alarm rate, measured: 600 pairs of draws of the same traffic at the noisiest
    spread, small and large samples, none moved (5 standard errors; the largest seen is ~4.3)."""
    rng = random.Random(20261208)
    moves = 0
    for _ in range(600):
        mix = {s: rng.choice([50, 120, 400]) for s in SEGMENTS}
        old = _both(_calls(rng, mix, RATIOS, 0.3))
        new = _both(_calls(rng, mix, RATIOS, 0.3))
        moves += verdict(old, new, min_samples=50, floor_ppm=0).cause != STEADY
    assert moves == 0


def test_a_segment_without_a_baseline_or_sample_is_not_compared() -> None:
    rows = _calls(random.Random(3), {"latin": 200, "chinese": 10}, RATIOS, 0.02)
    old = _both(rows)
    moved_rows = [(e, r * 2 if s == "chinese" else r, s) for e, r, s in rows]
    new = {"prompt": direction_stats(moved_rows), "completion": direction_stats(rows)}
    # chinese doubled, but on 10 calls, under the minimum: never a tokenizer change
    assert stat([(e, r) for e, r, s in moved_rows if s == "chinese"]).ratio_ppm > 2 * 1_250_000  # type: ignore[union-attr]
    assert verdict(old, new, min_samples=50, floor_ppm=STEP).cause != TOKENIZER
    assert verdict(old, new, min_samples=5, floor_ppm=STEP).cause == TOKENIZER
    assert verdict({}, new, min_samples=5, floor_ppm=STEP).cause == STEADY
