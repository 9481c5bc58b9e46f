"""The parity promise as a property: for any usage block, model and time, the streamed and the
non-streamed path through the reconciler and the ledger (a real session) charge the same integers."""

from __future__ import annotations

import uuid
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from sqlalchemy.orm import Session

from models import Reservation, UsageRecord
from worker.ledger.operations import apply_result
from worker.result import Outcome

from .calls import BOOK, T0, meta_dict, reconcile

MODELS = sorted({price.pattern.rstrip("*") for price in BOOK.prices if price.pattern})


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    model=st.sampled_from(MODELS),
    prompt=st.integers(0, 2_000_000),
    completion=st.integers(0, 500_000),
    cached_share=st.integers(0, 100),
    minutes=st.integers(-525_600, 525_600),
    reserved=st.integers(0, 10_000_000),
)
def test_streamed_and_plain_charge_the_same(
    session: Session,
    model: str,
    prompt: int,
    completion: int,
    cached_share: int,
    minutes: int,
    reserved: int,
) -> None:
    block = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": prompt * cached_share // 100},
    }
    at = T0 + timedelta(minutes=minutes)
    tag = uuid.uuid4().hex[:10]
    charges = []
    for stream in (True, False):
        data = meta_dict(stream=stream, model=model, created_at=at, reserved=reserved)
        data["request_id"] = f"prop-{tag}-{stream}"
        result = reconcile(data, "Same words.", block)
        assert result.outcome is Outcome.SETTLED
        effect = apply_result(session, result, now=at, grace=timedelta(hours=1))
        if result.charge_micros is None:  # unpriced at that time: both are, equally
            assert effect == "unsettled"
            charges.append(None)
            continue
        assert effect == "settled"
        charges.append(
            session.scalar(
                select(UsageRecord.charge_micros)
                .join(Reservation, Reservation.id == UsageRecord.reservation_id)
                .where(Reservation.request_id == data["request_id"])
            )
        )
    assert charges[0] == charges[1]
    assert charges[0] is None or isinstance(charges[0], int)
