"""Input tokens of an image part, by OpenAI's published formulas (pure).

Source: OpenAI's guide "Images and vision", section "Calculating costs"
(https://platform.openai.com/docs/guides/images-vision#calculating-costs, now also served under
developers.openai.com/api/docs/guides/images-vision), as it reads with the ``gpt-5.5`` rows. Two
formulas, chosen by model:

* **Tiles** (GPT-4o, GPT-4.1, GPT-4.5, GPT-4o-mini, GPT-5, computer-use-preview, o1, o3): detail
  ``low`` costs the model's base tokens; ``high`` (and ``auto``) scales the image to fit within
  2048 x 2048, then its shortest side to 768, counts the 512 px squares that cover it, and costs
  base + squares x tile tokens. Images are only ever scaled down: a 128 x 64 image is one tile
  (255 tokens on gpt-4o, as OpenAI's usage reports it), not scaled up to 768 px.
* **Patches** (gpt-5-mini, gpt-5-nano, gpt-4.1-mini, gpt-4.1-nano, o4-mini, gpt-5.2 and its codex
  and chat variants, gpt-5.4 and its mini and nano, gpt-5.5): the 32 px squares that cover the
  image, after scaling it down to fit both the model's patch budget (the page's shrink factor,
  adjusted so that whole patches cover it) and its largest side, capped at the budget, times the
  model's multiplier (rounded up to a whole token). ``gpt-5.4`` and ``gpt-5.5`` take
  ``"detail": "original"`` (10,000 patches, 6,000 px) besides ``high`` (2,500 patches, 2,048 px);
  ``auto`` is ``high`` on ``gpt-5.4`` and ``original`` on ``gpt-5.5``. The others: 1,536 patches,
  2,048 px. Models the page gives no multiplier for are counted at 1.

What the page does not say is assumed, and the result says so (``ImageTokens.assumed``):

* the size unknown (the gateway could not read it, or sent a URL only): a 1024 x 1024 image
  (``ASSUMED_SIDE``) at the detail given; for a tile model at ``low`` the size does not matter;
* a model the page does not name: GPT-4o's tiles (85 + 170 a tile);
* ``low`` on a patch model (the page prices patches without a detail level; OpenAI's usage has
  been reported to bill it as ``high``): counted as ``high``; ``original`` on a model without it:
  counted as its ``high``.

Names are compared as ``worker.core.estimate`` compares them (already lowercased, without a fine-tune
wrapper or a routing prefix), by longest prefix, a prefix taking the names that continue with a
separator: ``gpt-4o`` takes ``gpt-4o-2024-08-06`` but not ``gpt-4o-mini``, which has its own row.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

# The size assumed for an image whose size the call does not give.
ASSUMED_SIDE = 1024
# A side larger than any image format states is not a size (PNG's limit is 2^31 - 1).
MAX_SIDE = 2**31 - 1

TILE_FIT = 2048
TILE_SHORT_SIDE = 768
TILE = 512
PATCH = 32


@dataclass(frozen=True, slots=True)
class Tiles:
    """The tile formula's constants for one family of models."""

    base: int
    per_tile: int


@dataclass(frozen=True, slots=True)
class Patches:
    """The patch formula's constants for one family of models."""

    multiplier: Fraction = Fraction(1)
    budget: int = 1536
    max_side: int = 2048
    # Models with an ``original`` detail level: its budget and largest side, and what ``auto`` is.
    original: tuple[int, int] | None = None
    auto_original: bool = False


@dataclass(frozen=True, slots=True)
class ImageTokens:
    tokens: int
    assumed: bool  # the size, the model's rule or the detail level was not known


_GPT_4O = Tiles(85, 170)
_PATCHES_1536 = Patches()
_PATCHES_GPT_5_4 = Patches(budget=2500, max_side=2048, original=(10_000, 6000))

RULES: dict[str, Tiles | Patches] = {
    # Tiles: "Model | Base tokens | Tile tokens".
    "gpt-5": Tiles(70, 140),
    "gpt-5-chat-latest": Tiles(70, 140),
    "gpt-4o": _GPT_4O,
    "chatgpt-4o": _GPT_4O,
    "gpt-4.1": _GPT_4O,
    "gpt-4.5": _GPT_4O,
    "gpt-4o-mini": Tiles(2833, 5667),
    "o1": Tiles(75, 150),
    "o1-pro": Tiles(75, 150),
    "o3": Tiles(75, 150),
    "computer-use-preview": Tiles(65, 129),
    # Patches: "Model | Multiplier", and the models the sizing table gives a budget without one.
    "gpt-5.4-mini": Patches(Fraction("1.62")),
    "gpt-5.4-nano": Patches(Fraction("2.46")),
    "gpt-5-mini": Patches(Fraction("1.62")),
    "gpt-5-nano": Patches(Fraction("2.46")),
    "gpt-4.1-mini": Patches(Fraction("1.62")),
    "gpt-4.1-nano": Patches(Fraction("2.46")),
    "o4-mini": Patches(Fraction("1.72")),
    "gpt-5.2": _PATCHES_1536,
    "gpt-5.3-codex": _PATCHES_1536,
    "gpt-5-codex-mini": _PATCHES_1536,
    "gpt-5.1-codex-mini": _PATCHES_1536,
    "gpt-5.4": _PATCHES_GPT_5_4,
    "gpt-5.5": Patches(budget=2500, max_side=2048, original=(10_000, 6000), auto_original=True),
}
DEFAULT_RULE = _GPT_4O

_SEPARATORS = frozenset("-:_@")
_BY_LENGTH = sorted(RULES.items(), key=lambda rule: len(rule[0]), reverse=True)


def rule_for(name: str) -> tuple[Tiles | Patches, bool]:
    """The rule of a model (a base name, lowercased), and whether the page names it."""
    for prefix, rule in _BY_LENGTH:
        if name.startswith(prefix) and (
            len(name) == len(prefix) or name[len(prefix)] in _SEPARATORS
        ):
            return rule, True
    return DEFAULT_RULE, False


def tile_tokens(width: int, height: int, rule: Tiles) -> int:
    """``detail: high`` on a tile model: fit 2048 x 2048, shortest side down to 768, 512 px tiles
    (sides scaled exactly, then cut to whole pixels)."""
    w, h = Fraction(width), Fraction(height)
    if max(w, h) > TILE_FIT:
        scale = TILE_FIT / max(w, h)
        w, h = w * scale, h * scale
    if min(w, h) > TILE_SHORT_SIDE:
        scale = TILE_SHORT_SIDE / min(w, h)
        w, h = w * scale, h * scale
    tiles = math.ceil(max(1, math.floor(w)) / TILE) * math.ceil(max(1, math.floor(h)) / TILE)
    return rule.base + tiles * rule.per_tile


def _covering(width: float, height: float) -> int:
    return math.ceil(width / PATCH) * math.ceil(height / PATCH)


def patch_count(width: int, height: int, budget: int, max_side: int) -> int:
    """Patches of 32 px covering the image once scaled down to fit ``budget`` patches and
    ``max_side`` pixels (the lesser of the two), capped at ``budget``; before the multiplier."""
    scale = 1.0
    if max(width, height) > max_side:
        scale = max_side / max(width, height)
    if _covering(width, height) > budget:
        shrink = math.sqrt(PATCH * PATCH * budget / (width * height))
        # "adjust the scale so the final resized image stays within budget after converting to
        # integer pixel dimensions": whole patches along the side that fits the fewest.
        fits = [
            math.floor(side * shrink / PATCH) / (side * shrink / PATCH)
            for side in (width, height)
            if side * shrink >= PATCH
        ]
        scale = min(scale, shrink * min(fits, default=1.0))
    resized_w = max(1, math.floor(width * scale))
    resized_h = max(1, math.floor(height * scale))
    return min(budget, _covering(resized_w, resized_h))


def image_tokens(name: str, detail: object, width: object, height: object) -> ImageTokens:
    """Tokens of one image for the model ``name`` at ``detail`` (``low``, ``high``, ``original``
    or ``auto``; anything else is ``auto``) and the size given (positive integers; anything else
    is an unknown size)."""
    rule, named = rule_for(name)
    assumed = not named
    level = detail if detail in ("low", "high", "original", "auto") else "auto"
    size = _size(width, height)
    if isinstance(rule, Tiles):
        if level == "low":
            return ImageTokens(rule.base, assumed)
        assumed = assumed or level == "original" or size is None
        w, h = size or (ASSUMED_SIDE, ASSUMED_SIDE)
        return ImageTokens(tile_tokens(w, h, rule), assumed)
    budget, max_side = rule.budget, rule.max_side
    wants_original = level == "original" or (level == "auto" and rule.auto_original)
    if wants_original and rule.original is not None:
        budget, max_side = rule.original
    elif level in ("low", "original"):
        assumed = True
    assumed = assumed or size is None
    w, h = size or (ASSUMED_SIDE, ASSUMED_SIDE)
    patches = patch_count(w, h, budget, max_side)
    return ImageTokens(math.ceil(patches * rule.multiplier), assumed)


def _side(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_SIDE:
        return value
    return None


def _size(width: object, height: object) -> tuple[int, int] | None:
    w, h = _side(width), _side(height)
    return (w, h) if w is not None and h is not None else None


def image_part_tokens(name: str, part: Mapping[object, object]) -> ImageTokens:
    """An ``image_url`` content part (the gateway's placeholder
    ``{"type": "image_url", "image_url": {"detail": …, "width": W, "height": H}}``, or OpenAI's
    own shape with a ``url`` and no size, which is then assumed), or a Responses-style
    ``input_image`` part (its ``detail`` beside ``image_url``)."""
    image = part.get("image_url")
    fields: Mapping[object, object] = image if isinstance(image, Mapping) else {}
    detail = fields.get("detail", part.get("detail"))
    width = fields.get("width", part.get("width"))
    height = fields.get("height", part.get("height"))
    return image_tokens(name, detail, width, height)
