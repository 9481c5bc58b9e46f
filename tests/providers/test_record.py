"""The usage record keeps what the provider reported: the parts, the shape, the provider, its cost."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from models import Anomaly, Failure, Reservation, UsageRecord
from worker.ledger.findings import record_findings
from worker.ledger.operations import apply_result, hold

from .shapes import AT, WITHOUT_DIMENSIONS, load, meta_of, reconcile


def _apply(session: Session, name: str) -> UsageRecord:
    result = reconcile(name)
    meta = meta_of(load(name), name)
    hold(session, meta, now=AT)
    effect = apply_result(session, result, now=AT, grace=timedelta(hours=1))
    record_findings(session, result, effect, salt="s", now=AT, meta=meta)
    record = session.scalar(
        select(UsageRecord)
        .join(Reservation, Reservation.id == UsageRecord.reservation_id)
        .where(Reservation.request_id == meta.request_id)
    )
    assert record is not None
    return record


def test_xai_usage_record(session: Session) -> None:
    record = _apply(session, "xai/reasoning_apart_with_cost.json")
    assert (record.charge_micros, record.provider_cost_micros) == (23286, 23286)
    assert (record.provider, record.usage_shape) == ("xai", "reasoning_apart")
    assert (record.completion_tokens, record.reasoning_tokens) == (4308, 2809)


def test_openrouter_usage_record_and_drift_anomaly(session: Session) -> None:
    record = _apply(session, "openrouter/usage_accounting.json")
    assert (record.cache_write_tokens, record.provider_cost_micros) == (100, 950_000)
    detail = session.scalar(
        select(Anomaly.detail).where(
            Anomaly.reservation_id == record.reservation_id, Anomaly.kind == "provider_cost_drift"
        )
    )
    # (687 - 950000) / 950000 = -99.9277 %
    assert detail == "charged 687 micros, the provider reported 950000 (-99.93 %)"


def test_anthropic_and_tier_columns(session: Session) -> None:
    record = _apply(session, "anthropic/native_usage_passthrough.json")
    assert (record.prompt_tokens, record.cached_tokens, record.cache_write_tokens) == (
        10821,
        9000,
        1800,
    )
    assert _apply(session, "openai/chat_object_details.json").service_tier == "default"


def test_an_unpriced_component_is_kept_unsettled_with_its_fields(session: Session) -> None:
    """Anthropic's web search with a row that has no search price: the failures table admits the
    reason, the anomalies table the kind; no usage record, so nothing is charged without the
    search."""
    name = "anthropic/web_search_server_tool_use.json"
    result = reconcile(name, WITHOUT_DIMENSIONS)
    meta = meta_of(load(name), name)
    hold(session, meta, now=AT)
    effect = apply_result(session, result, now=AT, grace=timedelta(hours=1))
    record_findings(session, result, effect, salt="s", now=AT, meta=meta)
    assert effect == "unsettled"
    reservation = session.scalar(
        select(Reservation).where(Reservation.request_id == meta.request_id)
    )
    assert reservation is not None
    failure = session.scalar(select(Failure).where(Failure.reservation_id == reservation.id))
    assert failure is not None
    # 6039 * 3.00 + 931 * 15.00 = 32082: the tokens, the search left out (a lower bound)
    assert (failure.reason, failure.exposure_micros) == ("unpriced_component", 32082)
    detail = session.scalar(
        select(Anomaly.detail).where(
            Anomaly.reservation_id == reservation.id, Anomaly.kind == "unpriced_component"
        )
    )
    assert detail == (
        "usage fields without a price: web_search_requests=1;"
        " exposure priced without them (a lower bound)"
    )
    usage = session.scalar(select(UsageRecord).where(UsageRecord.reservation_id == reservation.id))
    assert usage is None
