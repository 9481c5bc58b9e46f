"""How fast this machine runs the consumer's own Python now: a speed probe for row 12.

A shared virtual machine's speed drifts: within one ``make bench`` the same work has taken 1.5x
longer half an hour later. The capacity model measures its unit costs at one moment and predicts
rows measured at others, so each of those measurements also reads this probe around itself, and the
model moves its CPU costs from the speed of its own measurement to the speed of the row's.

The probe is fixed work of the consumer's hot path: ``reconcile_stream`` (decode, assemble,
estimate, price) over the same simulated streamed calls every time, ``PASSES`` passes timed on the
wall clock (a stolen or slowed CPU shows in it as it shows in a row), their median the reading.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from functools import cache

from benchmarks.harness.workload import streamed_calls
from worker.core.prices import load_price_book
from worker.core.reconcile import reconcile_stream

CALLS = 40  # about 30 ms of work a pass on this project's machines
PASSES = 15


@cache
def _work() -> Callable[[], None]:
    book = load_price_book()
    calls = streamed_calls(CALLS)

    def work() -> None:
        for meta, records in calls:
            reconcile_stream(meta, records, book)

    work()  # imports, caches and the tokenizer loaded before any timing
    return work


def probe() -> float:
    """Seconds a pass of the fixed work takes now (the median of ``PASSES``)."""
    work = _work()
    walls = []
    for _ in range(PASSES):
        began = time.perf_counter()
        work()
        walls.append(time.perf_counter() - began)
    return statistics.median(walls)
