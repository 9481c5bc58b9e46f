"""Decide a call's outcome from what was assembled: settled, unsettled (with a reason) or void.

These rules are normative (seeds 000 and 001):

* A call settles only when every choice it holds finished with a reason other than an error finish
  (``error``, DeepSeek's ``insufficient_system_resource``) and no error object arrived. "Every
  choice" is the same rule for a stream and a parsed body: the choices that came, numbered
  ``0..k-1`` with no gap, at least one. A provider that ignores ``n`` (one choice for ``n: 2``)
  thus gets the same outcome both ways, flagged ``n_ignored`` by the reconciler.
* Its usage is *reported* when a billable usage block came (``worker.core.usage``), *estimated* when the
  client did not ask for one (``include_usage: false``) or a body has none, and missing otherwise
  (``missing_usage``). A block that came is never thrown away for the estimate: if it cannot be
  billed the call is ``implausible_usage`` or ``inconsistent_usage``, and if a field of it holds a
  count the book has no price for, ``unpriced_component`` (never settled without that part).
* An error finish or an error object makes the call ``error_finish`` even when a usage block also
  came: "a usage block on a broken stream would read as a completed request".
* A choice without a finish reason means the stream stopped mid-flight: ``incomplete``. A missing
  ``[DONE]`` does not matter once finish and usage arrived.
* A non-streamed response with an HTTP error status or an error object and no usage is ``void``:
  nothing billable, and it says so. An empty or cut-off *stream* is never void: nothing says why it ended.
"""

from __future__ import annotations

from dataclasses import dataclass

from worker.core.assembly import Assembled
from worker.core.result import ERROR_FINISHES, Outcome, Reason, UsageSource
from worker.core.usage import Reading, Verdict, read_usage


@dataclass(frozen=True, slots=True)
class Decision:
    outcome: Outcome
    reason: Reason | None = None
    usage_source: UsageSource | None = None


SETTLED_REPORTED = Decision(Outcome.SETTLED, None, UsageSource.REPORTED)
SETTLED_ESTIMATED = Decision(Outcome.SETTLED, None, UsageSource.ESTIMATED)
ERROR_FINISH = Decision(Outcome.UNSETTLED, Reason.ERROR_FINISH)
INCOMPLETE = Decision(Outcome.UNSETTLED, Reason.INCOMPLETE)
MISSING_USAGE = Decision(Outcome.UNSETTLED, Reason.MISSING_USAGE)
IMPLAUSIBLE_USAGE = Decision(Outcome.UNSETTLED, Reason.IMPLAUSIBLE_USAGE)
INCONSISTENT_USAGE = Decision(Outcome.UNSETTLED, Reason.INCONSISTENT_USAGE)
UNPRICED_COMPONENT = Decision(Outcome.UNSETTLED, Reason.UNPRICED_COMPONENT)
VOID = Decision(Outcome.VOID)


@dataclass(frozen=True, slots=True)
class Finishes:
    errored: bool  # a choice finished with an error finish
    complete: bool  # choices 0..k-1 came (k >= 1, no gap) and every one finished
    count: int  # how many choices came


def finishes(assembled: Assembled) -> Finishes:
    """The one "every choice finished" rule, for streams and bodies alike."""
    reasons = [choice.finish_reason for choice in assembled.choices]
    indexes = [choice.index for choice in assembled.choices]
    errored = any(reason in ERROR_FINISHES for reason in reasons)
    complete = (
        bool(reasons)
        and indexes == list(range(len(indexes)))
        and all(reason is not None for reason in reasons)
    )
    return Finishes(errored, complete, len(reasons))


def _by_usage(reading: Reading) -> Decision | None:
    if reading.verdict is Verdict.BILLABLE:
        return SETTLED_REPORTED
    if reading.verdict is Verdict.IMPLAUSIBLE:
        return IMPLAUSIBLE_USAGE
    if reading.verdict is Verdict.INCONSISTENT:
        return INCONSISTENT_USAGE
    if reading.verdict is Verdict.UNPRICED_COMPONENT:
        return UNPRICED_COMPONENT
    return None


def _reading(assembled: Assembled, reading: Reading | None) -> Reading:
    return read_usage(assembled.usage_raw, assembled.groq_usage) if reading is None else reading


def decide_stream(
    assembled: Assembled, *, include_usage: bool, reading: Reading | None = None
) -> Decision:
    """The outcome of a streamed call. ``reading`` is its usage as ``worker.core.usage.read_usage`` read
    it for the call's provider and bound (default: read without either). The request's ``n`` is
    not consulted: the choices that came decide (see the module's rules)."""
    done = finishes(assembled)
    if done.errored or assembled.error is not None:
        return ERROR_FINISH
    if not done.complete:
        return INCOMPLETE
    decided = _by_usage(_reading(assembled, reading))
    if decided is not None:
        return decided
    return MISSING_USAGE if include_usage else SETTLED_ESTIMATED


def decide_response(
    assembled: Assembled, *, status: int, reading: Reading | None = None
) -> Decision:
    """The outcome of a non-streamed call answered with HTTP ``status``."""
    usage = _reading(assembled, reading)
    if status >= 400 or assembled.error is not None:
        # An error that still reports usage is contradictory: flag it rather than guess.
        return ERROR_FINISH if usage.came else VOID
    done = finishes(assembled)
    if done.errored:
        return ERROR_FINISH
    if not done.complete:
        return INCOMPLETE
    return _by_usage(usage) or SETTLED_ESTIMATED
