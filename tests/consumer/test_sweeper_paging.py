"""The sweeper looks past calls that are still streaming (real Redis, both databases)."""

from __future__ import annotations

import time
from dataclasses import replace

from worker.consumer.consumer import Consumer
from worker.consumer.sweeper import Sweeper

from .test_consumer import drain, frames, meta, play, settings, status

__all__ = ["settings"]  # the fixture, used by name

IDLE_MS = 1500


def test_an_abandoned_call_behind_a_page_of_live_ones_is_finalized(
    consumer: Consumer, publisher, sessions, account
) -> None:
    """Limit 2: the two oldest held calls are still streaming; the third was abandoned complete.
    A pass that only looked at the 2 oldest would skip both and never reach the third."""
    consumer.settings = replace(consumer.settings, sweep_idle_ms=IDLE_MS)
    live = [meta(account), meta(account)]
    for call in live:
        play(publisher, call, frames()[:1], close=False)
    drain(consumer)  # their holds are the oldest
    abandoned = meta(account)
    play(publisher, abandoned, frames(), close=False)
    drain(consumer)
    time.sleep(IDLE_MS / 1000 + 0.2)  # every reservation and stream is now idle ...
    for call in live:  # ... but these two are still being written
        publisher.frames(call["request_id"], frames()[1:2])
    Sweeper(consumer, limit=2).run()
    assert status(sessions, abandoned["request_id"]) == "settled"
    assert [status(sessions, call["request_id"]) for call in live] == ["held", "held"]
