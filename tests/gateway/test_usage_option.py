"""Asking the upstream for usage, stripping its chunk for the client, and undoing a response's
Content-Encoding, as pure functions. The oracles are written apart: a dict merge, the events cut at
their blank lines by hand, the standard library's own compressors."""

from __future__ import annotations

import gzip
import importlib.util
import itertools
import json
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.gateway.content_coding import ResponseDecoder
from worker.gateway.usage_option import (
    UsageChunkStrip,
    is_usage_chunk,
    usage_options,
    with_usage_asked,
)

scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=20)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
others = st.dictionaries(
    st.text(max_size=12).filter(lambda k: k not in ("stream", "stream_options")), values, max_size=5
)
options = st.none() | st.dictionaries(
    st.sampled_from(["include_usage", "include_obfuscation", "x"]), st.booleans(), max_size=3
)


@given(others, options, st.sampled_from([None, 2, (",", ":"), (", ", ": ")]), st.booleans())
def test_the_forwarded_body_is_the_clients_with_usage_asked(
    rest: dict, client_options: dict | None, layout: object, ascii_only: bool
) -> None:
    body = {**rest, "stream": True}
    if client_options is not None:
        body["stream_options"] = client_options
    indent = layout if isinstance(layout, int) else None
    separators = layout if isinstance(layout, tuple) else None
    raw = json.dumps(body, indent=indent, separators=separators, ensure_ascii=ascii_only).encode()
    wanted = usage_options(body)
    if client_options is not None and client_options.get("include_usage"):
        assert wanted is None
        return
    assert wanted is not None
    forwarded = with_usage_asked(raw, body, wanted)
    expected = dict(body)
    expected["stream_options"] = {**(client_options or {}), "include_usage": True}
    assert json.loads(forwarded) == expected
    if b"stream_options" not in raw and b"\\u" not in raw:  # spliced: the client's bytes kept
        assert forwarded.startswith(raw.rstrip()[:-1])
        assert forwarded.count(b"stream_options") == 1


def test_usage_is_asked_only_of_a_stream_that_did_not_ask() -> None:
    assert usage_options({"stream": False}) is None
    assert usage_options({}) is None
    assert usage_options({"stream": True, "stream_options": {"include_usage": True}}) is None
    assert usage_options({"stream": True, "stream_options": "x"}) is None  # the upstream says 400
    assert usage_options({"stream": "true"}) == {"include_usage": True}  # truthy, as the app reads
    assert usage_options({"stream": True, "stream_options": {"include_usage": False}}) == {
        "include_usage": True
    }


def test_a_body_in_utf16_or_with_a_lone_surrogate_is_written_again() -> None:
    body = {"stream": True, "messages": [{"role": "user", "content": "\ud800"}]}
    raw = json.dumps(body).encode("utf-16")
    forwarded = with_usage_asked(raw, body, {"include_usage": True})
    assert json.loads(forwarded) == {**body, "stream_options": {"include_usage": True}}


CHUNK = b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"hi"}}],"usage":null}\n\n'
USAGE = b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n'
DONE = b"data: [DONE]\n\n"


@given(st.lists(st.integers(0, 3 * len(CHUNK) + len(USAGE) + len(DONE)), max_size=8))
def test_the_client_gets_every_event_but_the_usage_chunk_whatever_the_chunking(
    cuts: list[int],
) -> None:
    body = CHUNK + CHUNK + USAGE + DONE
    points = sorted({0, len(body), *cuts})
    strip = UsageChunkStrip()
    out = b"".join(strip.feed(body[a:b]) for a, b in itertools.pairwise(points))
    out += strip.rest()
    assert out == CHUNK + CHUNK + DONE
    assert strip.stripped == 1


def test_what_is_a_usage_chunk() -> None:
    assert is_usage_chunk(USAGE)
    assert is_usage_chunk(USAGE.replace(b"\n", b"\r\n"))
    assert is_usage_chunk(b'data: {"usage": {"prompt_tokens": 1}, "choices": [ ]}\n\n')
    assert not is_usage_chunk(b'data: {"choices":[],"usage":{"a":1}} \n\n'.replace(b"[]", b"[1]"))
    assert not is_usage_chunk(CHUNK)
    assert not is_usage_chunk(b'data: {"choices":[{"index":0}],"usage":{"prompt_tokens":1}}\n\n')
    assert not is_usage_chunk(b'data: {"choices":[],"usage":null}\n\n')
    assert not is_usage_chunk(b'data: {"choices":[],"usage":\n\n')


def _pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@given(
    st.binary(max_size=2000),
    st.sampled_from(["gzip", "x-gzip", "deflate", "raw-deflate", "gzip, gzip"]),
    st.lists(st.integers(0, 4000), max_size=6),
)
def test_a_coded_body_decodes_to_its_bytes_whatever_the_chunking(
    data: bytes, coding: str, cuts: list[int]
) -> None:
    if coding in ("gzip", "x-gzip"):
        coded = gzip.compress(data)
    elif coding == "gzip, gzip":
        coded = gzip.compress(gzip.compress(data))
    elif coding == "deflate":
        coded = zlib.compress(data)
    else:
        packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        coded = packer.compress(data) + packer.flush()
        coding = "deflate"
    decoder = ResponseDecoder.for_header(coding)
    assert decoder is not None and not decoder.failed
    assert b"".join(decoder.feed(piece) for piece in _pieces(coded, cuts)) == data
    assert not decoder.failed


def test_nothing_to_undo_and_what_cannot_be_undone() -> None:
    assert ResponseDecoder.for_header(None) is None
    assert ResponseDecoder.for_header("identity") is None
    decoder = ResponseDecoder.for_header("compress")
    assert decoder is not None and decoder.failed and decoder.feed(b"x") == b""
    broken = ResponseDecoder.for_header("gzip")
    assert broken is not None
    assert broken.feed(b"not gzip at all") == b"" and broken.failed


@pytest.mark.skipif(
    importlib.util.find_spec("brotli") is not None
    or importlib.util.find_spec("brotlicffi") is not None,
    reason="brotli is installed here",
)
def test_br_without_its_library_cannot_be_undone() -> None:
    decoder = ResponseDecoder.for_header("br")
    assert decoder is not None and decoder.failed
