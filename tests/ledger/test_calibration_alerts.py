"""Calibration's alerts end to end on both engines: calls of known per-segment ratios (with per-call
noise) are settled, learnt, read by the alert reader and turned into messages. The oracle is the
simulation: the same per-segment ratios under another traffic mix are a recorded ``mix_change``
that never pages; one segment's ratio moved is a ``tokenizer_change`` page; a model under the
minimum sample is one digest line, not repeated while it stays so."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from worker.alerts.paging import Plan, messages
from worker.alerts.picture import Finding
from worker.alerts.sources import calibration
from worker.core.money import Micros
from worker.core.prices import load_price_book
from worker.core.reconcile import reconcile_response
from worker.core.request import RequestMeta
from worker.core.result import Result
from worker.ledger.calibration import CalibrationPolicy, learn
from worker.ledger.operations import apply_result, hold

MODEL, PROVIDER = "claude-haiku-4-5", "anthropic"
NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
GRACE = timedelta(hours=1)
POLICY = CalibrationPolicy(window=timedelta(hours=1), min_samples=20)
BOOK = load_price_book()
LATIN = [
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
CHINESE = ["我的", "账户", "发票", "被", "支付", "了", "两次", "请", "退还", "其中", "一笔", "今天"]
# what the provider counts per segment, as a share of the estimate (the known truth)
RATIOS = {"latin": 1.05, "chinese": 1.30, "json": 0.90}


def _text(rng: random.Random, segment: str, low: int, high: int) -> str:
    if segment == "chinese":
        return "".join(rng.choice(CHINESE) for _ in range(rng.randint(low, high)))
    return " ".join(rng.choice(LATIN) for _ in range(rng.randint(low, high)))


def _call(
    rng: random.Random, request_id: str, segment: str, ratio: float
) -> tuple[RequestMeta, Result]:
    """A call of ``segment`` whose usage reports its estimate times ``ratio`` ± 3 %."""
    prompt = _text(rng, segment, 30, 300)
    if segment == "json":
        answer = (
            '{"refund": '
            + str(rng.randint(1, 999))
            + ', "note": "'
            + _text(rng, "latin", 5, 40)
            + '"}'
        )
    else:
        answer = _text(rng, segment, 20, 200)
    meta = RequestMeta(
        request_id, "acct-cal", MODEL, False, True, Micros(10**7), NOW - timedelta(seconds=5),
        messages=({"role": "user", "content": prompt},), provider=PROVIDER,
    )  # fmt: skip
    body: dict[str, Any] = {
        "id": "chatcmpl-" + request_id, "object": "chat.completion", "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": answer},
                     "finish_reason": "stop"}],
    }  # fmt: skip
    guess = reconcile_response(meta, 200, body, BOOK).estimate
    assert guess.segment == segment  # the simulation makes the segment it means
    p = round(guess.prompt_tokens * ratio * (1 + rng.uniform(-0.03, 0.03)))
    c = round(guess.completion_tokens * ratio * (1 + rng.uniform(-0.03, 0.03)))
    body["usage"] = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
    return meta, reconcile_response(meta, 200, body, BOOK)


def _traffic(
    session: Session, rng: random.Random, tag: str, mix: dict[str, int], at: datetime,
    ratios: dict[str, float] = RATIOS,
) -> None:  # fmt: skip
    for segment, count in mix.items():
        for i in range(count):
            meta, result = _call(rng, f"{tag}-{segment}-{i}", segment, ratios[segment])
            hold(session, meta, now=at)
            assert apply_result(session, result, now=at, grace=GRACE) == "settled"


def _findings(session: Session, at: datetime) -> list[Finding]:
    return calibration(session, at, at + timedelta(minutes=1), None)  # type: ignore[arg-type]


def _sent(findings: list[Finding], at: datetime) -> list[str]:
    """The messages the findings make in their alert window: ``page`` or ``digest``."""
    window = (at, at + timedelta(minutes=1))
    plan = Plan(timedelta(minutes=1), [window], [window], [window])
    return [alert.fields["severity"] for alert in messages(plan, findings, {})]


def test_a_mix_shift_is_recorded_and_a_tokenizer_change_pages(
    session: Session, unique_id: str
) -> None:
    rng = random.Random(50)
    _traffic(session, rng, f"{unique_id}-a", {"latin": 90, "chinese": 30, "json": 30}, NOW)
    [first] = learn(session, NOW + timedelta(seconds=1), POLICY)
    assert (first.version, first.cause) == (1, "first")
    assert not _findings(session, NOW)

    # the same per-segment ratios, traffic shifted toward Chinese: the pooled factor moves (the
    # truth: about +9 %), no segment does
    mixed = NOW + timedelta(hours=2)
    _traffic(session, rng, f"{unique_id}-b", {"latin": 30, "chinese": 90, "json": 30}, mixed)
    [second] = learn(session, mixed + timedelta(seconds=1), POLICY)
    assert (second.version, second.new_version, second.cause, second.drifted) == (
        2, True, "mix", False,
    )  # fmt: skip
    assert second.prompt.factor_ppm > first.prompt.factor_ppm + 30_000
    assert {m.segment for m in second.moves} == {"*"}
    [found] = _findings(session, mixed)
    assert (found.reason, found.pages) == ("mix_change", False)
    assert "mix of segments changed" in found.note
    assert _sent([found], mixed) == ["digest"]

    # the same mix again, at a ratio 0.25 % higher everywhere: noise-sized, never a drift (a factor
    # of a small segment may still move by the 0.5 % reversion step: a ``refit``, no finding)
    again = mixed + timedelta(hours=2)
    nudged = {s: r * 1.0025 for s, r in RATIOS.items()}
    _traffic(
        session, rng, f"{unique_id}-c", {"latin": 30, "chinese": 90, "json": 30}, again, nudged
    )
    [third] = learn(session, again + timedelta(seconds=1), POLICY)
    assert not third.drifted and third.cause in ("mix", "refit") and not third.moves
    assert not _findings(session, again)

    # the provider's tokenizer now counts Chinese 15 % higher; latin and JSON as before
    changed = again + timedelta(hours=2)
    moved = {**RATIOS, "chinese": RATIOS["chinese"] * 1.15}
    _traffic(
        session, rng, f"{unique_id}-d", {"latin": 30, "chinese": 90, "json": 30}, changed, moved
    )
    [fourth] = learn(session, changed + timedelta(seconds=1), POLICY)
    assert (fourth.version, fourth.cause, fourth.drifted) == (third.version + 1, "tokenizer", True)
    assert {(m.direction, m.segment) for m in fourth.moves} == {
        ("prompt", "chinese"), ("completion", "chinese"),
    }  # fmt: skip
    [page] = _findings(session, changed)
    assert (page.reason, page.pages) == ("tokenizer_change", True)
    assert page.facts["cause"] == "tokenizer" and len(page.facts["moves"]) == 2
    assert "prompt chinese" in page.note and "token counting changed" in page.note
    assert _sent([page], changed) == ["page"]


def test_a_model_with_too_few_calls_is_reported_once(session: Session, unique_id: str) -> None:
    rng = random.Random(51)
    _traffic(session, rng, f"{unique_id}-a", {"latin": 8}, NOW)
    [first] = learn(session, NOW + timedelta(seconds=1), POLICY)
    assert (first.version, first.cause, first.prompt.factor_ppm) == (1, "too_few_calls", 1_000_000)
    [found] = _findings(session, NOW)
    assert (found.reason, found.pages, found.model) == ("too_few_calls", False, MODEL)
    assert "fewer than calibration needs" in found.note
    assert _sent([found], NOW) == ["digest"]
    # more calls, still too few, learnt many times: the same version, nothing new to report
    for k in range(1, 4):
        at = NOW + timedelta(minutes=10 * k)
        _traffic(session, rng, f"{unique_id}-b{k}", {"latin": 3}, at)
        [again] = learn(session, at + timedelta(seconds=1), POLICY)
        assert (again.version, again.new_version) == (1, False)
        assert not _findings(session, at)
    # enough calls: calibrated, a new version and no finding (nothing wrong)
    at = NOW + timedelta(minutes=50)
    _traffic(session, rng, f"{unique_id}-c", {"latin": 30}, at)
    [enough] = learn(session, at + timedelta(seconds=1), POLICY)
    assert (enough.version, enough.new_version, enough.cause) == (2, True, "refit")
    assert abs(enough.prompt.factor_ppm - 1_050_000) < 20_000
    assert not _findings(session, at)
