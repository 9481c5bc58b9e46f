"""The frames of a call's recorded stream, numbered across its records (pure, never raises)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from worker.core.errors import FrameError
from worker.core.sse import BadFrame, Frame, iter_frames, json_kind

_Body = bytes | bytearray | memoryview | str


def frames_of(body: _Body | Iterable[Any]) -> Iterator[Frame]:
    """Every frame of ``body`` (one record, or records each holding one or more SSE events), in
    order; a record that is not bytes or text is a ``BadFrame``."""
    records = [body] if isinstance(body, _Body) else body
    index = 0
    for record in records:
        if not isinstance(record, _Body):
            yield BadFrame(
                FrameError(index, f"record is not bytes or text (got {json_kind(record)})")
            )
            index += 1
            continue
        for frame in iter_frames(record, index):
            index = frame.index + 1
            yield frame


def text_of(value: object) -> str | None:
    """``value`` when it is a string (an id, a model name, a tier the answer states), else None."""
    return value if isinstance(value, str) else None


def count_of(value: object) -> int | None:
    """``value`` when it is an integer (not a boolean), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None
