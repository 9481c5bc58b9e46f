"""Imports into the stored book, on SQLite and PostgreSQL: merged, never unpricing, history kept."""

from __future__ import annotations

from contextlib import nullcontext
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from freezegun import freeze_time
from ledger.factories import make_meta, settled
from sqlalchemy.orm import Session

from worker.consumer.pricing import PriceSource, effective_book, import_prices, stored_prices
from worker.core.errors import PriceBookError
from worker.core.prices import Layer, Price
from worker.core.prices.litellm import prices_from_litellm
from worker.core.prices.toml_book import prices_from_toml
from worker.core.result import Usage
from worker.ledger.balances import balance
from worker.ledger.operations import apply_result, hold

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
LATER = NOW + timedelta(minutes=5)
ONE_ROW = (
    '{"gpt-4o": {"mode": "chat", "litellm_provider": "openai", "input_cost_per_token": 2e-06,'
    ' "output_cost_per_token": 8e-06, "max_input_tokens": 128000, "max_output_tokens": 16384}}'
)
MILLION = Usage(1_000_000, 1_000_000)


def test_a_one_row_import_reprices_that_model_only_and_unprices_nothing(session: Session) -> None:
    before = effective_book(session)
    priced = [p.model for p in before.prices if p.tier == "default" and p.provider is None]
    rows = prices_from_litellm(ONE_ROW, "one.json", LATER).prices
    plan = import_prices(session, rows, now=NOW)
    assert (len(plan.new), plan.present) == (1, 0)
    after = effective_book(session)
    for model in priced:  # every model the bundled book priced is still priced
        assert after.price_for(model, LATER) is not None, model
    # gpt-4o: 2.50 / 10 until the import's start, 2 / 8 from then on
    assert after.charge("gpt-4o", MILLION, LATER - timedelta(microseconds=1)) == 12_500_000
    assert after.charge("gpt-4o", MILLION, LATER) == 10_000_000
    assert after.charge("gpt-4.1", MILLION, LATER) == 2_000_000 + 8_000_000
    # and the worker's source sees the same book
    source = PriceSource(lambda: nullcontext(session))  # type: ignore[arg-type, return-value]
    assert source.current().charge("gpt-4o", MILLION, LATER) == 10_000_000
    assert source.current().charge("o3-mini", MILLION, LATER) == 1_100_000 + 4_400_000


def test_rows_dated_in_the_past_need_a_recorded_reason(session: Session) -> None:
    past = prices_from_litellm(ONE_ROW, "one.json", NOW - timedelta(days=1)).prices
    with pytest.raises(PriceBookError, match=r"before now.*--backdate --reason"):
        import_prices(session, past, now=NOW)
    assert stored_prices(session) == []
    with pytest.raises(PriceBookError, match="reason"):
        import_prices(session, past, now=NOW, backdate_reason="  ")
    plan = import_prices(session, past, now=NOW, backdate_reason="invoice 42: list price since May")
    assert plan.backdated == 1
    (stored,) = stored_prices(session)
    assert stored.reason == "invoice 42: list price since May"
    assert stored.source == "one.json gpt-4o"


def test_history_never_changes_and_a_repeated_import_is_a_no_op(session: Session) -> None:
    rows = prices_from_litellm(ONE_ROW, "one.json", LATER).prices
    import_prices(session, rows, now=NOW)
    assert import_prices(session, rows, now=NOW).present == 1
    changed = prices_from_litellm(ONE_ROW.replace("8e-06", "9e-06"), "one.json", LATER).prices
    with pytest.raises(PriceBookError, match="history"):
        import_prices(session, changed, now=NOW)
    assert [p.output for p in stored_prices(session)] == [Decimal(8)]


def test_an_alias_that_would_make_a_name_ambiguous_is_refused(session: Session) -> None:
    text = '[[price]]\nmodel = "my-model"\naliases = ["gpt-4o"]\ninput = "1"\noutput = "1"\n'
    rows = prices_from_toml(text, "a.toml", default_from=LATER)
    with pytest.raises(PriceBookError, match="ambiguous name: 'gpt-4o'"):
        import_prices(session, rows, now=NOW)
    assert stored_prices(session) == []


def test_every_field_round_trips_exactly(session: Session) -> None:
    row = Price(
        model="m-\u00e9",
        effective_from=LATER,
        input=Decimal("0.000000000001"),
        cached_input=Decimal("0.5"),
        output=Decimal("10000"),
        cache_write=Decimal("3.75"),
        reasoning=Decimal("20"),
        audio_input=Decimal("40"),
        audio_output=Decimal("80"),
        tier="priority",
        provider="azure",
        layer=Layer.LIST,
        aliases=("m-a", "m-b"),
        snapshots=True,
        until=LATER + timedelta(days=30),
        max_input_tokens=1_048_576,
        max_output_tokens=65_536,
        prompt_limit=200_000,
        source="hand",
    )
    import_prices(session, [row], now=NOW)
    (back,) = stored_prices(session)
    assert back == row and back.values() == row.values() and back.source == "hand"
    assert str(back.input) == "1E-12"


def test_a_price_above_the_bound_never_reaches_the_table() -> None:
    with pytest.raises(PriceBookError, match="above the bound of 10000"):
        prices_from_litellm(ONE_ROW.replace("2e-06", "1E+30"), "big.json", LATER)


def test_a_price_change_at_midnight_bills_each_request_by_its_created_at(session: Session) -> None:
    midnight = datetime(2025, 6, 2, tzinfo=UTC)
    old = Price("m-large", datetime(2025, 1, 1, tzinfo=UTC), Decimal(1), Decimal("0.5"), Decimal(2))
    new = Price("m-large", midnight, Decimal(3), Decimal("1.5"), Decimal(6))
    import_prices(session, [old, new], now=NOW, backdate_reason="test history")
    book = effective_book(session)
    usage = Usage(prompt_tokens=1_000, completion_tokens=500, cached_tokens=200)
    before, after = midnight - timedelta(microseconds=1), midnight
    # Both results arrive after midnight: the price is the one in force when each request was made.
    with freeze_time(midnight + timedelta(minutes=5)):
        now = datetime.now(UTC)
        for request_id, created_at in (("late-night", before), ("midnight", after)):
            charge = book.charge("m-large", usage, created_at)
            assert charge is not None
            hold(session, make_meta(request_id, created_at=created_at), now=now)
            result = settled(request_id, charge=int(charge), usage=usage, created_at=created_at)
            assert apply_result(session, result, now=now, grace=timedelta(hours=1)) == "settled"
    # 800 x 1 + 200 x 0.5 + 500 x 2 = 1900; 800 x 3 + 200 x 1.5 + 500 x 6 = 5700
    assert balance(session, "acct-1").charged == 1900 + 5700
