"""Paging, digests and resolved notices over many windows (pure): the message count is bounded,
no fact of the old one-message-per-group alerts is lost, exposure adds up; and on the demo's own
calls (the simulator's default fault mix) at most 3 messages per window carry every old fact."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.alerts.paging import Plan, messages
from worker.alerts.picture import Finding, Rate
from worker.core.result import Outcome
from worker.simulation.calls import plan as simulated
from worker.simulation.faults import parse_faults

from .oracle import new_facts, old_facts

T0 = datetime(2031, 3, 1, 12, 0, tzinfo=UTC)
WINDOW = timedelta(seconds=10)


def windows(start: datetime, count: int, size: timedelta) -> list[tuple[datetime, datetime]]:
    return [(start + size * k, start + size * (k + 1)) for k in range(count)]


def full_plan(count: int = 9, digest: int = 3, limit: int | None = 10_000_000) -> Plan:
    """Pages for every window and digests covering them all: each finding has a message."""
    every = windows(T0, count, WINDOW)
    return Plan(WINDOW, every, every, windows(T0, count // digest, WINDOW * digest), limit)


def finding(
    kind: str, reason: str, second: float, account: str = "a", exposure: int = 0
) -> Finding:
    at = T0 + timedelta(seconds=second)
    return Finding(kind, reason, at, account, "m", f"req_{kind}_{second}", exposure, True)


def by_severity(alerts: list) -> Counter:
    return Counter((a.kind, a.reason, a.window_start) for a in alerts)


def test_a_window_pages_once_and_the_next_quiet_one_resolves_once() -> None:
    found = [finding("unsettled", "incomplete", s, exposure=600_000) for s in (1, 2, 11, 12)]
    found += [finding("unsettled", "incomplete", 21, exposure=1)]  # below: no page
    found += [finding("anomaly", "no_close", s) for s in (3, 25, 31)]
    alerts = messages(full_plan(limit=1_000_000), found, {})
    got = by_severity(alerts)
    assert got == Counter({
        ("unsettled", "page", T0): 1,
        ("unsettled", "page", T0 + WINDOW): 1,
        ("unsettled", "resolved", T0 + 2 * WINDOW): 1,
        ("unsettled", "digest", T0): 1,  # the quiet window 2 of the first digest
        ("anomaly", "digest", T0): 1,
        ("anomaly", "digest", T0 + 3 * WINDOW): 1,
    })  # fmt: skip
    [first_digest] = [a for a in alerts if a.kind == "unsettled" and a.reason == "digest"]
    assert first_digest.fields["count"] == 1
    assert first_digest.fields["paged_windows"] == [T0.isoformat(), (T0 + WINDOW).isoformat()]
    # the same findings decided again give the same messages and keys
    assert [a.dedupe_key for a in messages(full_plan(limit=1_000_000), found, {})] == [
        a.dedupe_key for a in alerts
    ]


def test_a_rate_pages_a_kind_of_any_name() -> None:
    found = [finding("some_new_kind", "below_threshold", 1, account=f"acct_{i}") for i in range(3)]
    rates = {("some_new_kind", T0): Rate("accounts below", 3, 10, threshold_pct=20, min_total=1)}
    alert, notice = messages(full_plan(), found, rates)
    assert (alert.kind, alert.reason) == ("some_new_kind", "page")
    assert (notice.reason, notice.window_start) == ("resolved", T0 + WINDOW)
    assert alert.text.startswith("PAGE some_new_kind: 3 some_new_kind findings in the 10 s from")
    assert "30.0% of accounts below (3 of 10), crossed the 20% threshold" in alert.text


def test_a_window_before_the_emitted_ones_only_decides_a_resolved_notice() -> None:
    every = windows(T0, 3, WINDOW)
    plan = Plan(WINDOW, every, every[1:], [], exposure_limit_micros=5)
    alerts = messages(plan, [finding("unsettled", "incomplete", 1, exposure=9)], {})
    assert by_severity(alerts) == Counter({("unsettled", "resolved", T0 + WINDOW): 1})


NAMES = st.text(min_size=1, max_size=6)
FINDINGS = st.lists(
    st.builds(
        Finding,
        kind=st.sampled_from(["unsettled", "anomaly", "parity_mismatch", "some_new_kind"]),
        reason=st.sampled_from(["incomplete", "error_finish", "no_close", "<!channel>\n"]),
        at=st.integers(0, 89_999_999).map(lambda us: T0 + timedelta(microseconds=us)),
        account_id=st.one_of(st.none(), NAMES),
        model=st.one_of(st.none(), NAMES),
        request_id=st.one_of(st.none(), NAMES),
        exposure_micros=st.one_of(st.none(), st.integers(0, 5_000_000)),
        stream=st.booleans(),
    ),
    max_size=120,
)


@settings(max_examples=150, deadline=None)
@given(
    FINDINGS,
    st.integers(0, 20_000_000),
    st.dictionaries(
        st.tuples(st.sampled_from(["unsettled", "anomaly"]), st.integers(0, 8)),
        st.tuples(st.integers(0, 50), st.integers(0, 50)),
    ),
)
def test_bounded_and_no_fact_lost(
    found: list[Finding], limit: int, raw_rates: dict[tuple[str, int], tuple[int, int]]
) -> None:
    rates = {
        (kind, T0 + WINDOW * k): Rate("x", count, count + rest, 5, 20)
        for (kind, k), (count, rest) in raw_rates.items()
    }
    plan = full_plan(limit=limit)
    alerts = messages(plan, found, rates)
    kinds = {f.kind for f in found} | {kind for kind, _ in rates}
    # at most one page or resolved notice per kind and window, one digest per kind and digest window
    per_window = Counter((a.kind, a.window_start, a.window_end) for a in alerts)
    assert max(per_window.values(), default=1) == 1
    assert len(alerts) <= len(kinds) * (len(plan.emit) + len(plan.digests))
    assert all(a.reason in ("page", "digest", "resolved") for a in alerts)
    # every old fact, with its count and exposure, exactly once in a page or a digest
    assert new_facts(alerts) == old_facts(found, WINDOW)
    # exposure adds up across the messages of each kind
    for kind in kinds:
        carried = sum(
            a.fields["exposure_micros"] for a in alerts if a.kind == kind and a.reason != "resolved"
        )
        assert carried == sum(f.exposure_micros or 0 for f in found if f.kind == kind)


def demo_findings() -> tuple[list[Finding], dict]:
    """What the demo records about its calls, from the simulator's expectations: the same default
    fault mix and seed as ``make demo``, 3,000 calls spread over 20 s as it publishes them."""
    calls = simulated(3000, 7, parse_faults("default"), twins=0.05, run_id="demo7", start=T0)
    found: list[Finding] = []
    streams: Counter[datetime] = Counter()
    unsettled: Counter[datetime] = Counter()
    for call in calls:
        if call.meta is None or call.expected.outcome is None:
            continue
        at = T0 + timedelta(microseconds=call.index * 20_000_000 // len(calls))
        window = T0 + WINDOW * ((at - T0) // WINDOW)
        account, model = call.meta["account_id"], call.meta["model"]
        expected = call.expected
        streams[window] += call.stream
        if expected.outcome is Outcome.UNSETTLED and not expected.late:
            unsettled[window] += call.stream
            found.append(
                Finding(
                    "unsettled", str(expected.reason), at, account, model, call.request_id,
                    int(expected.reserved_micros), call.stream,
                )
            )  # fmt: skip
        if expected.true_up:
            found.append(
                Finding("anomaly", "charge_above_hold", at, account, model, call.request_id)
            )
        if expected.swept and expected.reserved_micros > 0:
            found.append(Finding("anomaly", "no_close", at, account, model, call.request_id))
    rates = {
        ("unsettled", window): Rate("streams unsettled", count, streams[window], 5, 20)
        for window, count in unsettled.items()
    }
    return found, rates


def test_the_demo_sends_at_most_three_messages_a_window_with_every_old_fact() -> None:
    found, rates = demo_findings()
    every = windows(T0, 3, WINDOW)
    plan = Plan(WINDOW, every, every, windows(T0, 1, 3 * WINDOW), 10_000_000)
    alerts = messages(plan, found, rates)
    counts, _ = old_facts(found, WINDOW)
    assert len(counts) > 100  # the old code's one message per group: over a hundred of them
    assert new_facts(alerts) == old_facts(found, WINDOW)
    for start, end in every:
        assert sum(a.window_start == start and a.window_end == end for a in alerts) <= 3
    digests = [a for a in alerts if a.reason == "digest"]
    assert len(digests) <= 3 and len(alerts) <= 3 * 3


def test_a_finding_that_pages_by_itself_pages_and_drift_counts_models() -> None:
    # one model drifting in two drift windows and another in one: 2 models, 3 findings
    drifting = [
        Finding("drift", "median_drift", T0 + timedelta(seconds=s), model=m)
        for s, m in ((1, "o3"), (11, "o3"), (12, "gpt-4o"))
    ]
    quiet = messages(full_plan(limit=None), drifting, {})
    assert [a.fields["severity"] for a in quiet] == ["digest"]  # no rate, no exposure: no page
    [digest] = quiet
    assert digest.text.startswith("DIGEST drift: 2 models with drift findings (3 findings) in")
    assert (digest.fields["models"], digest.fields["count"]) == (2, 3)
    # a tokenizer change pages its window by itself, resolved in the next quiet one
    change = Finding("drift", "tokenizer_change", T0 + timedelta(seconds=25), model="m", pages=True)
    sent = messages(full_plan(limit=None), [*drifting, change], {})
    assert Counter(a.fields["severity"] for a in sent) == {"digest": 1, "page": 1, "resolved": 1}
    [page] = [a for a in sent if a.fields["severity"] == "page"]
    assert page.window_start == T0 + timedelta(seconds=20)
    assert page.text.startswith("PAGE drift: 1 model with drift findings (1 finding)")
    assert "thresholds: 1 finding that pages by itself" in page.text
