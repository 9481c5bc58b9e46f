"""The benchmarks' bootstrap intervals (``benchmarks.resampling``), on figures whose bounds are known
by construction."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

# Under pytest ``benchmarks`` names this test package, so the module is loaded from its file.
_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "resampling.py"
_SPEC = importlib.util.spec_from_file_location("resampling", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
resampling = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = resampling
_SPEC.loader.exec_module(resampling)

quick = settings(deadline=None, max_examples=60)
cpu = st.floats(min_value=0.01, max_value=100.0, allow_nan=False)


@quick
@given(rounds=st.lists(st.tuples(cpu, cpu), min_size=1, max_size=30))
def test_the_ratio_interval_lies_within_the_rounds_own_ratios(
    rounds: list[tuple[float, float]],
) -> None:
    # A resample's sum(billed) / sum(plain) is a weighted mean of its rounds' ratios.
    billed, plain = [b for b, _ in rounds], [p for _, p in rounds]
    low, high = resampling.ratio_interval(billed, plain, rounds=200)
    ratios = [b / p for b, p in rounds]
    assert min(ratios) * (1 - 1e-9) <= low <= high <= max(ratios) * (1 + 1e-9)


@quick
@given(plain=st.lists(cpu, min_size=1, max_size=30), factor=st.floats(0.5, 2.0))
def test_rounds_of_one_ratio_give_that_ratio_exactly(plain: list[float], factor: float) -> None:
    low, high = resampling.ratio_interval([p * factor for p in plain], plain, rounds=200)
    assert math.isclose(low, factor, rel_tol=1e-9) and math.isclose(high, factor, rel_tol=1e-9)


def test_a_spread_of_rounds_gives_an_interval_that_is_not_a_point() -> None:
    plain = [1.0] * 20
    billed = [1.0 + 0.02 * i for i in range(20)]  # ratios 1.00 … 1.38, mean 1.19
    low, high = resampling.ratio_interval(billed, plain)
    assert 1.0 < low < 1.19 < high < 1.38


def test_no_peer_cpu_gives_no_interval() -> None:
    low, high = resampling.ratio_interval([1.0, 2.0], [0.0, 0.0])
    assert math.isnan(low) and math.isnan(high)


def test_the_difference_interval_brackets_a_known_shift() -> None:
    a = [float(x) + 5.0 for x in range(100)]
    b = [float(x) for x in range(100)]
    low, high = resampling.bootstrap_interval(a, b, lambda v: sorted(v)[len(v) // 2])
    assert low < 5.0 < high
