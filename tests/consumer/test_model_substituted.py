"""The model served is the model billed (``worker.core.substitution``): the rule through the reconciler,
streamed and not, then through the consumer and the sweeper into the ledger on both engines."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from models import Anomaly, Failure, Reservation, UsageRecord
from models.anomalies import AnomalyKind
from worker.config import Settings
from worker.consumer.consumer import Consumer
from worker.consumer.sweeper import Sweeper
from worker.contract.publisher import Publisher
from worker.core.anomalies import classify
from worker.core.prices import PriceBook, load_price_book, prices_from_toml
from worker.core.reconcile import reconcile_response, reconcile_stream
from worker.core.request import RequestMeta
from worker.core.result import Outcome, Reason, Result, UsageSource
from worker.core.substitution import Billed, billed_model, unusable_name
from worker.ledger.balances import balance, ledger_is_balanced

AT = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
# USD per 1M tokens = micro-USD per token; the usage below is 1,000 prompt and 500 completion tokens.
BOOK = PriceBook(
    prices_from_toml(
        """
[[price]]
model = "gpt-4o-mini"
input = "0.15"
output = "0.60"
[[price]]
model = "gpt-4o"
input = "2.50"
output = "10.00"
[[price]]
model = "gpt-4o-2024-08-06"
input = "2.50"
output = "10.00"
[[price]]
model = "gpt-4o-2024-05-13"
input = "5.00"
output = "15.00"
[[price]]
model = "gpt-4o"
tier = "flex"
input = "1.25"
output = "5.00"
[[price]]
model = "claude-sonnet-4-5"
snapshots = true
aliases = ["claude-sonnet-4-5-latest"]
input = "3.00"
output = "15.00"
""",
        "substitution test book",
    )
)
USAGE = {"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500}
MINI = 1000 * 0.15 + 500 * 0.60  # 450 micro-USD
FOUR_O = 1000 * 2.50 + 500 * 10.00  # 7,500
MAY = 1000 * 5.00 + 500 * 15.00  # 12,500
SONNET = 1000 * 3.00 + 500 * 15.00  # 10,500


def meta(model: str, *, stream: bool = True, provider: str | None = "openai") -> RequestMeta:
    return RequestMeta(
        request_id=f"req-{uuid.uuid4().hex[:12]}",
        account_id="acct-substitution",
        model=model,
        stream=stream,
        include_usage=True,
        reserved_micros=1000,  # type: ignore[arg-type]
        created_at=AT,
        messages=({"role": "user", "content": "Say hello."},),
        provider=provider,
    )


def head(served: str | None, tier: str | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {"id": "chatcmpl-sub", "created": 1765022400}
    if served is not None:
        found["model"] = served
    if tier is not None:
        found["service_tier"] = tier
    return found


def stream_of(served: str | None, tier: str | None = None) -> bytes:
    chunk = {**head(served, tier), "object": "chat.completion.chunk"}
    frames = [
        {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hello."}}]},
        {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**chunk, "choices": [], "usage": USAGE},
    ]
    # json, not orjson: a lone surrogate in a name is sent as its escape, as Python's clients do
    events = "".join(f"data: {json.dumps(f)}\n\n" for f in frames)
    return events.encode() + b"data: [DONE]\n\n"


def body_of(served: str | None, tier: str | None = None) -> bytes:
    message = {"role": "assistant", "content": "Hello."}
    return orjson.dumps(
        {
            **head(served, tier),
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": USAGE,
        }
    )


def both(requested: str, served: str | None, **options: Any) -> tuple[Result, Result]:
    """The call streamed and its non-streamed twin, reconciled with the test's book."""
    tier = options.pop("tier", None)
    streamed = reconcile_stream(meta(requested, **options), stream_of(served, tier), BOOK)
    plain = reconcile_response(
        meta(requested, stream=False, **options), 200, body_of(served, tier), BOOK
    )
    return streamed, plain


def billed(result: Result) -> tuple[str, Any, Any, bool]:
    return (
        result.model,
        result.recorded,
        result.charge_micros,
        "model_substituted" in result.anomalies,
    )


def detail(result: Result, requested: str) -> str | None:
    return classify(result, requested=requested).get(AnomalyKind.MODEL_SUBSTITUTED)


SETTLED = (Outcome.SETTLED, None)
UNPRICED = (Outcome.UNSETTLED, Reason.UNPRICED)


# --- the rule --------------------------------------------------------------------------------


@pytest.mark.parametrize("served", [None, "gpt-4o"])
def test_no_model_or_the_requested_name_is_the_requested_model(served: str | None) -> None:
    for result in both("gpt-4o", served):
        assert billed(result) == ("gpt-4o", SETTLED, round(FOUR_O), False)
        assert detail(result, "gpt-4o") is None


@pytest.mark.parametrize(
    ("requested", "served", "charge"),
    [
        # OpenAI answers the dated snapshot the alias points at; the book has a row for that name
        # with the same prices (as the bundled LiteLLM list does): the same model.
        ("gpt-4o", "gpt-4o-2024-08-06", FOUR_O),
        ("gpt-4o-2024-08-06", "gpt-4o", FOUR_O),
        # The same row: a dated snapshot of rows that say snapshots = true, an alias.
        ("claude-sonnet-4-5", "claude-sonnet-4-5-2025-09-29", SONNET),
        ("claude-sonnet-4-5", "claude-sonnet-4-5-latest", SONNET),
    ],
)
def test_a_name_the_book_prices_the_same_is_the_requested_model(
    requested: str, served: str, charge: float
) -> None:
    for result in both(requested, served):
        assert billed(result) == (requested, SETTLED, round(charge), False)
        assert detail(result, requested) is None


def test_a_pricier_fallback_is_charged_at_its_own_price_with_the_anomaly() -> None:
    streamed, plain = both("gpt-4o-mini", "gpt-4o")
    for result in (streamed, plain):
        # 7,500 micro-USD, not gpt-4o-mini's 450
        assert billed(result) == ("gpt-4o", SETTLED, round(FOUR_O), True)
        assert result.usage_source is UsageSource.REPORTED
        # the exposure too: the estimate priced at the served model
        exposure = BOOK.charge("gpt-4o", result.estimate.as_usage(), AT, provider="openai")
        assert exposure is not None and result.exposure_micros == exposure
        assert detail(result, "gpt-4o-mini") == "requested gpt-4o-mini, served gpt-4o"
    assert streamed.to_json()["model"] == "gpt-4o"


def test_the_streaming_filter_is_checked_against_the_model_requested() -> None:
    """``non_streamable_stream`` says the gateway's filter let a stream through: the filter saw the
    request's model, not the one the upstream answered with."""
    streamed, _ = both("gpt-4o", "gpt-4o-mini")
    assert streamed.model == "gpt-4o-mini"
    flagged = classify(streamed, requested="gpt-4o", non_streamable=("gpt-4o",))
    assert flagged[AnomalyKind.NON_STREAMABLE_STREAM] == (
        "gpt-4o is configured as not streamable, yet was streamed"
    )
    served_only = classify(streamed, requested="gpt-4o", non_streamable=("gpt-4o-mini",))
    assert AnomalyKind.NON_STREAMABLE_STREAM not in served_only


@pytest.mark.parametrize(
    ("requested", "served", "charge"),
    [
        ("gpt-4o", "gpt-4o-mini", MINI),  # a cheaper fallback is the served one's price too
        ("gpt-4o", "gpt-4o-2024-05-13", MAY),  # a snapshot at another price is another model
        ("gpt-4o-2024-08-06", "gpt-4o-2024-05-13", MAY),
        # A request name the book does not know (a gateway's own alias): the served model's price.
        ("fast", "gpt-4o-mini", MINI),
    ],
)
def test_a_model_priced_otherwise_is_a_substitution_at_its_own_price(
    requested: str, served: str, charge: float
) -> None:
    for result in both(requested, served):
        assert billed(result) == (served, SETTLED, round(charge), True)
        assert detail(result, requested) == f"requested {requested}, served {served}"


@pytest.mark.parametrize(
    "served",
    [
        "gpt-4o-fallback-preview",  # a name no row has, ending the requested one's "-…"
        "gpt-4o-2024-11-20",  # a new snapshot gpt-4o's rows do not name
    ],
)
def test_a_served_snapshot_the_book_does_not_know_is_billed_as_requested(served: str) -> None:
    """Issue 49: the provider bills the model requested; a served name the book does not know,
    which is the requested name and a suffix, is priced as requested, flagged ``model_substituted``."""
    for result in both("gpt-4o", served):
        assert billed(result) == ("gpt-4o", SETTLED, round(FOUR_O), True)


@pytest.mark.parametrize(
    "served",
    [
        "GPT-4o",  # no case folding: the book prices no such name
        "openai/gpt-4o",  # the book prices no prefixes
    ],
)
def test_an_unpriced_served_model_is_unpriced_never_the_requested_price(served: str) -> None:
    for result in both("gpt-4o", served):
        assert billed(result) == (served, UNPRICED, None, True)
        assert result.exposure_micros is None and result.unpriced
        assert detail(result, "gpt-4o") == f"requested gpt-4o, served {served}, which has no price"


def test_two_names_the_book_does_not_price_are_a_substitution() -> None:
    for result in both("my-alias", "my-alias-2026-01-01"):
        assert billed(result) == ("my-alias-2026-01-01", UNPRICED, None, True)


@pytest.mark.parametrize(
    ("requested", "provider", "served", "expected"),
    [
        # The gateway names the model with the call's provider as a prefix; the upstream answers
        # the bare name, or a name priced as it: a spelling, not a fallback.
        ("openai/gpt-4o", "openai", "gpt-4o", ("gpt-4o", SETTLED, round(FOUR_O), False)),
        (
            "openai/gpt-4o",
            "openai",
            "gpt-4o-2024-08-06",
            ("gpt-4o-2024-08-06", SETTLED, round(FOUR_O), False),
        ),
        ("openai/gpt-4o", "openai", "gpt-4o-mini", ("gpt-4o-mini", SETTLED, round(MINI), True)),
        # another provider's prefix, or no provider: the prefix says nothing
        ("openai/gpt-4o", "azure", "gpt-4o", ("gpt-4o", SETTLED, round(FOUR_O), True)),
        ("openai/gpt-4o", None, "gpt-4o", ("gpt-4o", SETTLED, round(FOUR_O), True)),
        # unpriced either way: the served name, and no anomaly for the spelling
        ("openai/o9", "openai", "o9", ("o9", UNPRICED, None, False)),
    ],
)
def test_the_provider_prefix_of_the_request(
    requested: str, provider: str | None, served: str, expected: tuple[Any, ...]
) -> None:
    for result in both(requested, served, provider=provider):
        assert billed(result) == expected


def test_the_service_tier_decides_too() -> None:
    # gpt-4o and its snapshot cost the same on the default tier; only gpt-4o has a flex row.
    for result in both("gpt-4o", "gpt-4o-2024-08-06", tier="default"):
        assert billed(result) == ("gpt-4o", SETTLED, round(FOUR_O), False)
    for result in both("gpt-4o", "gpt-4o", tier="flex"):
        assert billed(result) == ("gpt-4o", SETTLED, round(FOUR_O / 2), False)
    for result in both("gpt-4o", "gpt-4o-2024-08-06", tier="flex"):
        assert billed(result) == ("gpt-4o-2024-08-06", UNPRICED, None, True)


@pytest.mark.parametrize(
    ("served", "shown"),
    [
        ("gpt-4o\x1b[31m", "*'gpt-4o\\x1b[31m'"),
        (" gpt-4o", "*' gpt-4o'"),  # never stripped into a name the book prices
        ("gpt-4o\ud800", "*'gpt-4o\\ud800'"),
        ("g" * 300, "*'" + "g" * 197 + "\u2026"),
    ],
)
def test_a_served_name_no_call_can_have_is_unpriced_and_shown_safely(
    served: str, shown: str
) -> None:
    assert unusable_name(served) == shown
    assert len(shown) <= 200 and shown.isprintable()
    assert BOOK.price_for(shown, AT) is None and load_price_book().price_for(shown, AT) is None
    assert billed_model("gpt-4o", served, BOOK, AT) == Billed(shown, substituted=True)
    if "\ud800" not in served:  # the assembler reads a lone surrogate escape as U+FFFD
        for result in both("gpt-4o", served):
            assert billed(result) == (shown, UNPRICED, None, True)
            assert (
                detail(result, "gpt-4o") == f"requested gpt-4o, served {shown}, which has no price"
            )


def test_an_error_body_naming_another_model_stays_void() -> None:
    error = orjson.dumps({"model": "gpt-4o-mini", "error": {"message": "overloaded"}})
    result = reconcile_response(meta("gpt-4o", stream=False), 503, error, BOOK)
    assert result.outcome is Outcome.VOID and result.charge_micros is None


# --- into the ledger, on both engines ------------------------------------------------------

# The bundled book the consumer prices with: gpt-4o at 2.50 / 10.00, gpt-4o-mini at 0.15 / 0.60,
# gpt-4o-2024-08-06 at gpt-4o's prices.
SMALL_USAGE = {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}
GPT_4O_CHARGE = 58  # 11 * 2.50 + 3 * 10.00 = 57.5, half up
MINI_CHARGE = 3  # 11 * 0.15 + 3 * 0.60 = 3.45


@pytest.fixture
def settings(prefix: str) -> Settings:
    return Settings(
        prefix=prefix,
        batch_size=50,
        claim_idle_ms=60_000,
        sweep_idle_ms=0,
        grace_seconds=3600,
        hash_salt="test-fingerprint-key",
    )


def entry(account: str, model: str, stream: bool = True) -> dict[str, Any]:
    return {
        "request_id": f"req-{uuid.uuid4().hex[:12]}",
        "account_id": account,
        "model": model,
        "stream": stream,
        "reserved_micros": 20,
        "created_at": "2026-11-30T00:00:00Z",
        "messages": [{"role": "user", "content": "Say hello."}],
        "stream_options": {"include_usage": True},
        "provider": "openai",
    }


def events(served: str) -> list[bytes]:
    chunk = {"id": "chatcmpl-sub", "object": "chat.completion.chunk", "model": served}
    frames = [
        {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi."}}]},
        {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**chunk, "choices": [], "usage": SMALL_USAGE},
    ]
    return [b"data: " + orjson.dumps(f) + b"\n\n" for f in frames] + [b"data: [DONE]\n\n"]


def response(served: str) -> bytes:
    message = {"role": "assistant", "content": "Hi."}
    return orjson.dumps(
        {
            "id": "chatcmpl-sub",
            "object": "chat.completion",
            "model": served,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": SMALL_USAGE,
        }
    )


def play(publisher: Publisher, m: dict[str, Any], served: str, close: bool = True) -> None:
    with publisher.batch():
        publisher.open(m)
        if m["stream"]:
            publisher.frames(m["request_id"], events(served))
        else:
            publisher.response(m["request_id"], 200, response(served))
        if close:
            publisher.close(m["request_id"])


def drain(consumer: Consumer) -> None:
    for _ in range(5):
        if not consumer.poll(block_ms=None).read:
            return


def booked(sessions: sessionmaker[Session], request_id: str) -> tuple[Any, ...]:
    """(reservation status and model, failure reason, usage record model and charge, anomalies)."""
    with sessions() as s:
        row = s.execute(
            select(
                Reservation.id,
                Reservation.status,
                Reservation.model,
                Failure.reason,
                UsageRecord.model,
                UsageRecord.charge_micros,
            )
            .outerjoin(Failure, Failure.reservation_id == Reservation.id)
            .outerjoin(UsageRecord, UsageRecord.reservation_id == Reservation.id)
            .where(Reservation.request_id == request_id)
        ).one()
        kinds = dict(
            s.execute(
                select(Anomaly.kind, Anomaly.detail).where(Anomaly.reservation_id == row[0])
            ).all()
        )
    return (*row[1:], kinds)


def test_the_consumer_and_the_sweeper_bill_the_served_model(
    consumer: Consumer, publisher: Publisher, sessions: sessionmaker[Session], account: str
) -> None:
    fallback = entry(account, "gpt-4o-mini")  # priced: the batched path
    fallback_plain = entry(account, "gpt-4o-mini", stream=False)
    unpriced = entry(account, "gpt-4o")  # unpriced: the call-by-call path
    snapshot = entry(account, "gpt-4o")
    swept = entry(account, "gpt-4o-mini")  # its close never comes: the sweeper settles it
    play(publisher, fallback, "gpt-4o")
    play(publisher, fallback_plain, "gpt-4o")
    play(publisher, unpriced, "o9-fallback-preview")  # not the requested name and a suffix
    play(publisher, snapshot, "gpt-4o-2024-08-06")
    play(publisher, swept, "gpt-4o", close=False)
    drain(consumer)
    time.sleep(0.01)
    Sweeper(consumer).run()

    above = f"charge {GPT_4O_CHARGE} micros above the hold of 20"
    substituted = "requested gpt-4o-mini, served gpt-4o"
    no_close = {"no_close": "hold of 20 micros finalized by the sweeper: no close"}
    for m, more in ((fallback, {}), (fallback_plain, {}), (swept, no_close)):
        # gpt-4o's price, not gpt-4o-mini's (3): the reservation keeps the model requested
        assert booked(sessions, m["request_id"]) == (
            "settled", "gpt-4o-mini", None, "gpt-4o", GPT_4O_CHARGE,
            {"model_substituted": substituted, "charge_above_hold": above, **more},
        )  # fmt: skip
    assert GPT_4O_CHARGE != MINI_CHARGE
    status, model, reason, billed_as, charge, kinds = booked(sessions, unpriced["request_id"])
    assert (status, model, reason, billed_as, charge) == (
        "unsettled",
        "gpt-4o",
        "unpriced",
        None,
        None,
    )
    assert kinds["model_substituted"] == (
        "requested gpt-4o, served o9-fallback-preview, which has no price"
    )
    assert booked(sessions, snapshot["request_id"]) == (
        "settled", "gpt-4o", None, "gpt-4o", GPT_4O_CHARGE, {"charge_above_hold": above},
    )  # fmt: skip
    with sessions() as s:
        money = balance(s, account)
        assert ledger_is_balanced(s)
    assert (money.charged, money.held) == (4 * GPT_4O_CHARGE, 20)
