"""Pairing twins in the ledger (SQLite and PostgreSQL): verdicts, windows, idempotency, alerts."""

from __future__ import annotations

from datetime import timedelta

import orjson
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models import OutboxAlert, ParityPair, Reservation, UsageRecord
from worker.alerts.config import AlertConfig
from worker.alerts.messages import digest
from worker.alerts.picture import picture
from worker.alerts.sources import parity_mismatch
from worker.core.parity import drift_ppm
from worker.ledger.parity_ops import pair_twins

from .calls import BOOK, T0, fingerprint_of, meta_dict, run_call, usage

WINDOW = timedelta(hours=1)


def last_alert(session: Session) -> int:
    """The newest alert row's id (0 for none): the database is shared with tests that commit
    alerts of their own, so a test asserts on the rows after its own mark."""
    return session.scalar(select(func.max(OutboxAlert.id))) or 0


def pairs(session: Session) -> list[ParityPair]:
    return list(session.scalars(select(ParityPair).order_by(ParityPair.id)))


def messages(tag: str) -> list[dict]:
    return [{"role": "user", "content": f"Count to three, {tag}."}]


def test_twins_pair_once_with_a_match(session: Session, unique_id: str) -> None:
    mark = last_alert(session)
    msgs = messages(unique_id)
    streamed = meta_dict(stream=True, account="acct_a", messages=msgs)
    plain = meta_dict(stream=False, account="acct_b", messages=msgs, created_at=T0 + WINDOW / 2)
    run_call(session, streamed)
    run_call(session, plain)
    stored = session.scalar(
        select(Reservation.fingerprint).where(Reservation.request_id == streamed["request_id"])
    )
    assert stored == fingerprint_of(streamed) == fingerprint_of(plain)
    counts = pair_twins(session, window=WINDOW, now=T0 + WINDOW, book=BOOK)
    assert counts == {"match": 1, "mismatch": 0}
    [pair] = pairs(session)
    assert (pair.verdict, pair.mismatched, pair.outputs_identical) == ("match", None, True)
    assert pair.streamed_charge_micros == pair.plain_charge_micros == 58
    assert pair_twins(session, window=WINDOW, now=T0 + WINDOW, book=BOOK) == {
        "match": 0,
        "mismatch": 0,
    }
    assert last_alert(session) == mark


def test_a_mismatch_raises_an_alert_with_both_request_ids(session: Session, unique_id: str) -> None:
    mark = last_alert(session)
    msgs = messages(unique_id)
    streamed = meta_dict(stream=True, messages=msgs)
    plain = meta_dict(stream=False, messages=msgs)
    run_call(session, streamed, block=usage(prompt=11, completion=3))
    run_call(session, plain, block=usage(prompt=12, completion=4))
    assert pair_twins(session, window=WINDOW, now=T0, book=BOOK)["mismatch"] == 1
    [pair] = pairs(session)
    assert pair.mismatched == "prompt_tokens,completion_tokens,charge"
    # the pair is the finding; the aggregation turns it into its kind's message (no row at once)
    assert last_alert(session) == mark
    config = AlertConfig(window=timedelta(minutes=5))
    [found] = parity_mismatch(session, T0, T0 + timedelta(minutes=5), config)
    assert (found.kind, found.reason) == (
        "parity_mismatch",
        "prompt_tokens,completion_tokens,charge",
    )
    assert found.facts["streamed_request_id"] == streamed["request_id"]
    assert found.facts["plain_request_id"] == plain["request_id"]
    summary = picture("parity_mismatch", [found], T0, T0 + timedelta(hours=1))
    alert = digest(summary, [], [summary])
    assert streamed["request_id"] in alert.text and plain["request_id"] in alert.text
    body = orjson.loads(orjson.dumps(alert.payload()))
    assert body["details"][0]["plain_request_id"] == plain["request_id"]


def test_different_outputs_compare_prompt_tokens_and_rates_only(
    session: Session, unique_id: str
) -> None:
    msgs = messages(unique_id)
    run_call(session, meta_dict(stream=True, messages=msgs, seed=7, temperature=0.8), "One two.")
    run_call(
        session,
        meta_dict(stream=False, messages=msgs, seed=7, temperature=0.8),
        "One two three four.",
        usage(completion=9),
    )
    assert pair_twins(session, window=WINDOW, now=T0, book=BOOK)["match"] == 1
    assert pairs(session)[0].outputs_identical is False


def test_outside_the_window_or_not_deterministic_no_pair(session: Session, unique_id: str) -> None:
    msgs = messages(unique_id)
    run_call(session, meta_dict(stream=True, messages=msgs))
    run_call(session, meta_dict(stream=False, messages=msgs, created_at=T0 + WINDOW * 2))
    hot = messages(unique_id + "-hot")
    run_call(session, meta_dict(stream=True, messages=hot, temperature=1.0))
    run_call(session, meta_dict(stream=False, messages=hot, temperature=1.0))
    assert pair_twins(session, window=WINDOW, now=T0 + WINDOW * 2, book=BOOK) == {
        "match": 0,
        "mismatch": 0,
    }


def test_each_call_pairs_at_most_once_nearest_first(session: Session, unique_id: str) -> None:
    msgs = messages(unique_id)
    s1 = meta_dict(stream=True, messages=msgs)
    far = meta_dict(stream=False, messages=msgs, created_at=T0 + timedelta(minutes=30))
    near = meta_dict(stream=False, messages=msgs, created_at=T0 + timedelta(minutes=1))
    for data in (s1, far, near):
        run_call(session, data)
    pair_twins(session, window=WINDOW, now=T0 + WINDOW, book=BOOK)
    [pair] = pairs(session)
    plain_id = session.scalar(
        select(Reservation.id).where(Reservation.request_id == near["request_id"])
    )
    assert pair.plain_reservation_id == plain_id


def test_output_hash_and_drift_are_recorded_at_settle(session: Session, unique_id: str) -> None:
    streamed = meta_dict(stream=True, messages=messages(unique_id))
    result, effect = run_call(session, streamed, block=usage(completion=6))
    assert effect == "settled"
    row = session.scalar(
        select(UsageRecord)
        .join(Reservation, Reservation.id == UsageRecord.reservation_id)
        .where(Reservation.request_id == streamed["request_id"])
    )
    assert row is not None and row.output_hash is not None and len(row.output_hash) == 64
    estimated = result.estimate.completion_tokens
    assert row.drift_ppm == drift_ppm(6, estimated)
    plain = meta_dict(stream=False, messages=messages(unique_id + "p"))
    run_call(session, plain)
    row = session.scalar(
        select(UsageRecord)
        .join(Reservation, Reservation.id == UsageRecord.reservation_id)
        .where(Reservation.request_id == plain["request_id"])
    )
    assert row is not None and row.drift_ppm is None and row.output_hash is not None
