"""A response body cut into its Server-Sent Events exactly as the bytes were sent, whatever the
chunking of the body (pure).

An event ends at a blank line: a line end (CRLF, LF or CR, as the SSE spec has it) followed by
another. Each event is returned with its line ends and the blank line that ends it, so the events
put together are the body byte for byte. A CR at the very end of what was fed may be the first half
of a CRLF, so the event it would end waits for the next bytes (or ``rest``).
"""

from __future__ import annotations

import re

# Atomic groups: a CRLF is one line end, never a CR line end followed by an empty LF line.
_BLANK_LINE = re.compile(rb"(?>\r\n|\r|\n)(?>\r\n|\r|\n)")
_CR = 13
_LF = 10
_LF_BLANK = b"\n\n"


class EventSplitter:
    """Feed it the body's chunks in order; it returns the events each chunk completes."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[bytes]:
        """The events ``data`` completes, in order (often none, often one)."""
        held = self._buffer
        # Exactly one whole event with LF line ends (how OpenAI chunks its stream): as it came.
        one = len(data) > 1 and data.find(_LF_BLANK) == len(data) - 2
        if one and not held and b"\r" not in data:
            return [data]
        if held:
            buffer = held + data
            # A blank line may begin in the bytes held: its first line end is at most 2 bytes back.
            pos = max(0, len(held) - 2)
        else:
            buffer, pos = data, 0
        events: list[bytes] = []
        start = 0
        if b"\r" not in buffer:  # LF line ends only (OpenAI's): a blank line is two LFs
            found = buffer.find(_LF_BLANK, pos)
            while found != -1:
                events.append(buffer[start : found + 2])
                start = found + 2
                found = buffer.find(_LF_BLANK, start)
            self._buffer = buffer[start:] if start else buffer
            return events
        size = len(buffer)
        for match in _BLANK_LINE.finditer(buffer, pos):
            end = match.end()
            if end == size and buffer[end - 1] == _CR:
                break  # may be the CR of a CRLF whose LF comes next
            events.append(buffer[start:end])
            start = end
        self._buffer = buffer[start:] if start else buffer
        return events

    def feed_joined(self, data: bytes) -> tuple[bytes, int]:
        """The events ``data`` completes as one bytes (``b"".join(feed(data))``), and how many."""
        held = self._buffer
        buffer = held + data if held else data
        if b"\r" not in buffer:
            # LF line ends only: the events end at the non-overlapping "\n\n"s from the left
            # (``feed``'s scan); when the last one is a whole run of LFs, it ends the last event.
            last = buffer.rfind(_LF_BLANK)
            if last == -1:
                self._buffer = buffer
                return b"", 0
            if last == 0 or buffer[last - 1] != _LF:
                end = last + 2
                self._buffer = buffer[end:]
                return buffer[:end], buffer.count(_LF_BLANK)
        events = self.feed(data)
        return b"".join(events), len(events)

    def rest(self) -> bytes:
        """What was fed and not returned yet (a last event with no blank line after it), cleared."""
        rest, self._buffer = self._buffer, b""
        return rest


def events_of(body: bytes) -> list[bytes]:
    """``body`` cut into its events as an ``EventSplitter`` fed it at once cuts it, with what is
    left after the last blank line as a last event (``rest``): joined, they are ``body``."""
    splitter = EventSplitter()
    events = splitter.feed(body)
    rest = splitter.rest()
    if rest:
        events.append(rest)
    return events
