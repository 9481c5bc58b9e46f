"""Pairing twins in the database: a streamed call and a non-streamed one with the same fingerprint,
both settled, made within the parity window of each other.

Contract of ``pair_twins``: runs in the caller's transaction and never commits; safe to run from any
number of processes at once — each reservation is in at most one pair (UNIQUE on both sides of
``parity_pairs``), so a pair found twice is inserted once. A mismatched pair is the finding its alert
is made of: the aggregation reads it by ``paired_at`` (``worker.alerts.sources.parity_mismatch``). Candidates are found by one SQL join over the fingerprint index, bounded by
``lookback`` and ``limit``; Python only chooses among the candidates of one batch (nearest in time
first) and computes the verdicts.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Float, and_, cast, func, literal, select
from sqlalchemy.orm import Session

from models import ParityPair, Reservation, Status, UsageRecord, Verdict
from worker.core.parity import Side, compare
from worker.core.prices import PriceBook
from worker.core.result import Usage
from worker.db.dialect import insert_ignore

reservations = Reservation.__table__
usage_records = UsageRecord.__table__
pairs = ParityPair.__table__

_streamed = reservations.alias("streamed")
_plain = reservations.alias("plain")
_streamed_usage = usage_records.alias("streamed_usage")
_plain_usage = usage_records.alias("plain_usage")

USAGE_COLUMNS = (
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    "reasoning_tokens",
    "cache_write_tokens",
    "audio_prompt_tokens",
    "audio_completion_tokens",
    "cache_write_1h_tokens",
    "image_prompt_tokens",
    "web_search_requests",
    "search_context_size",
    "citation_tokens",
    "inference_geo",
    "image_completion_tokens",
    "images",
    "image_size",
    "image_quality",
    "service_tier",
    "provider",
    "charge_micros",
    "output_hash",
)


def _seconds_apart(session: Session, a: Any, b: Any) -> Any:
    if session.get_bind().dialect.name == "postgresql":
        return func.abs(func.extract("epoch", a - b))
    return func.abs(func.julianday(a) - func.julianday(b)) * literal(86_400.0, Float)


def candidates(session: Session, *, window: timedelta, since: datetime, limit: int) -> list[Any]:
    """Unpaired (streamed, non-streamed) settled twins within ``window``, nearest first."""
    apart = _seconds_apart(session, _streamed.c.created_at, _plain.c.created_at)
    columns = [
        _streamed.c.id.label("streamed_id"),
        _plain.c.id.label("plain_id"),
        _streamed.c.fingerprint,
        _streamed.c.model,
        _streamed.c.request_id.label("streamed_request_id"),
        _plain.c.request_id.label("plain_request_id"),
        _streamed.c.account_id.label("streamed_account_id"),
        _plain.c.account_id.label("plain_account_id"),
        _streamed.c.created_at.label("streamed_created_at"),
        _plain.c.created_at.label("plain_created_at"),
        *(getattr(_streamed_usage.c, name).label(f"s_{name}") for name in USAGE_COLUMNS),
        *(getattr(_plain_usage.c, name).label(f"p_{name}") for name in USAGE_COLUMNS),
    ]
    query = (
        select(*columns)
        .select_from(
            _streamed.join(_streamed_usage, _streamed_usage.c.reservation_id == _streamed.c.id)
            .join(
                _plain,
                and_(
                    _plain.c.fingerprint == _streamed.c.fingerprint,
                    _plain.c.stream.is_(False),
                    _plain.c.status == str(Status.SETTLED),
                ),
            )
            .join(_plain_usage, _plain_usage.c.reservation_id == _plain.c.id)
        )
        .where(
            _streamed.c.fingerprint.is_not(None),
            _streamed.c.stream.is_(True),
            _streamed.c.status == str(Status.SETTLED),
            _streamed.c.created_at >= since,
            apart <= cast(literal(window.total_seconds()), Float),
            ~select(pairs.c.id).where(pairs.c.streamed_reservation_id == _streamed.c.id).exists(),
            ~select(pairs.c.id).where(pairs.c.plain_reservation_id == _plain.c.id).exists(),
        )
        .order_by(_streamed.c.id, apart, _plain.c.id)
        .limit(limit)
    )
    return session.execute(query).all()


def _side(row: Any, prefix: str, model: str, at: datetime, book: PriceBook | None) -> Side:
    def value(name: str) -> Any:
        return getattr(row, f"{prefix}_{name}")

    book_charge = None
    if book is not None:
        usage = Usage(
            value("prompt_tokens"),
            value("completion_tokens"),
            value("cached_tokens"),
            value("reasoning_tokens"),
            value("cache_write_tokens"),
            value("audio_prompt_tokens"),
            value("audio_completion_tokens"),
            value("cache_write_1h_tokens"),
            value("image_prompt_tokens"),
            value("web_search_requests"),
            value("search_context_size"),
            value("citation_tokens"),
            value("inference_geo"),
            value("image_completion_tokens"),
            value("images"),
            value("image_size"),
            value("image_quality"),
        )
        priced = book.charge(
            model, usage, at, tier=value("service_tier"), provider=value("provider")
        )
        book_charge = None if priced is None else int(priced)
    return Side(
        prompt_tokens=value("prompt_tokens"),
        completion_tokens=value("completion_tokens"),
        charge_micros=value("charge_micros"),
        output_hash=value("output_hash"),
        book_charge=book_charge,
    )


def pair_twins(
    session: Session,
    *,
    window: timedelta,
    now: datetime,
    book: PriceBook | None = None,
    lookback: timedelta = timedelta(days=1),
    limit: int = 500,
) -> dict[str, int]:
    """Pair what can be paired now; returns counts of ``match`` and ``mismatch`` pairs inserted.

    ``book`` prices each side's recorded usage again for the ``charge_per_token`` comparison; without
    it that field is not compared.
    """
    counts = {str(Verdict.MATCH): 0, str(Verdict.MISMATCH): 0}
    used_streamed: set[int] = set()
    used_plain: set[int] = set()
    for row in candidates(session, window=window, since=now - lookback - window, limit=limit):
        if row.streamed_id in used_streamed or row.plain_id in used_plain:
            continue
        streamed = _side(row, "s", row.model, row.streamed_created_at, book)
        plain = _side(row, "p", row.model, row.plain_created_at, book)
        verdict, mismatched, identical = compare(streamed, plain)
        facts = {
            "streamed_prompt_tokens": streamed.prompt_tokens,
            "plain_prompt_tokens": plain.prompt_tokens,
            "streamed_completion_tokens": streamed.completion_tokens,
            "plain_completion_tokens": plain.completion_tokens,
            "streamed_charge_micros": streamed.charge_micros,
            "plain_charge_micros": plain.charge_micros,
        }
        pair_id = session.execute(
            insert_ignore(session, pairs).returning(pairs.c.id),
            {
                "fingerprint": row.fingerprint,
                "streamed_reservation_id": row.streamed_id,
                "plain_reservation_id": row.plain_id,
                "verdict": str(verdict),
                "mismatched": ",".join(mismatched) or None,
                "outputs_identical": identical,
                "paired_at": now,
                **facts,
            },
        ).scalar_one_or_none()
        used_streamed.add(row.streamed_id)
        used_plain.add(row.plain_id)
        if pair_id is None:  # another pairer took one of the two meanwhile
            continue
        counts[str(verdict)] += 1
    return counts
