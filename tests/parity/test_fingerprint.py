"""Fingerprints, output hashes, drift and verdicts: the pure part of parity."""

from __future__ import annotations

import pytest

from models import Verdict
from worker.core.parity import Side, compare, drift_ppm, output_hash
from worker.core.result import Choice, ToolCall

from .calls import fingerprint_of, meta_dict


def test_temperature_zero_and_a_fixed_seed_qualify_others_do_not() -> None:
    assert fingerprint_of(meta_dict(stream=True, temperature=0)) is not None
    assert fingerprint_of(meta_dict(stream=True, temperature=0.0)) is not None
    assert fingerprint_of(meta_dict(stream=True, temperature=0.9, seed=7)) is not None
    assert fingerprint_of(meta_dict(stream=True, temperature=0.7)) is None
    assert fingerprint_of(meta_dict(stream=True, temperature=None)) is None


def test_fingerprint_ignores_account_request_stream_and_idempotency_key() -> None:
    a = meta_dict(stream=True, account="acct_1", idempotency_key="k1")
    b = meta_dict(stream=False, account="acct_2")
    b["created_at"] = "2026-12-01T00:00:00Z"
    b["include_usage"] = False
    assert fingerprint_of(a) == fingerprint_of(b)


def test_a_chat_entry_with_and_without_its_endpoint_named_is_one_fingerprint() -> None:
    base = meta_dict(stream=True, seed=7)
    assert fingerprint_of({**base, "endpoint": "chat_completions"}) == fingerprint_of(base)


def test_temperature_zero_int_and_float_agree() -> None:
    assert fingerprint_of(meta_dict(stream=True, temperature=0)) == fingerprint_of(
        meta_dict(stream=True, temperature=0.0)
    )


def test_messages_order_counts_but_key_order_does_not() -> None:
    one = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    swapped_keys = [{"content": "Be brief.", "role": "system"}, {"content": "Hi", "role": "user"}]
    reordered = list(reversed(one))
    base = fingerprint_of(meta_dict(stream=True, messages=one))
    assert fingerprint_of(meta_dict(stream=True, messages=swapped_keys)) == base
    assert fingerprint_of(meta_dict(stream=True, messages=reordered)) != base


@pytest.mark.parametrize(
    "change",
    [
        {"model": "gpt-4o-mini"},
        {"seed": 8},
        {"n": 2},
        {"max_tokens": 10},
        {"tools": [{"type": "function", "function": {"name": "f"}}]},
        {"endpoint": "responses"},  # a chat call and a Responses call are never twins
    ],
)
def test_what_changes_the_output_changes_the_fingerprint(change: dict) -> None:
    base = meta_dict(stream=True, seed=7)
    assert fingerprint_of({**base, **change}) != fingerprint_of(base)


def test_salt_changes_the_fingerprint_and_no_text_is_in_it() -> None:
    data = meta_dict(stream=True)
    first, second = fingerprint_of(data, "a"), fingerprint_of(data, "b")
    assert first != second
    assert first is not None and len(first) == 64 and "Count" not in first


def test_output_hash_ignores_ids_roles_and_finish_reasons_but_not_words() -> None:
    a = Choice(index=0, role="assistant", content="Hi.", finish_reason="stop")
    b = Choice(index=0, role=None, content="Hi.", finish_reason="length")
    c = Choice(index=0, role="assistant", content="Hi!", finish_reason="stop")
    assert output_hash([a], "s") == output_hash([b], "s")
    assert output_hash([a], "s") != output_hash([c], "s")
    call = ToolCall(index=0, id="call_1", name="f", arguments='{"x":1}')
    other_id = ToolCall(index=0, id="call_2", name="f", arguments='{"x":1}')
    assert output_hash([Choice(0, tool_calls=[call])], "s") == output_hash(
        [Choice(0, tool_calls=[other_id])], "s"
    )


@pytest.mark.parametrize(
    ("reported", "estimated", "ppm"),
    [(110, 100, 100_000), (90, 100, -100_000), (100, 100, 0), (4, 3, 333_333), (2, 3, -333_333), (1, 3, -666_666),
     (5, 0, None)],
)  # fmt: skip
def test_drift_ppm_truncates_toward_zero(reported: int, estimated: int, ppm: int | None) -> None:
    assert drift_ppm(reported, estimated) == ppm


def side(prompt=11, completion=3, charge=58, out="h1", book=None) -> Side:  # type: ignore[no-untyped-def]
    return Side(prompt, completion, charge, out, book)


def test_identical_twins_match() -> None:
    assert compare(side(book=58), side(book=58)) == (Verdict.MATCH, (), True)


def test_prompt_tokens_always_compared() -> None:
    verdict, fields, _ = compare(side(out="a"), side(prompt=12, out="b"))
    assert (verdict, fields) == (Verdict.MISMATCH, ("prompt_tokens",))


def test_completion_and_charge_compared_only_for_identical_outputs() -> None:
    assert compare(side(out="a"), side(completion=9, charge=99, out="b"))[0] is Verdict.MATCH
    assert compare(side(out=None), side(completion=9, charge=99))[2] is None
    verdict, fields, identical = compare(side(), side(completion=9, charge=99))
    assert (verdict, fields, identical) == (
        Verdict.MISMATCH,
        ("completion_tokens", "charge"),
        True,
    )


def test_charge_per_token_is_the_book_rate_on_each_side() -> None:
    verdict, fields, _ = compare(side(book=58), side(charge=60, out="b", book=58))
    assert (verdict, fields) == (Verdict.MISMATCH, ("charge_per_token",))
