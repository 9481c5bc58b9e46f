import random

import pytest

from worker.simulation.faults import (
    DEFAULT_MIX,
    FAULTS,
    NO_FAULTS,
    FaultRates,
    FaultSpecError,
    parse_faults,
)


def test_names_are_the_documented_ones():
    assert set(FAULTS) == {
        "error_finish",
        "dropped_connection",
        "missing_usage",
        "error_object",
        "duplicate_entries",
        "gateway_crash",
        "malformed",
        "late_usage",
        "http_error",
    }


@pytest.mark.parametrize("spec", [None, "", "none", "  "])
def test_no_faults_by_default(spec):
    assert parse_faults(spec) == NO_FAULTS
    assert parse_faults(spec).spec() == "none"


def test_parse_rates():
    rates = parse_faults("error_finish=0.02, dropped_connection = 0.01,late_usage=0")
    assert rates.rate("error_finish") == 0.02
    assert rates.rate("dropped_connection") == 0.01
    assert rates.rate("late_usage") == 0.0
    assert rates.spec() == "error_finish=0.02,dropped_connection=0.01"
    assert parse_faults(rates.spec()) == rates


def test_default_mix_is_a_few_percent_each_and_overridable():
    rates = parse_faults("default")
    assert set(rates.rates) == set(FAULTS)
    assert all(0.005 <= r <= 0.03 for r in rates.rates.values())
    assert parse_faults("default,late_usage=0.2").rate("late_usage") == 0.2
    assert dict(parse_faults("default").rates) == dict(DEFAULT_MIX)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("bogus=0.1", "unknown fault 'bogus'"),
        ("error_finish", "expected NAME=RATE"),
        ("error_finish=abc", "rate is not a number"),
        ("error_finish=1.5", "between 0 and 1"),
        ("error_finish=-0.1", "between 0 and 1"),
        ("error_finish=nan", "between 0 and 1"),
        ("error_finish=0.1,error_finish=0.2", "given twice"),
        ("error_finish=0.1,,late_usage=0.1", "empty item"),
        ("late_usage=0.1,default", "'default' must come first"),
        ("error_finish=0.6,dropped_connection=0.6", "add up to 1.2 for streamed calls"),
    ],
)
def test_bad_specs_say_why_in_one_line(spec, message):
    with pytest.raises(FaultSpecError, match=message) as info:
        parse_faults(spec)
    assert "\n" not in str(info.value)


def test_stream_and_response_sums_are_separate():
    # 0.6 + 0.6 is fine: http_error never applies to a streamed call, nor error_finish to a response.
    rates = parse_faults("error_finish=0.6,http_error=0.6")
    assert rates.rate("http_error") == 0.6
    with pytest.raises(FaultSpecError):
        FaultRates({"nope": 0.1})


def test_draw_respects_eligibility():
    rng = random.Random(1)
    rates = FaultRates({"http_error": 1.0})
    assert {rates.draw(rng, stream=True) for _ in range(100)} == {None}
    assert {rates.draw(rng, stream=False) for _ in range(100)} == {"http_error"}
    stream_only = FaultRates({"late_usage": 1.0})
    assert {stream_only.draw(rng, stream=False) for _ in range(100)} == {None}


def test_draw_frequencies():
    rng = random.Random(7)
    rates = FaultRates({"error_finish": 0.1, "malformed": 0.2})
    draws = [rates.draw(rng, stream=True) for _ in range(20_000)]
    assert draws.count("error_finish") / len(draws) == pytest.approx(0.1, abs=0.01)
    assert draws.count("malformed") / len(draws) == pytest.approx(0.2, abs=0.015)
