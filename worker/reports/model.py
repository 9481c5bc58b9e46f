"""The report's data: one model that every renderer reads, so every format shows the same numbers.

Counts are integers; money is ``Micros``; drift percentiles are fractions rounded to six decimals here,
once, so no renderer rounds on its own. A ``Tally`` is what one group row holds; tallies add up, which
is how group rows, the per-day series and the total are all rolled up from the same aggregate rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from worker.core.money import Micros
from worker.core.result import Reason

if TYPE_CHECKING:  # an annotation only: matching brings the price book, --upstream's
    from worker.upstream.matching import Reconciliation

# Every reason a call can be unsettled for: a column each, so no unsettled call is left uncounted.
REASONS = tuple(str(reason) for reason in Reason)
# (field, label): the order is the order of every renderer.
COUNTS: tuple[tuple[str, str], ...] = (
    ("calls", "calls"),
    ("streamed", "streamed"),
    ("non_streamed", "non-streamed"),
    ("settled_reported", "settled, usage reported"),
    ("settled_estimated", "settled, usage estimated"),
    *((f"unsettled_{reason}", f"unsettled, {reason}") for reason in REASONS),
    ("resolved_release", "resolved, released"),
    ("resolved_charge_estimate", "resolved, charged estimate"),
    ("resolved_settled_late", "resolved, settled late"),
    ("void", "void"),
    ("pending", "pending (no result yet)"),
)
MONEY: tuple[tuple[str, str], ...] = (
    ("held", "held"),
    ("charged", "charged"),
    ("true_ups", "of which true-ups beyond the hold"),
    ("released", "released"),
    ("still_held", "still held"),
    ("exposure", "exposure of open failures"),
)
COUNT_FIELDS = tuple(name for name, _ in COUNTS)
MONEY_FIELDS = tuple(name for name, _ in MONEY)
PERCENTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
PARITY_FIELDS = ("prompt_tokens", "completion_tokens", "charge_per_token", "charge")
# The provider section's columns, as the table and HTML renderers head them.
PROVIDER_HEADERS = (
    "provider", "usage shape", "calls", "charged (USD)", "with provider cost",
    "ours on those (USD)", "provider's (USD)", "drift",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Tally:
    """The counts and money of one group of calls."""

    counts: Mapping[str, int] = field(default_factory=lambda: dict.fromkeys(COUNT_FIELDS, 0))
    money: Mapping[str, Micros] = field(
        default_factory=lambda: dict.fromkeys(MONEY_FIELDS, Micros(0))
    )

    @classmethod
    def of(cls, counts: Mapping[str, object], money: Mapping[str, object]) -> Tally:
        return cls(
            {name: int(counts.get(name) or 0) for name in COUNT_FIELDS},  # type: ignore[call-overload]
            {name: Micros(int(money.get(name) or 0)) for name in MONEY_FIELDS},  # type: ignore[call-overload]
        )

    def __add__(self, other: Tally) -> Tally:
        return Tally(
            {name: self.counts[name] + other.counts[name] for name in COUNT_FIELDS},
            {name: self.money[name] + other.money[name] for name in MONEY_FIELDS},
        )

    @property
    def unsettled(self) -> int:
        return sum(self.counts[f"unsettled_{reason}"] for reason in REASONS)

    @property
    def tie_out_difference(self) -> Micros:
        """held - (charged from holds + released + still held); zero when the books tie out."""
        m = self.money
        return m["held"] - ((m["charged"] - m["true_ups"]) + m["released"] + m["still_held"])

    @property
    def ties_out(self) -> bool:
        return self.tie_out_difference == 0


def total(tallies: Iterable[Tally]) -> Tally:
    result = Tally()
    for tally in tallies:
        result = result + tally
    return result


@dataclass(frozen=True, slots=True)
class GroupRow:
    """``key`` holds one value per grouping key of the report, in the order of ``Report.by``."""

    key: tuple[str, ...]
    tally: Tally


@dataclass(frozen=True, slots=True)
class Drift:
    """Percentiles of ``drift_ppm`` / 10^6 of one model: (reported visible - estimated) / estimated
    completion tokens of its streamed calls with reported usage (see ``worker.reports.drift``)."""

    model: str
    calls: int
    p50: float
    p90: float
    p99: float


@dataclass(frozen=True, slots=True)
class Calibration:
    """The current calibration factors of one (provider, model) (``worker.ledger.calibration``):
    per direction the factor charged, the fit's sample, and on the held-out calls the aggregate
    error of the raw and of the calibrated estimate (ppm of the reported counts; None without
    held-out calls). Not windowed: the factors in force when the report ran."""

    provider: str
    model: str
    version: int
    exact: bool
    held_out: int
    prompt_factor_ppm: int
    prompt_samples: int
    prompt_error_raw_ppm: int | None
    prompt_error_calibrated_ppm: int | None
    completion_factor_ppm: int
    completion_samples: int
    completion_error_raw_ppm: int | None
    completion_error_calibrated_ppm: int | None


@dataclass(frozen=True, slots=True)
class Parity:
    pairs: int
    matches: int
    mismatches: int
    mismatched_fields: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class ProviderUsage:
    """Calls with a usage record of one provider and usage shape (``worker.reports.providers``):
    what we charged, and over the ``costed_calls`` whose provider reported its own cost, our charge
    of those (``charged_costed``) against theirs (``provider_cost``)."""

    provider: str
    usage_shape: str
    calls: int
    charged: Micros
    costed_calls: int
    charged_costed: Micros
    provider_cost: Micros

    @property
    def cost_drift(self) -> float | None:
        """(ours - theirs) / theirs over the costed calls; None when the provider sent no cost."""
        if not self.costed_calls or not self.provider_cost:
            return None
        return (int(self.charged_costed) - int(self.provider_cost)) / int(self.provider_cost)


@dataclass(frozen=True, slots=True)
class UnpricedComponent:
    """Calls of ``model`` unsettled ``unpriced_component`` whose usage named ``usage_field``, a
    count the price book has no price for (``worker.core.usage``): the price an operator has to add. A
    call naming two fields is counted under each."""

    model: str
    usage_field: str
    calls: int


@dataclass(frozen=True, slots=True)
class Report:
    since: datetime
    until: datetime
    generated_at: datetime
    by: tuple[str, ...]
    groups: tuple[GroupRow, ...]
    days: tuple[GroupRow, ...]
    total: Tally
    drift: tuple[Drift, ...]
    drift_method: str
    parity: Parity | None = None
    anomalies: Mapping[str, int] | None = None
    providers: tuple[ProviderUsage, ...] = ()
    # ``--upstream``: the providers' exports against the ledger (``worker.upstream.matching``).
    upstream: Reconciliation | None = None
    unpriced_components: tuple[UnpricedComponent, ...] = ()
    calibration: tuple[Calibration, ...] = ()

    @property
    def ties_out(self) -> bool:
        return self.total.ties_out and all(row.tally.ties_out for row in self.groups)

    @property
    def unsettled_by_reason(self) -> dict[str, int]:
        return {reason: self.total.counts[f"unsettled_{reason}"] for reason in REASONS}


def percent_ppm(ppm: int | None) -> str:
    """A signed ppm figure as a percentage with two decimals, truncated toward zero, from the
    integer (``-146_600`` is ``-14.66%``); ``-`` for none."""
    if ppm is None:
        return "-"
    hundredths = abs(ppm) // 100
    return f"{'-' if ppm < 0 else '+'}{hundredths // 100}.{hundredths % 100:02d}%"


def ratio(value: float) -> str:
    """A drift fraction as every renderer shows it: six decimals (0.125000 is 12.5 %)."""
    return f"{value:.6f}"
