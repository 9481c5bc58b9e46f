"""The fate a simulated call should meet, derived from what the simulator generated.

This restates the billing rules (seeds 000 and 001) independently of ``worker.core.outcome`` on purpose:
a test compares the ledger against these expectations, so they must not share code with the
reconciler they check.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from worker.core.money import Micros
from worker.core.prices import PriceBook
from worker.core.result import Outcome, Reason, Usage, UsageSource

# Why a call ends (also) as a dead letter; the values are the malformed fault's variants.
REQUEST_NOT_JSON = "request_not_json"
UNKNOWN_KIND = "unknown_kind"
ORPHAN_CLOSE = "orphan_close"
DEAD_LETTERS = (REQUEST_NOT_JSON, UNKNOWN_KIND, ORPHAN_CLOSE)


@dataclass(frozen=True, slots=True)
class Expected:
    """The final state a call should reach in the ledger.

    ``outcome`` is None when the call is never reconciled (only a close for it exists);
    ``dead_letter`` then says why. A call whose request entry is not JSON has both: its dead
    letters, and its record as unsettled ``unreadable`` (``unreadable``). An ``unknown_kind`` call has both: its extra
    notification is dead-lettered, the call itself reconciles normally.

    ``usage`` is the final usage block the gateway reported, when there is one, even if the call is
    unsettled (an ``error`` finish that still reported usage). ``charge_micros`` is set for settled
    calls with reported usage and a price; an estimated call's charge depends on the estimator and is
    not predicted. A model without a price never settles: outcome unsettled, reason ``unpriced``, with
    the usage source the stream would have had.

    ``late`` calls first reconcile as unsettled ``missing_usage``; the usage frame arrives after the
    close, and a recheck settles them late with the fields given here. ``swept`` calls have no close
    notification; the sweeper must find them.
    """

    outcome: Outcome | None
    reason: Reason | None
    usage_source: UsageSource | None
    usage: Usage | None
    charge_micros: Micros | None
    reserved_micros: Micros
    dead_letter: str | None = None
    late: bool = False
    swept: bool = False

    @property
    def true_up(self) -> bool:
        """The charge exceeds the hold, so settling must take more than was reserved."""
        return self.charge_micros is not None and self.charge_micros > self.reserved_micros

    @property
    def label(self) -> str:
        """A short name for summaries: ``settled/reported``, ``unsettled/incomplete``, ``void``…"""
        if self.outcome is None:
            return f"dead_letter/{self.dead_letter}"
        if self.outcome is Outcome.SETTLED:
            return f"settled/{self.usage_source}" + ("_late" if self.late else "")
        if self.outcome is Outcome.UNSETTLED:
            return f"unsettled/{self.reason}"
        return str(self.outcome)


def stream_fate(
    *, finished: bool, errored: bool, usage: Usage | None, include_usage: bool
) -> tuple[Outcome, Reason | None, UsageSource | None]:
    """A stream settles only when every choice finished cleanly; usage decides reported or estimated."""
    if errored:
        return Outcome.UNSETTLED, Reason.ERROR_FINISH, None
    if not finished:
        return Outcome.UNSETTLED, Reason.INCOMPLETE, None
    if usage is not None:
        return Outcome.SETTLED, None, UsageSource.REPORTED
    if not include_usage:
        return Outcome.SETTLED, None, UsageSource.ESTIMATED
    return Outcome.UNSETTLED, Reason.MISSING_USAGE, None


def response_fate(
    *, status: int, usage: Usage | None
) -> tuple[Outcome, Reason | None, UsageSource | None]:
    """A failed non-streamed call without usage is void; a whole body settles on its usage."""
    if status >= 400:
        return (
            (Outcome.UNSETTLED, Reason.ERROR_FINISH, None) if usage else (Outcome.VOID, None, None)
        )
    if usage is not None:
        return Outcome.SETTLED, None, UsageSource.REPORTED
    return Outcome.SETTLED, None, UsageSource.ESTIMATED


def expected(
    fate: tuple[Outcome, Reason | None, UsageSource | None],
    *,
    model: str,
    at: datetime,
    usage: Usage | None,
    reserved: Micros,
    prices: PriceBook,
    dead_letter: str | None = None,
    late: bool = False,
    swept: bool = False,
) -> Expected:
    """Attach the charge (settled and reported) and the unpriced rule to a stream or response fate."""
    outcome, reason, source = fate
    charge = None
    if outcome is Outcome.SETTLED:
        priced = prices.price_for(model, at) is not None
        if not priced:
            outcome, reason = Outcome.UNSETTLED, Reason.UNPRICED
        elif source is UsageSource.REPORTED and usage is not None:
            charge = prices.charge(model, usage, at)
    return Expected(outcome, reason, source, usage, charge, reserved, dead_letter, late, swept)


def dead_only(reason: str, reserved: int = 0) -> Expected:
    """A call that never reconciles: only a dead letter records it (a close with no stream: no
    request entry says a call was made)."""
    return Expected(None, None, None, None, None, Micros(reserved), dead_letter=reason)


def unreadable(reason: str) -> Expected:
    """A call whose request entry is not JSON: a dead letter says why, and the ledger records it
    from what can be read of it, which is nothing but its request id: unsettled ``unreadable``
    under the account ``unattributed`` with a hold of 0 (docs/events.md §4)."""
    return Expected(
        Outcome.UNSETTLED, Reason.UNREADABLE, None, None, None, Micros(0), dead_letter=reason
    )
