"""The calibration math (``worker.core.calibration``): ratios, the median and its interval, when a
factor is used, the calibrated count, the hold-out and the error on held-out calls."""

from __future__ import annotations

import random
from statistics import median_low

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.core.calibration import (
    PPM,
    CalibrationTable,
    Factors,
    Fit,
    aggregate_error_ppm,
    calibrated,
    factor_to_use,
    fit,
    held_out,
    interval_ranks,
    learn_direction,
    ratio_ppm,
)
from worker.core.result import Estimate, Usage


def test_ratio_is_rounded_half_up_and_refuses_what_is_no_ratio() -> None:
    assert ratio_ppm(118, 100) == 1_180_000
    assert ratio_ppm(1, 3) == 333_333  # 333 333.33…
    assert ratio_ppm(2, 3) == 666_667  # 666 666.67…
    assert ratio_ppm(5, 0) is None
    assert ratio_ppm(1, 100) is None  # 0.01: a broken estimate, not a tokenizer
    assert ratio_ppm(1001, 100) is None


def test_calibrated_count_rounds_half_up_and_factor_one_is_identity() -> None:
    assert calibrated(100, 1_185_000) == 119  # 118.5 → 119
    assert calibrated(100, 1_184_999) == 118
    assert calibrated(7, PPM) == 7
    assert Factors(3, 1_200_000, 900_000).usage(Estimate(10, 10, True)) == Usage(12, 9)


def test_interval_ranks_match_the_textbook_table() -> None:
    # Conover's order statistics for a 95 % median interval (normal approximation):
    # n = 100: ranks 40 and 61; n = 50: 18 and 33 (j = 25 - 0.98·√50 ≈ 18.07, floor, k = 33).
    assert interval_ranks(100) == (40, 61)
    assert interval_ranks(50) == (18, 33)
    assert interval_ranks(1) == (1, 1)


def test_the_fit_is_the_lower_median_within_its_interval() -> None:
    values = [5, 1, 4, 2, 3, 6]
    found = fit(values)
    assert found is not None and found.factor_ppm == median_low(values) == 3
    assert found.low_ppm <= found.factor_ppm <= found.high_ppm
    assert fit([]) is None


def test_an_exact_tokenizer_keeps_one_unless_the_interval_excludes_it() -> None:
    holds_one = Fit(1_010_000, 990_000, 1_020_000, 500)
    excludes_one = Fit(1_100_000, 1_080_000, 1_120_000, 500)
    assert factor_to_use(holds_one, exact=True, min_samples=50) == PPM
    assert factor_to_use(holds_one, exact=False, min_samples=50) == 1_010_000
    assert factor_to_use(excludes_one, exact=True, min_samples=50) == 1_100_000
    assert factor_to_use(excludes_one, exact=False, min_samples=501) == PPM  # too few


def test_held_out_is_a_stable_share_of_request_ids() -> None:
    ids = [f"req-{i}" for i in range(4000)]
    share = sum(held_out(i, 20) for i in ids) / len(ids)
    assert 0.17 < share < 0.23
    assert [held_out(i, 20) for i in ids[:50]] == [held_out(i, 20) for i in ids[:50]]
    assert not any(held_out(i, 0) for i in ids[:100])


def test_aggregate_error_is_what_a_bill_would_be_off_by() -> None:
    pairs = [(100, 120), (200, 240)]
    assert aggregate_error_ppm(pairs) == -166_666  # 300 vs 360: -16.67 %, truncated toward 0
    assert aggregate_error_ppm(pairs, 1_200_000) == 0
    assert aggregate_error_ppm([]) is None


def test_the_table_is_looked_up_by_provider_and_model_exactly() -> None:
    table = CalibrationTable({("anthropic", "claude-haiku-4-5"): Factors(2, 1_180_000)})
    assert table.lookup("anthropic", "claude-haiku-4-5") == Factors(2, 1_180_000)
    assert table.lookup(None, "claude-haiku-4-5") is None
    with pytest.raises(ValueError):
        Factors(0)


def _traffic(rng: random.Random, n: int, ratio_ppm_: int, noise_ppm: int) -> list[tuple[int, int]]:
    """(estimated, reported) calls of a model whose true count is the estimate times ``ratio``
    times a uniform noise: the oracle is the ratio the traffic was generated with."""
    calls = []
    for _ in range(n):
        estimated = rng.randint(20, 3000)
        factor = ratio_ppm_ + rng.randint(-noise_ppm, noise_ppm)
        calls.append((estimated, estimated * factor // PPM))
    return calls


@settings(max_examples=40, deadline=None)
@given(
    ratio=st.integers(700_000, 1_500_000),
    noise=st.integers(0, 80_000),
    n=st.integers(300, 800),
    seed=st.integers(0, 2**32),
)
def test_the_factor_converges_to_the_known_ratio_within_its_interval(
    ratio: int, noise: int, n: int, seed: int
) -> None:
    rng = random.Random(seed)
    learnt = learn_direction(
        _traffic(rng, n, ratio, noise), _traffic(rng, 200, ratio, noise), exact=False
    )
    assert learnt.used and learnt.fit is not None
    # the truth lies in the interval, up to the truncation of the generated counts (< 1 token
    # of at least 20, i.e. 5 %, at worst: widened by that on the low side)
    slack = PPM // 20 + 1
    assert learnt.fit.low_ppm - 1_000 <= ratio <= learnt.fit.high_ppm + slack
    assert abs(learnt.factor_ppm - ratio) <= noise // 5 + 5_000
    # on held-out calls the calibrated estimate is within 2 % of what was reported
    assert learnt.error_calibrated_ppm is not None and abs(learnt.error_calibrated_ppm) < 20_000


@settings(max_examples=25, deadline=None)
@given(
    ratio=st.integers(700_000, 1_500_000),
    n=st.integers(0, 49),
    seed=st.integers(0, 2**32),
)
def test_too_few_calls_are_never_used(ratio: int, n: int, seed: int) -> None:
    rng = random.Random(seed)
    learnt = learn_direction(_traffic(rng, n, ratio, 10_000), [], exact=False, min_samples=50)
    assert not learnt.used
    assert learnt.factor_ppm == PPM
    assert learnt.error_raw_ppm is None and learnt.error_calibrated_ppm is None
