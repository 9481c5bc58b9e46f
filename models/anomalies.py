"""Contract anomalies: what a call did that the gateway's contract says it must not. Never blocking.

One row per (reservation, kind): a redelivered notification or a second detector finds the row there.
``detail`` is a short human sentence (counts, ids); never prompt or completion text.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import CheckConstraint, ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, BigId, UTCDateTime


class AnomalyKind(StrEnum):
    IDEMPOTENCY_KEY_ON_STREAM = "idempotency_key_on_stream"  # the gateway must answer 400
    NON_STREAMABLE_STREAM = "non_streamable_stream"  # streamed a model configured as not streamable
    NO_CLOSE = "no_close"  # a non-zero hold the sweeper had to finalize: the close never came
    NO_OPEN = "no_open"  # a close settled a non-zero call whose open had not come
    FOREIGN_CHUNKS = "foreign_chunks"  # objects other than chat.completion.chunk in the stream
    MIXED_IDS = "mixed_ids"  # chunks of more than one completion id in one stream
    CHARGE_ABOVE_HOLD = "charge_above_hold"  # the ledger posted a flagged true_up
    FRAMES_AFTER_DONE = "frames_after_done"  # frames after [DONE]: not part of the call
    N_IGNORED = "n_ignored"  # fewer choices than the request's n, every one finished
    PROVIDER_COST_DRIFT = "provider_cost_drift"  # our charge and the provider's cost differ > 1 %
    IMPLAUSIBLE_USAGE = "implausible_usage"  # the usage block's problem, for ``billing show``
    INCONSISTENT_USAGE = "inconsistent_usage"  # the usage block's disagreement, likewise
    # usage fields the book has no price for, with their values (the call is unsettled
    # ``unpriced_component``, its exposure priced without them: a lower bound)
    UNPRICED_COMPONENT = "unpriced_component"
    # a second call was published under the request id of this one; it was dead-lettered, unbilled
    REQUEST_ID_REUSED = "request_id_reused"
    # a complete result came after the call's failure was resolved: charged late, flagged
    CHARGED_LATE = "charged_late"
    # why the worker could not read the call (its failure is ``unreadable``), for ``billing show``
    UNREADABLE = "unreadable"
    # the gateway billed the call to its fallback account: the payer's id was unusable
    ACCOUNT_FALLBACK = "account_fallback"
    # the upstream answered with another model than the request named, one the book prices
    # differently: the call is priced at the served model; the detail names both models
    MODEL_SUBSTITUTED = "model_substituted"


ANOMALY_KINDS = tuple(str(kind) for kind in AnomalyKind)


class Anomaly(Base):
    __tablename__ = "anomalies"
    __table_args__ = (
        UniqueConstraint("reservation_id", "kind"),
        CheckConstraint(
            "kind IN (" + ", ".join(f"'{kind}'" for kind in ANOMALY_KINDS) + ")", name="kind"
        ),
        Index(None, "detected_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    reservation_id: Mapped[int] = mapped_column(ForeignKey("reservations.id"))
    kind: Mapped[str] = mapped_column(String(32))
    detail: Mapped[str | None] = mapped_column(Text)
    detected_at: Mapped[datetime] = mapped_column(UTCDateTime())
