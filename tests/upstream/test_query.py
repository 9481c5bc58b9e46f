"""Both sides read from the database on both engines: the ledger's calls by outcome and route, the
exports summed per day (Anthropic without request counts), costs per model for the margin."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ledger.factories import make_meta, settled, unsettled, voided
from sqlalchemy.orm import Session

from worker.core.prices import load_price_book
from worker.core.result import Estimate, Usage
from worker.ledger.operations import apply_result, hold
from worker.upstream.exports import read_export
from worker.upstream.query import reconciliation
from worker.upstream.routes import record_routes
from worker.upstream.store import import_export

FIXTURES = Path(__file__).parent.parent / "fixtures" / "upstream"
JULY = datetime(2025, 7, 1, 9, tzinfo=UTC)
AUGUST = datetime(2025, 8, 1, 9, tzinfo=UTC)
BOOK = load_price_book()


def call(session: Session, result, provider: str, key: str | None) -> None:  # type: ignore[no-untyped-def]
    meta = replace(
        make_meta(result.request_id, model=result.model, created_at=result.created_at),
        provider=provider, upstream_key=key,
    )  # fmt: skip
    hold(session, meta, now=result.created_at)
    record_routes(session, [meta])
    apply_result(session, result, now=result.created_at, grace=timedelta(hours=1))


def test_both_sides_from_the_database(session: Session, unique_id: str) -> None:
    u = unique_id
    estimate = Estimate(prompt_tokens=900, completion_tokens=400, approximate=False)
    # July, openai, gpt-4o-mini on key_abc: 2 billed (2 x 1000 in, 300 out), 1 unsettled, 1 void.
    for i in range(2):
        r = settled(f"{u}-s{i}", usage=Usage(1000, 300, 800), charge=5000, created_at=JULY)
        call(session, replace(r, provider="openai"), "openai", "key_abc")
    r = unsettled(f"{u}-u", estimate=estimate, exposure=700, created_at=JULY)
    call(session, r, "openai", "key_abc")
    call(session, voided(f"{u}-v", created_at=JULY), "openai", "key_abc")
    # August, anthropic, unlabelled: one billed call of 3000 in, 400 out.
    r = settled(f"{u}-a", model="claude-sonnet-4-20250514", usage=Usage(3000, 400), charge=9000,
                created_at=AUGUST)  # fmt: skip
    call(session, replace(r, provider="anthropic"), "anthropic", None)
    for name, provider in (
        ("openai_usage_completions.json", "openai"),
        ("openai_costs.json", "openai"),
        ("anthropic_messages_usage.json", "anthropic"),
    ):
        export = read_export(provider, (FIXTURES / name).read_bytes(), name)
        import_export(session, export, name, JULY)
    since = datetime(2025, 7, 1, tzinfo=UTC)
    found = reconciliation(session.connection(), since, since + timedelta(days=62), BOOK)
    rows = {(r.day, r.provider, r.model, r.upstream_key): r for r in found.rows}
    mini = rows[("2025-07-01", "openai", "gpt-4o-mini", "key_abc")]
    assert (mini.ledger.calls, mini.ledger.billed_calls, mini.ledger.unsettled_calls,
            mini.ledger.void_calls) == (4, 2, 1, 1)  # fmt: skip
    assert (mini.ledger.input_tokens, mini.ledger.output_tokens) == (2900, 1000)
    assert (mini.ledger.charged, mini.ledger.open_exposure) == (10_000, 700)
    # the fixture's row: 5 requests, 5000 in, 1000 out
    assert (mini.leak_requests, mini.leak_input, mini.leak_output) == (1, 2100, 0)
    assert mini.confirmed_exposure == 700
    # gpt-4o has upstream usage on key_def and no call at all: every bit of it leaked
    four = rows[("2025-07-01", "openai", "gpt-4o", "*")]
    assert (four.leak_requests, four.leak_input, four.leak_output) == (2, 1200, 300)
    # the book names no Claude snapshot by a dashed date: both sides keep the id as it is
    claude = rows[("2025-08-01", "anthropic", "claude-sonnet-4-20250514", "*")]
    assert claude.upstream.requests is None and claude.leak_requests is None
    assert (claude.upstream.input_tokens, claude.leak_input, claude.over_output) == (3200, 200, 0)
    assert claude.leak_output == 100
    margins = {(m.day, m.model): m for m in found.margins}
    # gpt-4o-mini costs 60,000 + 12,346 micro-USD in the fixture (half-even); we charged 10,000
    assert (margins[("2025-07-01", "gpt-4o-mini")].upstream_cost,
            margins[("2025-07-01", "gpt-4o-mini")].margin) == (72_346, 10_000 - 72_346)  # fmt: skip
    assert margins[("2025-07-01", "gpt-4o")].upstream_cost == 6_000
    assert margins[("2025-08-01", "claude-sonnet-4-20250514")].upstream_cost is None


def test_a_substituted_call_is_matched_under_the_model_that_served_it(
    session: Session, unique_id: str
) -> None:
    """A call held for gpt-4o-mini that the upstream answered as gpt-4o (``worker.core.substitution``:
    billed at gpt-4o, the usage record names it) is the provider's gpt-4o usage, not a mini call."""
    served = replace(
        settled(f"{unique_id}-f", model="gpt-4o", usage=Usage(600, 150), charge=3000,
                created_at=JULY),
        provider="openai",
    )  # fmt: skip
    meta = replace(
        make_meta(served.request_id, model="gpt-4o-mini", created_at=JULY),
        provider="openai", upstream_key=None,
    )  # fmt: skip
    hold(session, meta, now=JULY)
    record_routes(session, [meta])
    apply_result(session, served, now=JULY, grace=timedelta(hours=1))
    name = "openai_usage_completions.json"
    import_export(session, read_export("openai", (FIXTURES / name).read_bytes(), name), name, JULY)
    since = datetime(2025, 7, 1, tzinfo=UTC)
    found = reconciliation(session.connection(), since, since + timedelta(days=1), BOOK)
    rows = {(r.day, r.provider, r.model, r.upstream_key): r for r in found.rows}
    four = rows[("2025-07-01", "openai", "gpt-4o", "*")]
    assert (four.ledger.billed_calls, four.ledger.charged) == (1, 3000)
    # the fixture's gpt-4o: 2 requests, 1200 in, 300 out; this call accounts for 1, 600, 150
    assert (four.leak_requests, four.leak_input, four.leak_output) == (1, 600, 150)
    assert all(r.ledger.calls == 0 for k, r in rows.items() if k[2] == "gpt-4o-mini")
