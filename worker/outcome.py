"""Decide a call's outcome from what was assembled: settled, unsettled (with a reason) or void.

These rules are normative (seeds 000 and 001):

* A stream settles only when every choice ``0..n-1`` finished with a reason other than ``error`` and no
  error object arrived. Its usage is *reported* when a usage block came, *estimated* when the client did
  not ask for one (``include_usage: false``), and missing otherwise (``missing_usage``).
* An ``error`` finish or an error object makes the call ``error_finish`` even when a usage block also
  came: "a usage block on a broken stream would read as a completed request".
* A choice without a finish reason means the stream stopped mid-flight: ``incomplete``. A missing
  ``[DONE]`` does not matter once finish and usage arrived.
* A non-streamed response with an HTTP error status or an error object and no usage is ``void``:
  nothing billable, and it says so. An empty or cut-off *stream* is never void: nothing says why it ended.
"""

from __future__ import annotations

from dataclasses import dataclass

from worker.assembly import Assembled
from worker.result import Outcome, Reason, UsageSource, usage_from_block


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
VOID = Decision(Outcome.VOID)


def _finishes(assembled: Assembled, n: int) -> tuple[bool, bool]:
    """(any choice finished with error, every expected choice finished)."""
    finished: dict[int, str] = {
        choice.index: choice.finish_reason
        for choice in assembled.choices
        if choice.finish_reason is not None
    }
    errored = any(reason == "error" for reason in finished.values())
    expected = max(n, 1)
    complete = all(index in finished for index in range(expected))
    return errored, complete


def decide_stream(assembled: Assembled, *, n: int, include_usage: bool) -> Decision:
    """The outcome of a streamed call with ``n`` requested choices."""
    errored, complete = _finishes(assembled, n)
    if errored or assembled.error is not None:
        return ERROR_FINISH
    if not complete:
        return INCOMPLETE
    if usage_from_block(assembled.usage_raw) is not None:
        return SETTLED_REPORTED
    if not include_usage:
        return SETTLED_ESTIMATED
    return MISSING_USAGE


def decide_response(assembled: Assembled, *, status: int) -> Decision:
    """The outcome of a non-streamed call answered with HTTP ``status``."""
    has_usage = usage_from_block(assembled.usage_raw) is not None
    failed = status >= 400 or assembled.error is not None
    if failed:
        # An error that still reports usage is contradictory: flag it rather than guess.
        return ERROR_FINISH if has_usage else VOID
    # A parsed body is whole: only the choices it holds are expected (some providers ignore ``n``).
    errored, complete = _finishes(assembled, len(assembled.choices))
    if errored:
        return ERROR_FINISH
    if not complete or not assembled.choices:
        return INCOMPLETE
    return SETTLED_REPORTED if has_usage else SETTLED_ESTIMATED
