"""The pure matching: leakage found exactly as injected, whatever the grains, the names and the keys
(a property test with the injection as its oracle), and the rules one by one."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, date, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.core.prices import load_price_book
from worker.core.result import Usage
from worker.upstream.matching import (
    ANY_KEY,
    Ledger,
    Upstream,
    daily_leak,
    match_model,
    priced_upstream,
    reconcile,
)

BOOK = load_price_book()
# (the ledger's model name, the provider's id for it): the book's normalisation must pair them.
MODELS = (
    ("gpt-4o-mini", "gpt-4o-mini-2024-07-18"),
    ("gpt-4o", "gpt-4o-2024-08-06"),
    ("gpt-4", "gpt-4-0613"),
    ("o3", "o3-2025-04-16"),
    ("gpt-3.5-turbo", "gpt-3.5-turbo-0125"),
)
DAYS = ("2025-07-01", "2025-07-02")
KEYS = ("key_a", "key_b")

counts = st.integers(min_value=0, max_value=50)
tokens = st.integers(min_value=0, max_value=10**6)


@st.composite
def ledgers(draw: st.DrawFn) -> Ledger:
    """A grain's ledger side; at least one call (the SQL groups only calls that exist)."""
    billed, unsettled, void = draw(counts) + 1, draw(counts), draw(counts)
    return Ledger(
        calls=billed + unsettled + void, billed_calls=billed, billed_input=draw(tokens),
        billed_output=draw(tokens), charged=draw(tokens), unsettled_calls=unsettled,
        unsettled_input=draw(tokens), unsettled_output=draw(tokens), void_calls=void,
    )  # fmt: skip


@st.composite
def scenarios(draw: st.DrawFn):  # type: ignore[no-untyped-def]
    cells = draw(
        st.lists(
            st.tuples(st.sampled_from(DAYS), st.sampled_from(MODELS), st.booleans()),
            min_size=1, max_size=6, unique_by=lambda c: (c[0], c[1][0]),
        )
    )  # fmt: skip
    ledger, upstream, oracle = {}, defaultdict(Upstream), {}
    for day, (name, served), labelled in cells:
        for key in KEYS if labelled else ("",):
            led = draw(ledgers())
            ledger[(day, "openai", name, key, "default")] = led
            leak = (draw(counts), draw(tokens), draw(tokens))
            if any(leak):
                oracle[(day, name, key or ANY_KEY)] = leak
            # Unlabelled calls: the export still names the key each call went out under, so
            # their requests are split over both keys; the leak and the tokens ride on the first.
            split = led.calls if key else draw(st.integers(0, led.calls))
            shares = [(key, split)] if key else [(KEYS[0], split), (KEYS[1], led.calls - split)]
            for i, (api_key, share) in enumerate(shares):
                upstream[(day, "openai", served, api_key, "default")] += Upstream(
                    share + (leak[0] if i == 0 else 0),
                    led.input_tokens + leak[1] if i == 0 else 0,
                    0,
                    led.output_tokens + leak[2] if i == 0 else 0,
                )
    return ledger, dict(upstream), oracle


def _normalised(upstream: dict) -> dict:  # type: ignore[type-arg]
    """What ``worker.upstream.query`` does to the export's names before matching."""
    found: dict = defaultdict(Upstream)  # type: ignore[type-arg]
    for (day, provider, model, key, tier), row in upstream.items():
        from datetime import date

        found[(day, provider, match_model(BOOK, model, date.fromisoformat(day)), key, tier)] += row
    return dict(found)


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_finds_exactly_the_injected_leakage(scenario) -> None:  # type: ignore[no-untyped-def]
    ledger, upstream, oracle = scenario
    found = reconcile(ledger, _normalised(upstream), {}, BOOK)
    leaks = {
        (r.day, r.model, r.upstream_key): (r.leak_requests, r.leak_input, r.leak_output)
        for r in found.rows
        if r.leaks
    }
    assert leaks == oracle
    assert not any(r.over_requests or r.over_input or r.over_output for r in found.rows)
    assert found.not_imported == ()


def test_unlabelled_calls_sum_every_key_of_the_export() -> None:
    ledger = {
        ("2025-07-01", "openai", "gpt-4o", "", "default"): Ledger(
            calls=3, billed_calls=3, billed_input=30
        )
    }
    upstream = {
        ("2025-07-01", "openai", "gpt-4o", "key_a", "default"): Upstream(1, 10, 0, 0),
        ("2025-07-01", "openai", "gpt-4o", "key_b", "default"): Upstream(2, 20, 0, 0),
    }
    (row,) = reconcile(ledger, upstream, {}, BOOK).rows
    assert (row.upstream_key, row.upstream.requests, row.leaks) == (ANY_KEY, 3, False)


def test_labelled_calls_match_per_key_and_an_unknown_key_is_leakage() -> None:
    ledger = {
        ("2025-07-01", "openai", "gpt-4o", "key_a", "default"): Ledger(
            calls=1, billed_calls=1, billed_input=10
        )
    }
    upstream = {
        ("2025-07-01", "openai", "gpt-4o", "key_a", "default"): Upstream(1, 10, 0, 0),
        ("2025-07-01", "openai", "gpt-4o", "key_z", "default"): priced_upstream(
            BOOK, "openai", "gpt-4o", date(2025, 7, 1), None, Usage(400, 40), 4
        ),
    }
    rows = {r.upstream_key: r for r in reconcile(ledger, upstream, {}, BOOK).rows}
    assert not rows["key_a"].leaks
    assert (rows["key_z"].leak_requests, rows["key_z"].leak_input, rows["key_z"].leak_output) == (
        4,
        400,
        40,
    )
    # the whole grain leaked: at the book's gpt-4o price, 400 input and 40 output tokens
    price = BOOK.price_for("gpt-4o", datetime(2025, 7, 1, tzinfo=UTC))
    assert price is not None
    assert rows["key_z"].leak_cost == round(400 * price.input + 40 * price.output)


def test_over_count_confirmed_exposure_and_margin() -> None:
    grain = ("2025-07-01", "openai", "gpt-4o", "", "default")
    ledger = {
        grain: Ledger(calls=5, billed_calls=3, billed_input=300, billed_output=30, charged=900,
                      unsettled_calls=2, unsettled_input=20, unsettled_output=2, open_calls=2,
                      open_exposure=77)
    }  # fmt: skip
    covered = reconcile(
        ledger, {(*grain[:3], "k", "default"): Upstream(5, 320, 0, 32)}, {grain[:3]: 500}, BOOK
    )
    (row,) = covered.rows
    assert (row.matched_input, row.leak_input, row.over_input) == (320, 0, 0)
    assert row.confirmed_exposure == 77  # upstream counted all 5 calls: the 2 open ones ran
    (margin,) = covered.margins
    assert (margin.charged, margin.upstream_cost, margin.margin) == (900, 500, 400)
    short = reconcile(ledger, {(*grain[:3], "k", "default"): Upstream(3, 300, 0, 30)}, {}, BOOK)
    (row,) = short.rows
    assert (row.over_requests, row.over_input, row.over_output) == (2, 20, 2)
    assert row.confirmed_exposure == 0
    assert short.margins[0].upstream_cost is None


def test_providers_without_an_export_are_listed_not_reconciled() -> None:
    ledger = {
        ("2025-07-01", "vllm", "llama-3.1-8b", "", "default"): Ledger(calls=4),
        ("2025-07-01", "openai", "gpt-4o", "", "default"): Ledger(calls=1),
    }
    found = reconcile(
        ledger, {("2025-07-01", "openai", "gpt-4o", "k", "default"): Upstream(1)}, {}, BOOK
    )
    assert found.not_imported == (("vllm", 4),)
    assert [r.provider for r in found.rows] == ["openai"]


def test_daily_leak_sums_per_day_and_provider() -> None:
    ledger = {
        ("2025-07-01", "openai", "gpt-4o", "", "default"): Ledger(
            calls=1, billed_calls=1, billed_input=10
        )
    }
    upstream = {("2025-07-01", "openai", "gpt-4o", "k", "default"): Upstream(2, 110, 0, 5)}
    found = reconcile(ledger, upstream, {}, BOOK)
    leaked, total, cost, requests = daily_leak(found.rows)[("2025-07-01", "openai")]
    assert (leaked, total, requests) == (105, 115, 1)
    assert cost == found.rows[0].leak_cost
