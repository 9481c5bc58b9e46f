"""What became of a call: the one vocabulary the ledger, the consumer, the sweeper, the findings and
the metrics share (a ``StrEnum``, so each member is also its label in logs, metrics and counters).
"""

from __future__ import annotations

from enum import StrEnum


class Effect(StrEnum):
    HELD = "held"  # its reservation was recorded and the amount held; the call is still running
    SETTLED = "settled"  # charged from the usage, the rest of the hold released
    SETTLED_LATE = "settled_late"  # settled within grace of a recorded failure, closing it
    VOIDED = "voided"  # the whole hold released: the call never ran or cost nothing
    UNSETTLED = "unsettled"  # the hold kept and a failure recorded, for a later resolution
    # an unsettled call's close read another reason than its failure's (recorded before the close,
    # by the sweeper): the failure takes the close's reason; the hold stays, no money moves
    RECLASSIFIED = "reclassified"
    # an unsettled call's close read a void call (the sweeper had finalized it before its answer
    # came): the whole hold released, the failure closed as released
    VOIDED_LATE = "voided_late"
    # a complete result came after the call's failure was resolved (its hold released, or its
    # estimate charged): its own flagged ``charge`` transaction moves the difference between its
    # charge and what the resolution charged; the call is settled, late, never dropped
    CHARGED_LATE = "charged_late"
    DUPLICATE = "duplicate"  # this very effect was applied before: nothing changed
    FINAL = "final"  # the reservation was already closed another way: nothing changed
    DEFERRED = "deferred"  # nothing applied: left pending, for a redelivery to try again


SETTLED_EFFECTS = frozenset({Effect.SETTLED, Effect.SETTLED_LATE, Effect.CHARGED_LATE})
NO_CHANGE = frozenset({Effect.DUPLICATE, Effect.FINAL})
