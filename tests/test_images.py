"""Image generation (``worker.core.readers.images``, ``worker.core.images``): the answer read, its
usage read as the images shape, priced by image output tokens or per image by size and quality,
and held at an upper bound by the gateway.

The oracles are OpenAI's published prices (platform.openai.com/docs/pricing), written here:
gpt-image-1 text input 5, image input 10, image output 40 USD per 1M tokens; DALL·E 3 per image
0.04 (standard 1024x1024), 0.08 (standard 1024x1792, HD 1024x1024), 0.12 (HD 1024x1792).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.core.errors import PriceBookError, RequestMetaError
from worker.core.prices import load_price_book
from worker.core.prices.price import Price, dimensions_from_json, dimensions_to_json
from worker.core.prices.toml_book import prices_from_toml
from worker.core.readers import read_body, read_stream
from worker.core.reconcile import reconcile_response, reconcile_stream
from worker.core.request import request_from_dict
from worker.core.result import Outcome, Reason, Usage, UsageSource
from worker.core.usage import Shape, Verdict, read_usage
from worker.gateway.endpoint_requests import EndpointRequest, ImageAsk, endpoint_request
from worker.gateway.reservation import Hold, Unpriced, hold_for

RECORDINGS = Path(__file__).parent / "fixtures" / "endpoints"
BOOK = load_price_book()
AT = "2026-11-01T12:00:00Z"
WHEN = datetime(2026, 11, 1, 12, tzinfo=UTC)
DALL_E_3 = {
    ("1024x1024", "standard"): 40_000, ("1024x1792", "standard"): 80_000,
    ("1792x1024", "standard"): 80_000, ("1024x1024", "hd"): 80_000,
    ("1024x1792", "hd"): 120_000, ("1792x1024", "hd"): 120_000,
}  # fmt: skip


def recording(name: str) -> dict[str, Any]:
    return json.loads((RECORDINGS / f"{name}.json").read_text())


def sse(events: list[Any]) -> list[bytes]:
    return [f"data: {json.dumps(event)}\n\n".encode() for event in events]


def meta(model: str, *, stream: bool = False, **more: Any):
    return request_from_dict({
        "request_id": f"req-img-{stream:d}", "account_id": "acct", "model": model,
        "stream": stream, "include_usage": True, "reserved_micros": 0, "created_at": AT,
        "endpoint": "images", **more,
    })  # fmt: skip


def gpt_image_charge(text_in: int, image_in: int, image_out: int) -> int:
    total = text_in * Decimal(5) + image_in * Decimal(10) + image_out * Decimal(40)
    return int(total.to_integral_value(rounding="ROUND_HALF_UP"))


# -- the reader -----------------------------------------------------------------------------------


def test_a_gpt_image_answer_is_one_finished_choice_per_image_with_its_usage() -> None:
    body = recording("images_gpt_image_1")["body"]
    read = read_body("images", body)
    assert [c.finish_reason for c in read.choices] == ["stop"]
    assert read.usage_raw["input_tokens"] == 50 and read.usage_raw["generated_images"] == 0
    two = read_body("images", {**body, "data": body["data"] * 2})
    assert [c.index for c in two.choices] == [0, 1]


def test_a_dall_e_answer_without_usage_counts_its_images_billed_per_image() -> None:
    read = read_body("images", recording("images_dall_e_3")["body"])
    assert read.usage_raw == {"generated_images": 1}
    empty = read_body("images", {"created": 1, "data": []})
    assert [c.finish_reason for c in empty.choices] == [None]  # no image: not finished
    error = read_body("images", {"error": {"code": "content_policy_violation", "message": "no"}})
    assert error.error["code"] == "content_policy_violation" and error.choices == []


def test_a_stream_is_read_from_its_completed_event_and_partial_images_are_not_images() -> None:
    events = recording("images_gpt_image_1")["events"]
    read = read_stream("images", sse(events))
    assert len(read.choices) == 1 and read.saw_done and not read.frame_errors
    assert read.usage_raw["output_tokens"] == 50
    cut = read_stream("images", sse(events[:1]))  # only a partial image: no answer
    assert not cut.saw_done and cut.usage_raw is None


def test_a_streams_images_add_their_usage_up() -> None:
    completed = recording("images_gpt_image_1")["events"][1]
    read = read_stream("images", sse([completed, completed]))
    assert len(read.choices) == 2
    assert (read.usage_raw["input_tokens"], read.usage_raw["output_tokens"]) == (100, 100)
    assert read.usage_raw["input_tokens_details"] == {"text_tokens": 20, "image_tokens": 80}


# -- the usage ------------------------------------------------------------------------------------


def test_the_images_usage_is_read_exactly() -> None:
    block = {**recording("images_gpt_image_1")["body"]["usage"], "generated_images": 0}
    reading = read_usage(block)
    assert (reading.verdict, reading.shape) == (Verdict.BILLABLE, Shape.OPENAI_IMAGES)
    assert reading.usage == Usage(50, 50, image_prompt_tokens=40, image_completion_tokens=50)
    # output details name the image part: the rest is text output
    split = {**block, "output_tokens_details": {"image_tokens": 45, "text_tokens": 5}}
    assert read_usage(split).usage.image_completion_tokens == 45


@pytest.mark.parametrize(
    ("change", "verdict"),
    [
        ({"total_tokens": 101}, Verdict.INCONSISTENT),
        ({"input_tokens_details": {"image_tokens": 51}}, Verdict.IMPLAUSIBLE),
        ({"input_tokens_details": {"cached_tokens": 8}}, Verdict.UNPRICED_COMPONENT),
        ({"generated_images": -1}, Verdict.IMPLAUSIBLE),
    ],
)
def test_an_images_usage_that_does_not_add_up_or_is_unknown_is_loud(
    change: dict[str, Any], verdict: Verdict
) -> None:
    block = {**recording("images_gpt_image_1")["body"]["usage"], "generated_images": 0, **change}
    assert read_usage(block).verdict is verdict


# -- settled at the published price ---------------------------------------------------------------


def test_a_gpt_image_call_settles_at_the_image_token_prices_streamed_and_not() -> None:
    doc = recording("images_gpt_image_1")
    plain = reconcile_response(meta("gpt-image-1"), 200, doc["body"], BOOK)
    streamed = reconcile_stream(meta("gpt-image-1", stream=True), sse(doc["events"]), BOOK)
    expected = gpt_image_charge(10, 40, 50)  # 50 + 400 + 2,000 micro-USD
    for result in (plain, streamed):
        assert (result.outcome, result.usage_source) == (Outcome.SETTLED, UsageSource.REPORTED)
        assert result.charge_micros == expected == 2_450
    assert json.loads(plain.unit_prices)["image_output"] == "40.00"


@pytest.mark.parametrize(("size", "quality"), sorted(DALL_E_3))
def test_a_dall_e_3_call_settles_at_its_size_and_quality(size: str, quality: str) -> None:
    body = recording("images_dall_e_3")["body"]
    result = reconcile_response(
        meta("dall-e-3", image={"size": size, "quality": quality}), 200, body, BOOK
    )
    assert (result.outcome, result.usage_source) == (Outcome.SETTLED, UsageSource.REPORTED)
    assert result.charge_micros == DALL_E_3[size, quality]
    billed = result.billed_usage
    assert (billed.images, billed.image_size, billed.image_quality) == (1, size, quality)


def test_dall_e_takes_its_documented_defaults_and_an_unpriced_size_is_loud() -> None:
    body = recording("images_dall_e_3")["body"]
    plain = reconcile_response(meta("dall-e-3"), 200, body, BOOK)
    assert plain.charge_micros == 40_000  # 1024x1024, standard
    two = reconcile_response(
        meta("dall-e-2", n=2, image={"size": "512x512"}),
        200, {**body, "data": body["data"] * 2}, BOOK,
    )  # fmt: skip
    assert two.charge_micros == 2 * 18_000
    odd = reconcile_response(meta("dall-e-3", image={"size": "512x512"}), 200, body, BOOK)
    assert (odd.outcome, odd.reason) == (Outcome.UNSETTLED, Reason.UNPRICED_COMPONENT)


def test_a_gpt_image_answer_without_usage_is_not_settled_at_a_guess() -> None:
    body = {k: v for k, v in recording("images_gpt_image_1")["body"].items() if k != "usage"}
    result = reconcile_response(meta("gpt-image-1"), 200, body, BOOK)
    assert (result.outcome, result.reason) == (Outcome.UNSETTLED, Reason.UNPRICED_COMPONENT)


# -- the book -------------------------------------------------------------------------------------


def test_per_image_prices_and_image_output_round_trip_through_toml_and_the_table() -> None:
    (row,) = prices_from_toml(
        '[[price]]\nmodel = "m"\ninput = "1"\noutput = "2"\n'
        'image_output = "30"\nper_image = { "1024x1024/low" = "0.011", "1024x1536/high" = "0.25" }\n'
    )
    assert row.image_output == Decimal(30)
    assert dict(row.per_image) == {
        "1024x1024/low": Decimal("0.011"),
        "1024x1536/high": Decimal("0.25"),
    }
    again = Price(row.model, row.effective_from, row.input, row.cached_input, row.output,
                  **dimensions_from_json(dimensions_to_json(row), "t"))  # fmt: skip
    assert again.values() == row.values()
    with pytest.raises(PriceBookError, match="per_image"):
        prices_from_toml('[[price]]\nmodel = "m"\ninput = "1"\noutput = "2"\n'
                         'per_image = { "large" = "0.1" }\n')  # fmt: skip


def test_image_output_tokens_without_a_price_are_unpriced_never_text() -> None:
    row = BOOK.price_for("gpt-4o-mini", WHEN)
    usage = Usage(10, 50, image_completion_tokens=50)
    assert row.charge(usage) is None
    missing, rest = row.unpriced_components(usage)
    assert missing == (("image_completion_tokens", "50"),) and rest.completion_tokens == 0


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 10_000), st.integers(0, 10_000), st.integers(0, 10))
def test_gpt_image_charges_are_the_published_rates(
    text_in: int, image_in: int, image_out: int, n: int
) -> None:
    row = BOOK.price_for("gpt-image-1", WHEN)
    usage = Usage(text_in + image_in, image_out, image_prompt_tokens=image_in,
                  image_completion_tokens=image_out)  # fmt: skip
    assert row.charge(usage) == gpt_image_charge(text_in, image_in, image_out)
    dalle = BOOK.price_for("dall-e-3", WHEN)
    assert dalle.charge(Usage(0, 0, images=n, image_size="1792x1024", image_quality="hd")) == (
        n * 120_000
    )


# -- the request and the hold ---------------------------------------------------------------------


def test_the_request_entry_carries_size_and_quality_checked() -> None:
    assert meta("dall-e-3", image={"size": "1024x1792", "quality": "hd"}).image_size == "1024x1792"
    with pytest.raises(RequestMetaError, match=r"image\.size"):
        meta("dall-e-3", image={"size": "big"})


def hold(body: dict[str, Any]) -> Hold | Unpriced:
    view = endpoint_request("images", body)
    assert isinstance(view, EndpointRequest) and view.image is not None
    return hold_for(BOOK, view.body, WHEN, image=view.image)


def test_the_hold_is_n_images_at_the_dearest_price_they_can_have() -> None:
    assert hold({"model": "dall-e-3", "prompt": "x"}).micros == 120_000  # any size and quality
    assert hold({"model": "dall-e-3", "prompt": "x", "quality": "standard"}).micros == 80_000
    exact = {"model": "dall-e-2", "prompt": "x", "n": 3, "size": "256x256"}
    assert hold(exact).micros == 3 * 16_000
    assert isinstance(hold({"model": "dall-e-2", "prompt": "x", "size": "4096x4096"}), Unpriced)
    assert isinstance(hold({"model": "gpt-4o-mini", "prompt": "x"}), Unpriced)  # prices no image


def test_a_gpt_image_hold_covers_its_largest_image_and_partial_images() -> None:
    one = hold({"model": "gpt-image-1", "prompt": "x"})
    assert one.write is None and one.output_tokens == 6_240
    assert one.micros >= 6_240 * 40
    streamed = hold({"model": "gpt-image-1", "prompt": "x", "n": 2, "stream": True,
                     "partial_images": 3})  # fmt: skip
    assert streamed.output_tokens == 2 * (6_240 + 300)
    # the hold bounds the charge of the recording's usage
    doc = recording("images_gpt_image_1")
    assert (
        one.micros >= reconcile_response(meta("gpt-image-1"), 200, doc["body"], BOOK).charge_micros
    )


def test_image_ask_reads_auto_as_any() -> None:
    view = endpoint_request("images", {"model": "gpt-image-1", "prompt": "p", "size": "auto"})
    assert view.image == ImageAsk(1, None, None, 0)
