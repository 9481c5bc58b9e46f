"""The step interface (``worker.consumer.steps``): named steps, each given the next, wrapped or
replaced by name; and the consumer composed of them (real Redis, SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest

from worker.config import Settings
from worker.consumer.calls import Batch
from worker.consumer.reconciling import Reconcile
from worker.consumer.steps import Call, Chain, Step, Steps

from .test_consumer import KEY, drain, frames, meta, play, status


@pytest.fixture
def settings(prefix: str) -> Settings:
    return Settings(hash_salt=KEY, prefix=prefix, batch_size=4, claim_idle_ms=60_000)


def test_a_chain_hands_each_step_the_batch_in_order_and_the_next_step_after_it() -> None:
    seen: list[str] = []
    inner = Chain("inner", [Call("b", lambda log: log.append("b")), Call("c", seen.append)])
    outer = Chain("outer", [Call("a", lambda log: log.append("a")), inner])
    after = Call("after", lambda log: log.append("after"))
    outer.next_step = after
    outer.submit(seen)
    assert seen == ["a", "b", seen, "after"]
    assert list(Steps([outer, after]).names()) == ["outer", "a", "inner", "b", "c", "after"]


def test_a_wrapped_step_runs_once_per_batch_and_its_undo_puts_it_back() -> None:
    seen: list[str] = []
    steps = Steps([Chain("all", [Call("a", lambda log: log.append("a")), Call("b", seen.append)])])
    calls = []

    def around(work, batch):  # type: ignore[no-untyped-def]
        calls.append(len(batch))
        work(batch)
        batch.append("wrapped")

    undo = steps.wrap("a", around)
    steps["all"].submit(seen)
    assert (calls, seen) == ([0], ["a", "wrapped", seen])
    undo()
    seen.clear()
    steps["all"].submit(seen)
    assert (calls, seen) == ([0], ["a", seen])
    with pytest.raises(KeyError):
        steps.wrap("nowhere", around)


def test_a_replaced_step_keeps_its_place_and_name() -> None:
    steps = Steps([Chain("all", [Call("a", lambda log: log.append("a")), Call("b", print)])])
    got: list[object] = []

    class Doubler(Step[list]):
        def process(self, batch: list) -> None:
            batch.extend(batch)

    old = steps.replace("a", Doubler())
    steps.replace("b", Call("ignored", lambda batch: got.append(list(batch))))
    steps["all"].submit(["x"])
    assert got == [["x", "x"]]  # the replacement's output is what the next step was given
    assert old.name == "a" and steps["a"].name == "a" and steps["b"].name == "b"


def test_the_consumer_names_its_steps_in_order(consumer) -> None:
    assert list(consumer.steps.names()) == [
        "read",
        "prepare",
        "gather",
        "fetch",
        "reconcile",
        "apply",
        "transaction",
        "ledger_batched",
        "ledger_per_call",
        "conserve",
        "routes",
        "unbilled",
        "poison",
        "acknowledge",
    ]


def test_each_wrapped_consumer_step_runs_once_per_batch(consumer, publisher, account) -> None:
    calls = [meta(account) for _ in range(4)]
    for m in calls:
        play(publisher, m, frames())  # eight notifications: two batches of four
    runs: dict[str, int] = {}

    def counted(name):  # type: ignore[no-untyped-def]
        def around(work, batch):  # type: ignore[no-untyped-def]
            runs[name] = runs.get(name, 0) + 1
            work(batch)

        return around

    names = (
        "read",
        "prepare",
        "fetch",
        "reconcile",
        "transaction",
        "ledger_batched",
        "acknowledge",
    )
    undo = [consumer.wrap_step(name, counted(name)) for name in names]
    stats = consumer.drain(0, seconds=30, block_ms=None, until_idle=True)
    assert stats.settled == 4
    # Three reads (the last finds nothing); two batches through every other step.
    assert runs == {"read": 3, **dict.fromkeys(names[1:], 2)}
    for step in reversed(undo):
        step()
    assert consumer.steps["fetch"].__class__.__name__ == "Fetch"


def test_what_a_replaced_step_hands_on_is_what_the_transaction_applies(
    consumer, publisher, redis_client, sessions, account
) -> None:
    refused, kept = meta(account), meta(account)
    play(publisher, refused, frames())
    play(publisher, kept, frames())

    class Refusing(Reconcile):
        def process(self, batch: Batch) -> None:
            super().process(batch)
            for call in batch.calls:
                if call.request_id == refused["request_id"]:
                    call.dead_reason = "refused by the replaced step"

    consumer.replace_step("reconcile", Refusing())
    drain(consumer)
    reasons = {f[b"reason"].decode() for _, f in redis_client.xrange(consumer.keys.dead)}
    assert reasons == {"refused by the replaced step"}
    assert status(sessions, kept["request_id"]) == "settled"
    # refused before the transaction: recorded from its salvaged money facts, not settled
    assert status(sessions, refused["request_id"]) == "unsettled"


def test_the_sweeper_runs_the_consumers_reconcile_and_defers_only_the_row_it_fails(
    consumer, publisher, sessions, prefix
) -> None:
    """The sweeper's steps by name; the consumer's ``reconcile``, replaced there, is the one a
    sweep runs; a call it fails on is left held for the next pass, the rest finalized."""
    from worker.consumer.reconciling import reconcile_call
    from worker.consumer.sweeper import Sweeper

    eager = Settings(hash_salt=KEY, prefix=prefix, batch_size=4, sweep_idle_ms=0)
    consumer.settings = eager
    failing, fine = meta("acct-sweep-steps"), meta("acct-sweep-steps")
    for m in (failing, fine):
        play(publisher, m, frames(finish=None, usage=False), close=False)
    drain(consumer)  # the holds; no close comes

    def flaky(entries, request_id, book):  # type: ignore[no-untyped-def]
        if request_id == failing["request_id"]:
            raise RuntimeError("a bug on this call's input")
        return reconcile_call(entries, request_id, book)

    sweeper = Sweeper(consumer)
    assert list(sweeper.steps.names()) == [
        "read", "fetch", "quiet", "reconcile",
        "finalize", "finalize_transaction", "finalize_after",
        "recheck", "recheck_transaction", "recheck_after",
    ]  # fmt: skip
    runs: list[str] = []
    undo = sweeper.wrap_step(
        "finalize_transaction", lambda work, sweep: (runs.append(sweep.kind), work(sweep))
    )
    original = consumer.replace_step("reconcile", Reconcile(per_call=flaky))
    stats = sweeper.run()
    assert (runs, stats.finalized) == (["finalize"], 1)
    assert status(sessions, failing["request_id"]) == "held"
    assert status(sessions, fine["request_id"]) == "unsettled"
    consumer.replace_step("reconcile", original)
    undo()
    assert Sweeper(consumer).run().finalized == 1
    assert status(sessions, failing["request_id"]) == "unsettled"
