"""Fault kinds the simulator can inject, their rates, and the ``--faults`` option's syntax.

A call gets at most one fault. Each rate is the chance that a call *eligible* for the fault gets it:
stream faults (a cut-off stream, a missing or late usage frame) only apply to streamed calls,
``http_error`` only to non-streamed ones, and the notification and crash faults to both. Rates
therefore add up per kind of call, and each sum must stay at most 1.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

ERROR_FINISH = "error_finish"
DROPPED_CONNECTION = "dropped_connection"
MISSING_USAGE = "missing_usage"
ERROR_OBJECT = "error_object"
DUPLICATE_ENTRIES = "duplicate_entries"
GATEWAY_CRASH = "gateway_crash"
MALFORMED = "malformed"
LATE_USAGE = "late_usage"
HTTP_ERROR = "http_error"

FAULTS = (
    ERROR_FINISH,
    DROPPED_CONNECTION,
    MISSING_USAGE,
    ERROR_OBJECT,
    DUPLICATE_ENTRIES,
    GATEWAY_CRASH,
    MALFORMED,
    LATE_USAGE,
    HTTP_ERROR,
)
STREAM_ONLY = frozenset({ERROR_FINISH, DROPPED_CONNECTION, MISSING_USAGE, ERROR_OBJECT, LATE_USAGE})
RESPONSE_ONLY = frozenset({HTTP_ERROR})

# A realistic background: a few percent of everything, the rarer gateway failures less often.
DEFAULT_MIX: Mapping[str, float] = MappingProxyType(
    {
        ERROR_FINISH: 0.02,
        DROPPED_CONNECTION: 0.03,
        MISSING_USAGE: 0.015,
        ERROR_OBJECT: 0.01,
        DUPLICATE_ENTRIES: 0.02,
        GATEWAY_CRASH: 0.01,
        MALFORMED: 0.01,
        LATE_USAGE: 0.015,
        HTTP_ERROR: 0.03,
    }
)


class FaultSpecError(ValueError):
    """A ``--faults`` value that cannot be used; the message says which part and why."""


def eligible(fault: str, *, stream: bool) -> bool:
    if stream:
        return fault not in RESPONSE_ONLY
    return fault not in STREAM_ONLY


@dataclass(frozen=True, slots=True)
class FaultRates:
    """Per-fault probabilities; faults not named have rate 0."""

    rates: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, rate in self.rates.items():
            if name not in FAULTS:
                raise FaultSpecError(f"unknown fault {name!r} (known: {', '.join(FAULTS)})")
            if not 0.0 <= rate <= 1.0:
                raise FaultSpecError(f"{name}: rate must be between 0 and 1, got {rate:g}")
        for stream, label in ((True, "streamed"), (False, "non-streamed")):
            total = sum(r for n, r in self.rates.items() if eligible(n, stream=stream))
            if total > 1.0 + 1e-9:
                raise FaultSpecError(
                    f"fault rates add up to {total:g} for {label} calls; the sum must be at most 1"
                )
        object.__setattr__(self, "rates", MappingProxyType(dict(self.rates)))

    def rate(self, fault: str) -> float:
        return self.rates.get(fault, 0.0)

    def draw(self, rng: random.Random, *, stream: bool) -> str | None:
        """One fault for a call, or None; always consumes exactly one random number."""
        u = rng.random()
        for fault in FAULTS:
            rate = self.rates.get(fault, 0.0)
            if rate and eligible(fault, stream=stream):
                if u < rate:
                    return fault
                u -= rate
        return None

    def spec(self) -> str:
        """The canonical ``--faults`` text for these rates (``none`` when all are 0)."""
        named = [f"{n}={self.rates[n]:g}" for n in FAULTS if self.rates.get(n)]
        return ",".join(named) or "none"


NO_FAULTS = FaultRates()


def parse_faults(spec: str | None) -> FaultRates:
    """Parse ``error_finish=0.02,dropped_connection=0.01``; ``default`` is the realistic mix.

    ``default`` may be followed by overrides (``default,late_usage=0.1``); ``none`` or an empty value
    means no faults. Raises ``FaultSpecError`` with a one-line message.
    """
    text = (spec or "").strip()
    if text in ("", "none"):
        return NO_FAULTS
    rates: dict[str, float] = {}
    named: set[str] = set()
    for position, raw in enumerate(text.split(",")):
        item = raw.strip()
        if item == "default":
            if position != 0:
                raise FaultSpecError("'default' must come first in --faults")
            rates.update(DEFAULT_MIX)
            continue
        if not item:
            raise FaultSpecError(f"empty item in --faults {text!r}")
        name, sep, value = (part.strip() for part in item.partition("="))
        if not sep:
            raise FaultSpecError(f"expected NAME=RATE in --faults, got {item!r}")
        if name not in FAULTS:
            raise FaultSpecError(f"unknown fault {name!r} (known: {', '.join(FAULTS)})")
        if name in named:
            raise FaultSpecError(f"fault {name!r} given twice")
        named.add(name)
        try:
            rate = float(value)
        except ValueError:
            raise FaultSpecError(f"{name}: rate is not a number: {value!r}") from None
        if rate != rate or not 0.0 <= rate <= 1.0:
            raise FaultSpecError(f"{name}: rate must be between 0 and 1, got {value}")
        rates[name] = rate
    return FaultRates({n: r for n, r in rates.items() if r})
