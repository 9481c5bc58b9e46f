"""What a batch carries through its steps (``worker.consumer.steps``): each call's notifications
and what became of them (``CallState``), the batch (``Batch``), and the counts it reports
(``BatchStats``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from worker.consumer.reading import StreamSize
from worker.contract.entries import Entry, Notification, Unbilled
from worker.core.prices import PriceBook
from worker.core.request import RequestMeta
from worker.core.result import Outcome, Result
from worker.ledger.effects import Effect


class Redo(StrEnum):
    """A redelivered close whose result was committed before: the after-commit step to redo."""

    RECHECK = "recheck"  # the call is unsettled: schedule its recheck
    DELETE = "delete"  # the call is closed: delete its stream


@dataclass
class BatchStats:
    read: int = 0
    held: int = 0
    settled: int = 0
    unsettled: int = 0
    voided: int = 0
    duplicates: int = 0
    dead: int = 0
    deferred: int = 0
    acked: int = 0
    effects: dict[str, int] = field(default_factory=dict)
    reasons: dict[str, int] = field(default_factory=dict)
    charged_micros: int = 0
    retries: int = 0  # batch transactions rolled back on a transient error and run again
    latencies_ms: list[int] = field(default_factory=list)

    def add(self, other: BatchStats) -> None:
        for name in ("read", "held", "settled", "unsettled", "voided", "duplicates", "dead"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.deferred += other.deferred
        self.retries += other.retries
        self.acked += other.acked
        for key, value in other.effects.items():
            self.effects[key] = self.effects.get(key, 0) + value
        for key, value in other.reasons.items():
            self.reasons[key] = self.reasons.get(key, 0) + value
        self.charged_micros += other.charged_micros
        self.latencies_ms.extend(other.latencies_ms)


@dataclass
class CallState:
    """The notifications of one request inside a batch, and what became of them."""

    request_id: str
    notes: list[Notification] = field(default_factory=list)
    effect: Effect | None = None
    outcome: Outcome | None = None
    reason: str | None = None
    charge_micros: int = 0
    dead_reason: str | None = None
    error: str | None = None
    close_ts: int | None = None
    meta: RequestMeta | None = None
    result: Result | None = None
    held_here: bool = False  # this batch recorded the hold
    redo: Redo | None = None
    whole: bool = False  # its stream is read whole even without a close (the sweeper's calls)
    gave_up: bool = False  # dead-lettered as poison, not as bad input: its stream is kept
    # refused, and recorded unsettled ``unreadable`` from its salvaged money facts by this batch
    # (``worker.consumer.salvage``): its stream goes with the dead letter
    salvaged: bool = False

    def transaction_state(self) -> tuple[Any, ...]:
        """What a batch transaction may change on this call, to restore when it is rolled back."""
        return (
            self.effect, self.outcome, self.reason, self.charge_micros, self.dead_reason,
            self.error, self.held_here, self.redo, self.salvaged,
        )  # fmt: skip

    def restore(self, state: tuple[Any, ...]) -> None:
        (
            self.effect, self.outcome, self.reason, self.charge_micros, self.dead_reason,
            self.error, self.held_here, self.redo, self.salvaged,
        ) = state  # fmt: skip

    def defer(self, error: BaseException) -> None:
        """Leave the call pending, for a redelivery to try again."""
        self.effect, self.dead_reason, self.error = Effect.DEFERRED, None, type(error).__name__

    @property
    def usable(self) -> bool:
        """Decoded and not yet decided: the transaction has work to do for it."""
        return self.meta is not None and self.dead_reason is None and self.effect is None

    @property
    def closing(self) -> bool:
        return any(note.kind == "close" for note in self.notes)

    @property
    def opened(self) -> bool:
        return any(note.kind == "open" for note in self.notes)


@dataclass
class Batch:
    """A batch of notification entries as its steps fill it in: ``gather`` (``calls``, ``sizes``,
    ``rest``), ``fetch`` (``streams``), ``reconcile``, then the transaction and the rest."""

    stream: str
    stats: BatchStats
    book: PriceBook
    entries: list[tuple[bytes, Any]] = field(default_factory=list)  # the notifications read
    ack: list[bytes] = field(default_factory=list)
    dead: list[dict[str, Any]] = field(default_factory=list)
    calls: list[CallState] = field(default_factory=list)
    # Each call's stream size, as checked before it is read (``reading``).
    sizes: list[StreamSize] = field(default_factory=list)
    # Each call's stream, cut to its first entry once reconciled (the transaction asks only
    # whether the stream exists).
    streams: list[list[Entry]] = field(default_factory=list)
    # Notification entries of the calls past the byte budget: the next batch, still pending.
    rest: list[tuple[bytes, Any]] = field(default_factory=list)
    # Requests the gateway served unbilled (``unbilled`` notifications), recorded by the
    # transaction's ``unbilled`` part and acknowledged with the rest after the commit.
    unbilled: list[Unbilled] = field(default_factory=list)
