"""Calibration end to end on both engines: reconciled calls with reported usage teach a factor,
an estimated call is charged at the calibrated counts and its usage record says how, a factor that
moves beyond its interval is a new version and a drift finding."""

from __future__ import annotations

import random
from contextlib import nullcontext
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from models import CalibrationFactor, Reservation, UsageRecord
from worker.alerts.sources import calibration
from worker.cli.show import _text as show_text
from worker.consumer.pricing import PriceSource
from worker.core.calibration import PPM, calibrated
from worker.core.money import Micros
from worker.core.prices import PriceBook, load_price_book
from worker.core.reconcile import reconcile_response
from worker.core.request import RequestMeta
from worker.core.result import Result, UsageSource
from worker.ledger.calibration import CalibrationPolicy, current, learn
from worker.ledger.operations import apply_result, hold
from worker.ledger.queries import show

MODEL, PROVIDER = "claude-haiku-4-5", "anthropic"
NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
GRACE = timedelta(hours=1)
WORDS = [
    "the",
    "invoice",
    "of",
    "my",
    "account",
    "was",
    "paid",
    "twice",
    "please",
    "refund",
    "one",
    "of",
    "them",
    "today",
]
POLICY = CalibrationPolicy(window=timedelta(hours=1), min_samples=20)
BOOK = load_price_book()


def _call(
    rng: random.Random, request_id: str, book: PriceBook, ratio: tuple[int, int] | None
) -> tuple[RequestMeta, Result]:
    """A non-streamed call; with ``ratio`` (ppm per direction) its usage block reports the
    estimate scaled by it (the known truth), without it the call is billed at the estimate."""
    prompt = " ".join(rng.choice(WORDS) for _ in range(rng.randint(30, 300)))
    answer = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 200)))
    meta = RequestMeta(
        request_id, "acct-cal", MODEL, False, True, Micros(10**7), NOW - timedelta(seconds=5),
        messages=({"role": "user", "content": prompt},), provider=PROVIDER,
    )  # fmt: skip
    body: dict[str, Any] = {
        "id": "chatcmpl-" + request_id, "object": "chat.completion", "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": answer},
                     "finish_reason": "stop"}],
    }  # fmt: skip
    if ratio is not None:
        guess = reconcile_response(meta, 200, body, book).estimate
        p = guess.prompt_tokens * ratio[0] // PPM
        c = guess.completion_tokens * ratio[1] // PPM
        body["usage"] = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
    return meta, reconcile_response(meta, 200, body, book)


def _settle(session: Session, calls: list[tuple[RequestMeta, Result]], now: datetime) -> None:
    for meta, result in calls:
        hold(session, meta, now=now)
        assert apply_result(session, result, now=now, grace=GRACE) == "settled"


def _record(session: Session, request_id: str) -> UsageRecord:
    return session.execute(
        select(UsageRecord)
        .join(Reservation, Reservation.id == UsageRecord.reservation_id)
        .where(Reservation.request_id == request_id)
    ).scalar_one()


def test_learnt_factors_charge_estimates_and_a_shift_is_a_drift(
    session: Session, unique_id: str
) -> None:
    rng = random.Random(41)
    taught = [_call(rng, f"{unique_id}-r{i}", BOOK, (1_200_000, 1_100_000)) for i in range(60)]
    _settle(session, taught, NOW)
    [first] = learn(session, NOW + timedelta(seconds=1), POLICY)
    assert (first.provider, first.model, first.version, first.new_version) == (
        PROVIDER, MODEL, 1, True,
    )  # fmt: skip
    assert not first.exact and first.prompt.used and first.completion.used
    # the truth (1.2, 1.1, truncated to whole tokens) is within 1 % of the factor
    assert abs(first.prompt.factor_ppm - 1_200_000) < 12_000
    assert abs(first.completion.factor_ppm - 1_100_000) < 11_000
    assert first.held_out > 0 and first.prompt.error_raw_ppm is not None
    assert abs(first.prompt.error_raw_ppm) > 100_000  # uncalibrated: about -16.7 %
    assert abs(first.prompt.error_calibrated_ppm or 0) < 20_000
    # the same data again: the same version, refreshed in place
    [again] = learn(session, NOW + timedelta(seconds=2), POLICY)
    assert (again.version, again.new_version, again.drifted) == (1, False, False)

    table = current(session)
    factors = table.lookup(PROVIDER, MODEL)
    assert factors is not None and factors.version == 1
    # the worker's book carries the current factors (the consumer and the sweeper price with it)
    book = PriceSource(lambda: nullcontext(session)).current()  # type: ignore[arg-type,return-value]
    assert book.calibration == table
    meta, estimated = _call(rng, f"{unique_id}-e", book, None)
    assert estimated.usage_source is UsageSource.ESTIMATED
    raw = estimated.estimate
    billed = estimated.billed_usage
    assert billed is not None
    assert billed.prompt_tokens == calibrated(raw.prompt_tokens, first.prompt.factor_ppm)
    assert billed.prompt_tokens > raw.prompt_tokens
    uncalibrated = BOOK.charge(MODEL, raw.as_usage(), meta.created_at, provider=PROVIDER)
    assert uncalibrated is not None and estimated.charge_micros is not None
    assert estimated.charge_micros > uncalibrated
    _settle(session, [(meta, estimated)], NOW)
    record = _record(session, meta.request_id)
    assert (record.calibration_version, record.prompt_factor_ppm, record.completion_factor_ppm) == (
        1, factors.prompt_ppm, factors.completion_ppm,
    )  # fmt: skip
    assert (record.estimate_prompt_tokens, record.prompt_tokens) == (
        raw.prompt_tokens, calibrated(raw.prompt_tokens, factors.prompt_ppm),
    )  # fmt: skip
    # re-pricing from the record alone gives the charge
    again_usage = type(billed)(record.prompt_tokens, record.completion_tokens)
    assert BOOK.charge(MODEL, again_usage, meta.created_at, provider=PROVIDER) == (
        record.charge_micros
    )
    answer = show(session, meta.request_id)
    assert answer is not None and answer["estimate"]["calibration"] == {
        "version": 1,
        "prompt_factor_ppm": factors.prompt_ppm,
        "completion_factor_ppm": factors.completion_ppm,
        "segment": raw.segment,
    }
    [line] = [text for text in show_text(answer) if text.startswith("calibrated")]
    assert line.startswith(
        f"calibrated v1, segment {raw.segment} (its own factors when the version fitted that "
        f"segment, else the model's pooled ones): prompt {raw.prompt_tokens} x "
        f"{factors.prompt_ppm // PPM}."
        f"{factors.prompt_ppm % PPM:06d} = {record.prompt_tokens}, "
    )
    # a reported call records no factors: nothing was calibrated
    assert _record(session, taught[0][0].request_id).calibration_version is None

    # the provider changes its tokenizer: 1.5 on the prompt, an hour later
    later = NOW + timedelta(hours=2)
    shifted = [_call(rng, f"{unique_id}-s{i}", BOOK, (1_500_000, 1_100_000)) for i in range(60)]
    _settle(session, shifted, later)
    [second] = learn(session, later + timedelta(seconds=1), POLICY)
    assert (second.version, second.new_version, second.drifted) == (2, True, True)
    assert abs(second.prompt.factor_ppm - 1_500_000) < 15_000
    versions = session.scalars(
        select(CalibrationFactor.version)
        .where(CalibrationFactor.model == MODEL, CalibrationFactor.provider == PROVIDER)
        .order_by(CalibrationFactor.version)
    ).all()
    assert versions == [1, 2]
    assert second.cause == "tokenizer"
    found = calibration(session, later, later + timedelta(minutes=1), None)  # type: ignore[arg-type]
    assert [(f.kind, f.reason, f.model, f.pages) for f in found] == [
        ("drift", "tokenizer_change", MODEL, True)
    ]
    assert found[0].facts["calibration_version"] == 2
    assert {(m["direction"], m["segment"]) for m in found[0].facts["moves"]} == {
        ("prompt", "latin")
    }


def test_a_version_s_factors_never_change_once_written(session: Session, unique_id: str) -> None:
    rng = random.Random(43)
    _settle(
        session,
        [_call(rng, f"{unique_id}-a{i}", BOOK, (1_200_000, 1_100_000)) for i in range(60)],
        NOW,
    )
    [first] = learn(session, NOW + timedelta(seconds=1), POLICY)
    row = _latest_row(session)
    written = (row.prompt_factor_ppm, row.completion_factor_ppm, row.segment_factors)
    # more calls at the same ratio: their ratio of sums differs by a few ppm (whole tokens), below
    # the reversion step, so the same version; its statistics are refreshed, its factors are not
    later = NOW + timedelta(minutes=5)
    _settle(
        session,
        [_call(rng, f"{unique_id}-b{i}", BOOK, (1_200_000, 1_100_000)) for i in range(60)],
        later,
    )
    [again] = learn(session, later + timedelta(seconds=1), POLICY)
    assert (again.version, again.new_version) == (first.version, False)
    assert again.prompt.factor_ppm != first.prompt.factor_ppm  # what the new fit would charge
    session.expire_all()
    row = _latest_row(session)
    assert (row.prompt_factor_ppm, row.completion_factor_ppm, row.segment_factors) == written
    assert row.prompt_samples > first.prompt.fit.samples  # type: ignore[union-attr]


def _latest_row(session: Session) -> CalibrationFactor:
    return session.execute(
        select(CalibrationFactor)
        .where(CalibrationFactor.model == MODEL, CalibrationFactor.provider == PROVIDER)
        .order_by(CalibrationFactor.version.desc())
        .limit(1)
    ).scalar_one()


def test_beat_runs_the_calibration() -> None:
    import worker.service.tasks  # noqa: F401  (registers the tasks)
    from worker.service.app import app

    assert app.conf.beat_schedule["calibrate"]["task"] == "billing.calibrate"
    assert "billing.calibrate" in app.tasks
