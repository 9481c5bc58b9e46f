"""``rollup.move_call`` over any sequence of moves: the deltas are each row's sum of what entered
it less what left it, and no row is left at zero.

The oracle adds every move's measures up per row by hand (a call state's row and measures spelled
out here from ``calls_daily``'s columns), apart from ``call_key`` and ``call_measures``.
"""

from __future__ import annotations

from datetime import date

from hypothesis import given
from hypothesis import strategies as st

from worker.ledger.rollup import CallState, Grain, move_call

GRAINS = [Grain(date(2031, 7, d), a, "gpt-4o") for d in (1, 2) for a in ("acct-a", "acct-b")]

states = st.builds(
    CallState,
    grain=st.sampled_from(GRAINS),
    stream=st.booleans(),
    reserved=st.integers(0, 5_000),
    status=st.sampled_from(["held", "settled", "unsettled", "void"]),
    usage=st.one_of(
        st.none(),
        st.fixed_dictionaries(
            {
                "charge_micros": st.integers(0, 5_000),
                "usage_source": st.sampled_from(["provider", "estimate"]),
                "provider_cost_micros": st.one_of(st.none(), st.integers(0, 5_000)),
            }
        ),
    ),
    failure=st.one_of(
        st.none(),
        st.fixed_dictionaries(
            {"reason": st.just("no_usage"), "exposure_micros": st.integers(0, 5_000)}
        ),
    ),
)
moves = st.lists(st.tuples(st.one_of(st.none(), states), st.one_of(st.none(), states)))


def _row(state: CallState) -> tuple[object, ...]:
    usage, failure = state.usage or {}, state.failure or {}
    return (
        state.grain.day, state.grain.account_id, state.grain.model, state.status,
        usage.get("usage_source") or "", usage.get("provider") or "",
        usage.get("usage_shape") or "", failure.get("reason") or "", failure.get("action") or "",
    )  # fmt: skip


def _measures(state: CallState) -> list[int]:
    """calls, streamed, reserved, charged, costed calls, their charge, their cost, exposure."""
    usage, failure = state.usage, state.failure
    charged = usage["charge_micros"] if usage else 0
    cost = usage.get("provider_cost_micros") if usage else None
    exposure = (failure or {}).get("exposure_micros") or 0
    costed = cost is not None
    return [
        1, int(state.stream), state.reserved, charged,
        int(costed), charged if costed else 0, cost or 0, exposure,
    ]  # fmt: skip


@given(moves)
def test_moves_sum_per_row_and_drop_the_rows_left_at_zero(steps) -> None:
    deltas: dict[tuple[object, ...], list[int]] = {}
    expected: dict[tuple[object, ...], list[int]] = {}
    for before, after in steps:
        move_call(deltas, before, after)
        for state, sign in ((before, -1), (after, 1)):
            if state is not None:
                row = expected.setdefault(_row(state), [0] * 8)
                for index, amount in enumerate(_measures(state)):
                    row[index] += sign * amount
    assert deltas == {key: row for key, row in expected.items() if any(row)}


def test_a_move_within_one_row_leaves_nothing() -> None:
    state = CallState(GRAINS[0], True, 100, "held")
    deltas: dict[tuple[object, ...], list[int]] = {}
    move_call(deltas, None, state)
    move_call(deltas, state, state._replace(reserved=100))
    assert list(deltas.values()) == [[1, 1, 100, 0, 0, 0, 0, 0]]
    move_call(deltas, state, None)
    assert deltas == {}
