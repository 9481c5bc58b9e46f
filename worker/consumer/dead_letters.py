"""Writing the dead-letter stream (``keys.dead``): one place, so every writer bounds it the same way.

The stream is capped near ``BILLING_DEAD_LETTER_MAXLEN`` entries (``XADD … MAXLEN ~``: Redis trims
whole nodes, so it may hold a little more), the oldest letters dropped first; each letter's fields
are capped by ``entries.dead_letter_fields``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from worker.contract.keys import Keys


def write_dead_letters(
    pipe: Any, keys: Keys, letters: Iterable[dict[str, Any]], maxlen: int
) -> None:
    """Queue ``letters`` on ``pipe`` (executed by the caller, after its commit)."""
    for letter in letters:
        pipe.xadd(keys.dead, letter, maxlen=maxlen, approximate=True)
