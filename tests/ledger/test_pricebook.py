"""The price book in the database, and effective dating through to the ledger."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from freezegun import freeze_time
from sqlalchemy.orm import Session

from ledger.factories import make_meta, settled
from worker.errors import LedgerError
from worker.ledger.balances import balance
from worker.ledger.operations import apply_result, hold
from worker.ledger.pricebook import import_prices, list_prices, price_book
from worker.prices import Price, load_price_book
from worker.result import Usage

MIDNIGHT = datetime(2025, 6, 2, tzinfo=UTC)
OLD = Price("m*", datetime(2025, 1, 1, tzinfo=UTC), Decimal("1.00"), Decimal("0.50"), Decimal("2"))
NEW = Price("m*", MIDNIGHT, Decimal("3.00"), Decimal("1.50"), Decimal("6"))


def test_import_is_idempotent_and_prices_are_history(session: Session) -> None:
    assert price_book(session) is None
    assert import_prices(session, [OLD, NEW]) == 2
    assert import_prices(session, [OLD, NEW]) == 0
    same_value = Price(
        OLD.pattern, OLD.effective_from, Decimal("1.0"), OLD.cached_input, OLD.output
    )
    assert import_prices(session, [same_value]) == 0
    changed = Price(OLD.pattern, OLD.effective_from, Decimal("1.01"), OLD.cached_input, OLD.output)
    with pytest.raises(LedgerError, match="history"):
        import_prices(session, [changed])
    assert list_prices(session) == [OLD, NEW]


def test_the_bundled_book_round_trips_exactly(session: Session) -> None:
    bundled = load_price_book().prices
    assert import_prices(session, bundled) == len(bundled)
    assert sorted(list_prices(session), key=repr) == sorted(bundled, key=repr)


def test_a_price_change_at_midnight_bills_each_request_by_its_created_at(session: Session) -> None:
    import_prices(session, [OLD, NEW])
    book = price_book(session)
    assert book is not None
    usage = Usage(prompt_tokens=1_000, completion_tokens=500, cached_tokens=200)
    before, after = MIDNIGHT - timedelta(microseconds=1), MIDNIGHT
    # Both results arrive after midnight: the price is the one in force when each request was made.
    with freeze_time(MIDNIGHT + timedelta(minutes=5)):
        now = datetime.now(UTC)
        for request_id, created_at in (("late-night", before), ("midnight", after)):
            charge = book.charge("m-large", usage, created_at)
            assert charge is not None
            hold(session, make_meta(request_id, created_at=created_at), now=now)
            result = settled(request_id, charge=int(charge), usage=usage, created_at=created_at)
            assert apply_result(session, result, now=now, grace=timedelta(hours=1)) == "settled"
    old_charge = 800 * 1 + 200 * Decimal("0.5") + 500 * 2
    new_charge = 800 * 3 + 200 * Decimal("1.5") + 500 * 6
    assert balance(session, "acct-1").charged == int(old_charge + new_charge)
