"""The response body cut into SSE events: byte-exact, whatever the chunking of ``send`` calls.

The oracle is written apart from ``worker.gateway.events``: it walks the whole body line by line
(a line end is CRLF, LF or CR, as the SSE spec has it) and ends an event after each empty line.
"""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from worker.gateway.events import EventSplitter


def oracle(body: bytes) -> list[bytes]:
    events: list[bytes] = []
    current = b""
    line_empty = True  # at the start of a line: has this line any content yet?
    i = 0
    while i < len(body):
        byte = body[i : i + 1]
        if byte in (b"\r", b"\n"):
            end = body[i : i + 2] if body[i : i + 2] == b"\r\n" else byte
            current += end
            i += len(end)
            # An empty line ends the event, unless it is the event's first line: then no line
            # end came before it and it is not yet a blank line after one.
            if line_empty and current != end:
                events.append(current)
                current = b""
            line_empty = True
        else:
            current += byte
            line_empty = False
            i += 1
    if current:
        events.append(current)
    return events


def split(chunks: list[bytes]) -> list[bytes]:
    splitter = EventSplitter()
    events = [event for chunk in chunks for event in splitter.feed(chunk)]
    rest = splitter.rest()
    return [*events, rest] if rest else events


pieces = st.sampled_from(
    [
        b'data: {"a":1}',
        b"data: [DONE]",
        b": keep-alive",
        b"event: error",
        b"\r",
        b"\n",
        b"\r\n",
        b"x",
    ]
)
bodies = st.lists(pieces, max_size=40).map(b"".join)


@st.composite
def chunked(draw: st.DrawFn) -> tuple[bytes, list[bytes]]:
    body = draw(bodies)
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=12)))
    bounds = [0, *cuts, len(body)]
    return body, [body[a:b] for a, b in itertools.pairwise(bounds)]


@given(chunked())
def test_any_chunking_gives_the_events_of_the_whole_body(case: tuple[bytes, list[bytes]]) -> None:
    body, chunks = case
    events = split(chunks)
    assert b"".join(events) == body
    assert events == split([body])


@given(bodies)
def test_events_match_the_line_by_line_oracle(body: bytes) -> None:
    assert split([body]) == oracle(body)


def test_crlf_split_across_chunks_is_one_line_end() -> None:
    splitter = EventSplitter()
    assert splitter.feed(b"data: 1\r\n\r") == []
    assert splitter.feed(b"\ndata: 2\r\n") == [b"data: 1\r\n\r\n"]
    assert splitter.rest() == b"data: 2\r\n"


def test_openai_stream_one_event_per_chunk() -> None:
    splitter = EventSplitter()
    assert splitter.feed(b'data: {"id":"c"}\n\n') == [b'data: {"id":"c"}\n\n']
    assert splitter.feed(b"data: [DONE]\n\n") == [b"data: [DONE]\n\n"]
    assert splitter.rest() == b""


# LF line ends only (OpenAI's and most providers'), with runs of LFs: ``feed_joined``'s fast path.
lf_bodies = st.lists(
    st.sampled_from([b'data: {"a":1}', b"data: [DONE]", b"\n", b"\n\n", b"x"]), max_size=40
).map(b"".join)


@given(st.one_of(chunked(), lf_bodies.map(lambda body: (body, [body]))), st.data())
def test_feed_joined_is_the_events_feed_returns_joined_and_counted(
    case: tuple[bytes, list[bytes]], data: st.DataObject
) -> None:
    body, chunks = case
    if len(chunks) == 1:  # an LF body: cut it here
        cuts = sorted(data.draw(st.lists(st.integers(0, len(body)), max_size=12)))
        chunks = [body[a:b] for a, b in itertools.pairwise([0, *cuts, len(body)])]
    joined, plain = EventSplitter(), EventSplitter()
    for chunk in chunks:
        events = plain.feed(chunk)
        assert joined.feed_joined(chunk) == (b"".join(events), len(events))
    assert joined.rest() == plain.rest()


def test_feed_joined_ends_at_the_last_blank_line_of_a_run_of_line_feeds() -> None:
    # "a\n\n" is an event; the third LF starts the next one (the oracle's reading).
    splitter = EventSplitter()
    assert splitter.feed_joined(b"a\n\n\n") == (b"a\n\n", 1)
    assert splitter.feed_joined(b"\nb\n\n") == (b"\n\nb\n\n", 2)
    assert oracle(b"a\n\n\n\nb\n\n") == [b"a\n\n", b"\n\n", b"b\n\n"]
