"""``worker.core.image_tokens`` against the worked examples of OpenAI's guide.

Source: OpenAI, "Images and vision", section "Calculating costs"
(https://platform.openai.com/docs/guides/images-vision#calculating-costs; the revision that lists
gpt-5.5). The examples marked "guide" are copied from it: the patch examples "for a model with a
1,536-patch budget" and the tile examples "for gpt-4o"; the constants of the other rows are its
tables ("Model | Base tokens | Tile tokens", "Model | Multiplier").
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.core.image_tokens import (
    ImageTokens,
    Patches,
    Tiles,
    image_part_tokens,
    image_tokens,
    patch_count,
    rule_for,
    tile_tokens,
)

GPT_4O = Tiles(85, 170)

# ------------------------------------------------------------------ the guide's worked examples


def test_guide_tile_1024_square_high_is_765() -> None:
    # "A 1024 x 1024 square image in "detail": "high" mode costs 765 tokens ... 170 * 4 + 85 = 765"
    assert tile_tokens(1024, 1024, GPT_4O) == 765
    assert image_tokens("gpt-4o", "high", 1024, 1024) == ImageTokens(765, assumed=False)


def test_guide_tile_2048_by_4096_high_is_1105() -> None:
    # "We scale down the image to 1024 x 2048 ... further scale down to 768 x 1536. 6 512px tiles
    # are needed, so the final token cost is 170 * 6 + 85 = 1105."
    assert image_tokens("gpt-4o", "high", 2048, 4096) == ImageTokens(1105, assumed=False)


def test_guide_tile_low_detail_is_the_base_whatever_the_size() -> None:
    # "A 4096 x 8192 image in "detail": "low" most costs 85 tokens"
    assert image_tokens("gpt-4o", "low", 4096, 8192) == ImageTokens(85, assumed=False)
    assert image_tokens("gpt-4o", "low", None, None) == ImageTokens(85, assumed=False)


def test_guide_patch_1024_square_is_1024_patches() -> None:
    # "original_patch_count = ceil(1024 / 32) * ceil(1024 / 32) = 32 * 32 = 1024 ... below the
    # 1,536 patch budget, so no resize is needed."
    assert patch_count(1024, 1024, budget=1536, max_side=2048) == 1024


def test_guide_patch_1800_by_2400_is_1452_patches() -> None:
    # "shrink_factor = ... = 0.603 ... adjusted_shrink_factor = ... = 0.586. Resized image in
    # integer pixels: 1056 x 1408 ... resized_patch_count = ceil(1056 / 32) * ceil(1408 / 32)
    # = 33 * 44 = 1452"
    assert patch_count(1800, 2400, budget=1536, max_side=2048) == 1452
    assert patch_count(2400, 1800, budget=1536, max_side=2048) == 1452


@pytest.mark.parametrize(
    ("model", "multiplier"),
    [
        ("gpt-5.4-mini", "1.62"),
        ("gpt-5.4-nano", "2.46"),
        ("gpt-5-mini", "1.62"),
        ("gpt-5-nano", "2.46"),
        ("gpt-4.1-mini", "1.62"),
        ("gpt-4.1-nano-2025-04-14", "2.46"),
        ("o4-mini", "1.72"),
    ],
)
def test_guide_multipliers_apply_to_the_patches(model: str, multiplier: str) -> None:
    # "Multiply by the model's token multiplier to get the billed token units": 1452 patches.
    expected = math.ceil(1452 * Fraction(multiplier))
    assert image_tokens(model, "high", 1800, 2400) == ImageTokens(expected, assumed=False)


@pytest.mark.parametrize(
    ("model", "base", "tile"),
    [
        ("gpt-5", 70, 140),
        ("gpt-5-chat-latest", 70, 140),
        ("gpt-4o", 85, 170),
        ("gpt-4.1", 85, 170),
        ("gpt-4.5-preview", 85, 170),
        ("gpt-4o-mini", 2833, 5667),
        ("o1", 75, 150),
        ("o1-pro", 75, 150),
        ("o3-2025-04-16", 75, 150),
        ("computer-use-preview", 65, 129),
    ],
)
def test_guide_tile_table(model: str, base: int, tile: int) -> None:
    assert image_tokens(model, "low", 1024, 1024) == ImageTokens(base, assumed=False)
    # 1024 x 1024 at high is 4 tiles, by the guide's first example.
    assert image_tokens(model, "high", 1024, 1024) == ImageTokens(base + 4 * tile, assumed=False)


# ------------------------------------------------------------------ model names and detail levels


@pytest.mark.parametrize(
    ("model", "kind"),
    [
        ("gpt-4o-2024-08-06", Tiles(85, 170)),
        ("gpt-4o-mini-2024-07-18", Tiles(2833, 5667)),
        ("gpt-4.1-2025-04-14", Tiles(85, 170)),
        ("gpt-4.1-mini-2025-04-14", Patches(Fraction("1.62"))),
        ("gpt-5-2025-08-07", Tiles(70, 140)),
        ("gpt-5-mini-2025-08-07", Patches(Fraction("1.62"))),
        ("gpt-5.2-chat-latest", Patches()),
        ("gpt-5.2-codex", Patches()),
        ("o4-mini-2025-04-16", Patches(Fraction("1.72"))),
    ],
)
def test_snapshots_take_their_family_rule(model: str, kind: Tiles | Patches) -> None:
    assert rule_for(model) == (kind, True)


def test_an_unknown_model_is_priced_as_gpt_4o_and_flagged() -> None:
    assert rule_for("gpt-5.1") == (Tiles(85, 170), False)
    assert image_tokens("llava-13b", "high", 1024, 1024) == ImageTokens(765, assumed=True)


def test_auto_and_missing_detail_are_high_on_tile_models() -> None:
    for detail in ("auto", None, "bogus", 3):
        assert image_tokens("gpt-4o", detail, 2048, 4096) == ImageTokens(1105, assumed=False)


def test_images_are_never_scaled_up() -> None:
    # A 128 x 64 image is one 512 px tile, not scaled up to a 768 px shortest side (4 tiles).
    assert image_tokens("gpt-4o", "high", 128, 64) == ImageTokens(85 + 170, assumed=False)
    assert patch_count(100, 100, budget=1536, max_side=2048) == 16


def test_gpt_5_4_and_5_5_budgets_by_detail() -> None:
    # gpt-5.4: high (and auto) up to 2,500 patches or 2,048 px; original up to 10,000 or 6,000 px.
    # gpt-5.5: auto is original.
    high = patch_count(4000, 3000, budget=2500, max_side=2048)
    original = patch_count(4000, 3000, budget=10_000, max_side=6000)
    assert high <= 2500 < original <= 10_000
    assert image_tokens("gpt-5.4", "high", 4000, 3000) == ImageTokens(high, assumed=False)
    assert image_tokens("gpt-5.4", "auto", 4000, 3000) == ImageTokens(high, assumed=False)
    assert image_tokens("gpt-5.4", "original", 4000, 3000) == ImageTokens(original, assumed=False)
    assert image_tokens("gpt-5.5", "auto", 4000, 3000) == ImageTokens(original, assumed=False)
    assert image_tokens("gpt-5.5", "high", 4000, 3000) == ImageTokens(high, assumed=False)


def test_what_the_guide_does_not_price_is_flagged() -> None:
    # low on a patch model: priced as high; original where there is none: as high.
    assert image_tokens("gpt-4.1-mini", "low", 1024, 1024) == ImageTokens(1659, assumed=True)
    assert image_tokens("gpt-5-nano", "original", 32, 32) == ImageTokens(3, assumed=True)
    assert image_tokens("gpt-4o", "original", 1024, 1024) == ImageTokens(765, assumed=True)


def test_unknown_size_assumes_1024_square() -> None:
    assert image_tokens("gpt-4o", "high", None, None) == ImageTokens(765, assumed=True)
    assert image_tokens("gpt-4o", "high", 1024, None) == ImageTokens(765, assumed=True)
    assert image_tokens("o4-mini", None, None, None) == ImageTokens(
        math.ceil(1024 * Fraction("1.72")), assumed=True
    )


def test_the_part_shapes() -> None:
    placeholder = {"type": "image_url", "image_url": {"detail": "low", "width": 9, "height": 9}}
    assert image_part_tokens("gpt-4o", placeholder) == ImageTokens(85, assumed=False)
    openai = {"type": "image_url", "image_url": {"url": "https://x/a.png", "detail": "high"}}
    assert image_part_tokens("gpt-4o", openai) == ImageTokens(765, assumed=True)
    responses = {"type": "input_image", "image_url": "https://x/a.png", "detail": "low"}
    assert image_part_tokens("gpt-4o", responses) == ImageTokens(85, assumed=False)
    assert image_part_tokens("gpt-4o", {"type": "image_url", "image_url": 7}).assumed is True


# ------------------------------------------------------------------ properties


def _covering(width: int, height: int) -> int:
    return -(-width // 32) * -(-height // 32)


@settings(max_examples=500, deadline=None)
@given(
    width=st.integers(1, 20_000),
    height=st.integers(1, 20_000),
    budget=st.sampled_from([1536, 2500, 10_000]),
    max_side=st.sampled_from([2048, 6000]),
)
def test_patches_never_pass_the_budget_nor_the_unscaled_image(
    width: int, height: int, budget: int, max_side: int
) -> None:
    patches = patch_count(width, height, budget, max_side)
    assert 1 <= patches <= budget
    assert patches <= _covering(width, height)
    if _covering(width, height) <= budget and max(width, height) <= max_side:
        assert patches == _covering(width, height)  # small enough: not resized


@settings(max_examples=500, deadline=None)
@given(width=st.integers(1, 50_000), height=st.integers(1, 50_000))
def test_tiles_are_at_most_what_fits_2048_by_768(width: int, height: int) -> None:
    tokens = tile_tokens(width, height, GPT_4O)
    tiles = (tokens - 85) // 170
    assert (tokens - 85) % 170 == 0
    # A 768 x 2048 image is the most a high-detail image can be scaled to: 2 x 4 tiles.
    assert 1 <= tiles <= 8
    assert tile_tokens(height, width, GPT_4O) == tokens  # the orientation does not matter
