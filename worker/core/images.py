"""The size and quality of images billed per image, where the answer does not state them.

Pure; no IO. DALL·E's answer (``…/images/generations``) reports no usage and, unlike GPT Image's,
neither the size nor the quality of its images: the request states them, and the book prices an
image by both (``Price.per_image``, ``SIZE/QUALITY``). So a usage of images billed per image
takes the request's ``size`` and ``quality`` where the answer names none, and where the request
names none either, the API's documented default for the model (OpenAI's API reference,
platform.openai.com/docs/api-reference/images/create: ``size`` "Defaults to 1024x1024" for
``dall-e-2`` and ``dall-e-3``; ``quality`` ``standard`` is "the only option for dall-e-2", and
"Defaults to standard" for ``dall-e-3``, as Azure OpenAI's ``imageQuality`` schema states it too).
Any other model has no default here: a size or quality that stays unknown prices the call only
when every price it could be is one (``Price.image_fee``), else it is unsettled
``unpriced_component``.
"""

from __future__ import annotations

import re
from dataclasses import replace

from worker.core.result import Usage

DALL_E = re.compile(r"(?:.*/)?dall-e-[23]")
"""OpenAI's DALL·E models (with a provider prefix): their documented defaults apply."""
DALL_E_SIZE = "1024x1024"
DALL_E_QUALITY = "standard"


def with_image_options(usage: Usage, *, size: str | None, quality: str | None, model: str) -> Usage:
    """``usage`` with the size and quality of its per-image images filled in (module docstring);
    ``usage`` as it is when it has no such images."""
    if not usage.images:
        return usage
    defaults = DALL_E.fullmatch(model) is not None
    size = usage.image_size or size or (DALL_E_SIZE if defaults else None)
    quality = usage.image_quality or quality or (DALL_E_QUALITY if defaults else None)
    return replace(usage, image_size=size, image_quality=quality)
