"""The sweeper never applies another call's stream to a reservation: a reused request id whose
first call is unsettled is not settled late with the second call's usage (real Redis, both
databases)."""

from __future__ import annotations

import orjson

from worker.consumer.sweeper import Sweeper
from worker.ledger.balances import balance

from .test_consumer import CHUNK, drain, frames, meta, play, status
from .test_reused_id import settings

__all__ = ["settings"]  # the fixture, used by name

# The second call's usage: complete and plausible for gpt-4o, so it would settle what it is applied
# to (10,000 * 2.50 + 5,000 * 10.00 = 75,000 micro-USD, far above the first call's hold of 1,000).
USAGE = {"prompt_tokens": 10_000, "completion_tokens": 5_000, "total_tokens": 15_000}


def second_call_frames() -> list[str]:
    usage = "data: " + orjson.dumps({**CHUNK, "choices": [], "usage": USAGE}).decode()
    return [*frames(usage=False)[:-1], usage + "\n\n", "data: [DONE]\n\n"]


def test_the_recheck_leaves_a_reused_ids_stream_alone(
    consumer, publisher, sessions, redis_client, account
) -> None:
    first = meta(account)
    rid = first["request_id"]
    play(publisher, first, frames(usage=False))  # unsettled missing_usage, rechecked for grace
    drain(consumer)
    consumer.client.delete(consumer.keys.request(rid))  # the gateway's TTL ran out early
    play(publisher, {**first, "messages": []}, second_call_frames())  # a second call, the same id
    drain(consumer)  # dead-lettered by the consumer, its stream kept

    Sweeper(consumer).run()  # the first call's recheck is due: the stream is the second call's

    assert status(sessions, rid) == "unsettled"
    with sessions() as s:
        assert (balance(s, account).held, balance(s, account).charged) == (1000, 0)
    assert redis_client.exists(consumer.keys.request(rid)), "the second call's stream was deleted"
    assert redis_client.zscore(consumer.keys.recheck, rid) is None
