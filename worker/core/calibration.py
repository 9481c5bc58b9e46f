"""Calibration of token estimates: learn, per (provider, model) and per direction (prompt,
completion), the ratio between the counts a provider reported and the worker's tiktoken estimate of
the same call, and charge an estimated call at its estimate times that ratio. Pure; no IO.

Contracts (every figure an integer; no float touches a count or a factor):

* **Ratio of one call** — ``ratio_ppm(reported, estimated)``: ``reported / estimated`` in parts per
  million, rounded half up; no ratio when the estimate is 0.
* **Factor** — the *ratio of sums* of the fit's calls, ``sum reported / sum estimated`` in ppm,
  rounded half up (``ratio_of_sums``): the factor whose calibrated estimates add up to what was
  reported, which is what a bill over those calls is; a median of per-call ratios is not (it
  weighs a 10-token call as much as a 10,000-token one). Calls whose ratio is outside
  [``MIN_RATIO_PPM``, ``MAX_RATIO_PPM``] (an uncounted file part, an all-image prompt) are left
  out. The *lower median* of the ratios (the value at 0-based rank ``(n - 1) // 2``) is kept beside
  it with its interval, to tell whether an exact tokenizer's factor 1 holds.
* **Segments** — the factor is also fitted per content segment (``worker.core.segments``) of a
  model whose tokenizer is approximate: a segment with at least ``min_samples`` fitted calls is
  charged at its own ratio of sums, any other at the model's pooled factor. An exact tokenizer
  has no segment factors (it is exact on every segment; the pooled fit watches it).
* **Interval** — the distribution-free 95 % interval of the median from order statistics: the
  values at 1-based ranks ``j = max(1, floor((n - d) / 2))`` and ``k = min(n, ceil((n + d) / 2) + 1)``
  with ``d = ceil(1.96 * sqrt(n))`` (the normal approximation of the binomial ``B(n, 1/2)``),
  computed as ``ceil(isqrt(38416 * n) / 100)``, rounded up so the interval is never narrower.
* **Use** — a fit of fewer than ``min_samples`` ratios is never used (factor 1). A model whose
  tokenizer the worker ships exactly (``exact``: the OpenAI models) keeps factor 1 unless its
  interval excludes 1: the data must say otherwise.
* **Calibrated count** — ``calibrated(tokens, factor_ppm) = floor((tokens * factor_ppm + 500_000)
  / 1_000_000)``: the product rounded half up to a whole token; factor 1 (``PPM``) leaves every
  count as it is.
* **Hold-out** — a call is held out of the fit when the first 8 bytes of the SHA-256 of its request
  id, as a big-endian integer, modulo 100 is below ``holdout_pct``: the same calls on every run and
  every machine. Held-out calls measure the error with and without the factor.
* **Error** — ``aggregate_error_ppm``: ``(sum of counts charged - sum reported) / sum reported`` in
  ppm, truncated toward zero; what a bill over those calls would be off by.
* **Moved** — whether the provider's counting changed is judged per segment on the ratios of
  sums and their noise, not on the median (``worker.core.calibration_drift``).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from worker.core.result import Estimate, Usage

PPM = 1_000_000
DIRECTIONS = ("prompt", "completion")
DEFAULT_MIN_SAMPLES = 50
DEFAULT_HOLDOUT_PCT = 20
# 1.96² * 10⁴: the 95 % normal quantile, squared and scaled so that the interval's half-width in
# ranks is an integer square root.
_Z95_SQUARED_E4 = 38416
# A ratio beyond these bounds is not a tokenizer's difference but a broken estimate (an uncounted
# file part, an all-image prompt): it is left out of the fit.
MIN_RATIO_PPM = PPM // 10
MAX_RATIO_PPM = 10 * PPM


def ratio_ppm(reported: int, estimated: int) -> int | None:
    """``reported / estimated`` in ppm, rounded half up; None when the estimate is not positive or
    the ratio is outside [``MIN_RATIO_PPM``, ``MAX_RATIO_PPM``]."""
    if estimated <= 0 or reported < 0:
        return None
    ratio = (2 * reported * PPM + estimated) // (2 * estimated)
    return ratio if MIN_RATIO_PPM <= ratio <= MAX_RATIO_PPM else None


def ratio_of_sums(pairs: Iterable[tuple[int, int]]) -> int | None:
    """Of (estimated, reported) pairs: ``sum reported / sum estimated`` in ppm, rounded half up;
    None when the estimates sum to 0."""
    estimated = reported = 0
    for est, rep in pairs:
        estimated += est
        reported += rep
    if estimated <= 0:
        return None
    return (2 * reported * PPM + estimated) // (2 * estimated)


def calibrated(tokens: int, factor_ppm: int) -> int:
    """``tokens`` times ``factor_ppm / 10^6``, rounded half up to a whole token."""
    return (tokens * factor_ppm + PPM // 2) // PPM


def held_out(request_id: str, holdout_pct: int = DEFAULT_HOLDOUT_PCT) -> bool:
    """Whether the call is kept out of the fit to measure it (see the module's contract)."""
    digest = hashlib.sha256(request_id.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % 100 < holdout_pct


@dataclass(frozen=True, slots=True)
class Fit:
    """The median ratio of ``samples`` calls and its 95 % interval, all in ppm; ``factor_ppm`` is the
    median (what moved), the factor charged is the ratio of sums (``Direction.factor_ppm``)."""

    factor_ppm: int
    low_ppm: int
    high_ppm: int
    samples: int

    def contains(self, ppm: int) -> bool:
        return self.low_ppm <= ppm <= self.high_ppm


def interval_ranks(n: int) -> tuple[int, int]:
    """The 1-based ranks ``(j, k)`` of the median's 95 % interval among ``n`` sorted values."""
    if n <= 0:
        raise ValueError("an interval needs at least one value")
    root = math.isqrt(_Z95_SQUARED_E4 * n)
    if root * root < _Z95_SQUARED_E4 * n:
        root += 1  # ceil(sqrt(38416 n))
    d = -(-root // 100)  # ceil(1.96 sqrt(n)), never below it
    return max(1, (n - d) // 2), min(n, -(-(n + d) // 2) + 1)


def fit(ratios: Iterable[int]) -> Fit | None:
    """The lower median of ``ratios`` and its interval; None without any ratio."""
    ordered = sorted(ratios)
    n = len(ordered)
    if n == 0:
        return None
    j, k = interval_ranks(n)
    return Fit(ordered[(n - 1) // 2], ordered[j - 1], ordered[k - 1], n)


def fit_used(found: Fit | None, *, exact: bool, min_samples: int) -> bool:
    """Whether estimates are charged at the fit's median: a fit of at least ``min_samples``
    ratios, and for an ``exact`` tokenizer one whose interval excludes 1."""
    if found is None or found.samples < max(1, min_samples):
        return False
    return not (exact and found.contains(PPM))


def factor_to_use(found: Fit | None, *, exact: bool, min_samples: int) -> int:
    """The factor an estimate is charged at: the fit's median when ``fit_used``, else 1 (``PPM``)."""
    if found is not None and fit_used(found, exact=exact, min_samples=min_samples):
        return found.factor_ppm
    return PPM


def aggregate_error_ppm(
    pairs: Sequence[tuple[int, int]], factor_ppm: int | Sequence[int] = PPM
) -> int | None:
    """Of (estimated, reported) pairs: ``(sum calibrated(estimated) - sum reported) / sum
    reported`` in ppm, truncated toward zero; None when nothing was reported. ``factor_ppm`` is one
    factor for every pair, or one per pair."""
    reported = sum(r for _, r in pairs)
    if reported <= 0:
        return None
    factors = [factor_ppm] * len(pairs) if isinstance(factor_ppm, int) else list(factor_ppm)
    charged = sum(calibrated(e, f) for (e, _), f in zip(pairs, factors, strict=True))
    difference = (charged - reported) * PPM
    magnitude = abs(difference) // reported
    return magnitude if difference >= 0 else -magnitude


# ---------------------------------------------------------------- a direction's learning


@dataclass(frozen=True, slots=True)
class Direction:
    """What one direction of one model learnt: the fit (None without ratios), the pooled factor
    charged, the factors of the segments with enough calls (segment → ppm, with their fitted call
    counts), and on the held-out calls the error without and with those factors."""

    fit: Fit | None
    used: bool
    factor_ppm: int
    held_out: int
    error_raw_ppm: int | None
    error_calibrated_ppm: int | None
    segments: Mapping[str, int] = field(default_factory=dict)
    segment_samples: Mapping[str, int] = field(default_factory=dict)

    def factor_for(self, segment: str) -> int:
        return self.segments.get(segment, self.factor_ppm)


Pair = tuple[int, int]  # (estimated, reported)


def _usable(pairs: Iterable[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    return [(e, r, s) for e, r, s in pairs if ratio_ppm(r, e) is not None]


def learn_direction(
    fitted: Sequence[tuple[int, int] | tuple[int, int, str]],
    holdout: Sequence[tuple[int, int] | tuple[int, int, str]],
    *,
    exact: bool,
    min_samples: int = DEFAULT_MIN_SAMPLES,
) -> Direction:
    """Fit (estimated, reported[, segment]) triples, then measure the factors on the held-out
    ones (see the module: ratio of sums, per segment for an approximate tokenizer)."""
    fit_rows = _usable((*p, "")[:3] for p in fitted)  # type: ignore[misc]
    held_rows = _usable((*p, "")[:3] for p in holdout)  # type: ignore[misc]
    found = fit(ratio_ppm(r, e) or 0 for e, r, _ in fit_rows)
    used = fit_used(found, exact=exact, min_samples=min_samples)
    pooled = ratio_of_sums((e, r) for e, r, _ in fit_rows) if used else None
    factor = PPM if pooled is None else pooled
    segments: dict[str, int] = {}
    samples: dict[str, int] = {}
    if used and not exact:
        by_segment: dict[str, list[Pair]] = {}
        for e, r, s in fit_rows:
            if s:
                by_segment.setdefault(s, []).append((e, r))
        for segment, rows in sorted(by_segment.items()):
            own = ratio_of_sums(rows)
            if len(rows) >= max(1, min_samples) and own is not None:
                segments[segment], samples[segment] = own, len(rows)
    kept = [(e, r) for e, r, _ in held_rows]
    return Direction(
        found,
        used,
        factor,
        len(kept),
        aggregate_error_ppm(kept),
        aggregate_error_ppm(kept, [segments.get(s, factor) for _, _, s in held_rows]),
        segments,
        samples,
    )


# ---------------------------------------------------------------- what the reconciler charges with


@dataclass(frozen=True, slots=True)
class Factors:
    """The factors of one (provider, model) at one version, as an estimated call is charged."""

    version: int
    prompt_ppm: int = PPM
    completion_ppm: int = PPM
    # segment → factor, for the segments fitted on their own (the others take the pooled factor)
    prompt_segments: Mapping[str, int] = field(default_factory=dict)
    completion_segments: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        factors = (
            self.prompt_ppm,
            self.completion_ppm,
            *self.prompt_segments.values(),
            *self.completion_segments.values(),
        )
        if self.version < 1 or min(factors) <= 0:
            raise ValueError(f"calibration factors out of range: {self}")

    def for_segment(self, segment: str) -> tuple[int, int]:
        """The (prompt, completion) factors a call of ``segment`` is charged at."""
        return (
            self.prompt_segments.get(segment, self.prompt_ppm),
            self.completion_segments.get(segment, self.completion_ppm),
        )

    def usage(self, estimate: Estimate) -> Usage:
        """The calibrated counts of ``estimate``, at its segment's factors."""
        prompt_ppm, completion_ppm = self.for_segment(estimate.segment)
        return Usage(
            calibrated(estimate.prompt_tokens, prompt_ppm),
            calibrated(estimate.completion_tokens, completion_ppm),
        )


@dataclass(frozen=True, slots=True)
class CalibrationTable:
    """The current factors by (provider, model); a provider the request did not name is ``""``.
    Looked up exactly: the factors learnt from a provider's calls apply to that provider's calls."""

    factors: Mapping[tuple[str, str], Factors] = field(default_factory=dict)

    def lookup(self, provider: str | None, model: str) -> Factors | None:
        return self.factors.get((provider or "", model))

    def __bool__(self) -> bool:
        return bool(self.factors)


EMPTY = CalibrationTable()


def format_factor(ppm: int) -> str:
    """A factor as text with six decimals, from the integer: ``1182000`` is ``1.182000``."""
    return f"{ppm // PPM}.{ppm % PPM:06d}"
