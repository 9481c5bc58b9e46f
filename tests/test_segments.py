"""The content segment a call is calibrated by (``worker.core.segments``)."""

from __future__ import annotations

import pytest

from worker.core.result import Choice, ToolCall
from worker.core.segments import segment_of


@pytest.mark.parametrize(
    ("text", "segment"),
    [
        ("The invoice is due on Friday.", "latin"),
        ("Die Rechnung ist am Freitag fällig.", "latin"),
        ("会议改到星期三下午三点。", "chinese"),
        ("会議は水曜日の午後三時に変更になりました。", "japanese"),
        ("회의는 수요일 오후 세 시로 변경되었습니다.", "korean"),
        ("Счёт содержит десять строк.", "cyrillic"),
        ('{"a": 1, "b": [2, 3]}', "json"),
        ("Why?\n```\nx = 1\n```", "code"),
        ("12345 !!!", "other"),
    ],
)
def test_the_segment_of_a_user_text(text: str, segment: str) -> None:
    assert segment_of([{"role": "user", "content": text}], [], []) == segment


def test_tools_win_over_the_text() -> None:
    messages = [{"role": "user", "content": "会议改到星期三。"}]
    assert segment_of(messages, [{"type": "function", "function": {"name": "f"}}], []) == "tools"
    called = Choice(0, tool_calls=[ToolCall(0, "x", "function", "f", "{}")])
    assert segment_of(messages, [], [called]) == "tools"


@pytest.mark.parametrize("odd", [None, "text", 3, [None, 5], [{"role": "user", "content": 7}]])
def test_odd_input_is_a_segment_not_an_error(odd: object) -> None:
    assert segment_of(odd, odd, []) in {"other", "tools", "latin"}
