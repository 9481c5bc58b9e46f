"""The request entry within its budget (``worker.gateway.request_budget``), the image header reader
(``image_header``) and how the gateway reads a request (``metadata``, ``refusals``): pure, no
servers. What reaches the ledger through the real middleware and LiteLLM proxy is
test_request_edges.py's."""

from __future__ import annotations

import base64
import copy
import json
import os
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.contract.entries import MAX_ENTRY_BYTES
from worker.core.request import RequestMeta, parse_request
from worker.gateway.image_header import Base64Bytes, data_url, image_size
from worker.gateway.metadata import asks_to_stream, include_usage, read_body, usable_account
from worker.gateway.refusals import refusal
from worker.gateway.request_budget import (
    MARK_BYTES,
    REQUEST_BUDGET_BYTES,
    clean,
    entry_body,
    slim_messages,
)

# Made by Pillow 13.0 (not a dependency: made once, kept here), each 37 x 21 pixels: a PNG, a GIF,
# a baseline JPEG with an EXIF segment before its frame header, a progressive JPEG, and WebP's
# three kinds (lossy VP8, lossless VP8L, extended VP8X with alpha).
IMAGES = {
    "png": (
        "iVBORw0KGgoAAAANSUhEUgAAACUAAAAVCAIAAABOhrD5AAAAgElEQVR4nL3VsQ3AIAxEUfAgZg32r1gDFkm6KCIk"
        "4Dscdy6+nuTGMYSjaAro5FZNuRRNuVXYs+YCNAwpQMOQAjQMKfflB1K63ZvsPW9y4LmSY8+PfPWcyC/Pg5x428m5"
        "t5dc8jaSsaiuZ9bv88xtHk+u3vMa8rBmjyQRjyFBDyZPPNpvL9yyIdAAAAAASUVORK5CYII="
    ),
    "gif": (
        "R0lGODdhJQAVAIMAAJkAAMwAAJkzAMwzAJkAM8wAM5kzM8wzMwAA/wAAAAAAAAAAAAAAAAAAAAAAAAAAACwAAAAA"
        "JQAVAEAI/wARHAgwsCDBgwYNCkTIMOGBAQUMQIS48MABAAULDDCAcEDBAQg0ajwwkmABASMxinxYQKBHghgREphI"
        "wCBBihA5HkC5keDMiAQtBlgoMWJOiCJ1Jhw60IDDhh0rLtU5YGZBnQQRTCTpUeNPiAoLig1KVqjQiivBbjXpUeBI"
        "kWtJkuTZMmNXsGzHVmwIVkDTkmgnFljKEudghE3Lfqz71G7JgSFfmi17twBTxZjNQmbJWe1gj5uhEmZYUbBgszgd"
        "c/04UO3epXBFan1cOa7sh1xFPgacUKOBtAUeX6a6mO5DqWURvu3qcqTtjZ9fXxxb8GfoxZw7tjyN+Cbtut49exNU"
        "2dZ3ZrZvmzZWDfJwwZjZpwcEADs="
    ),
    "jpeg_exif": (
        "/9j/4AAQSkZJRgABAQAAAQABAAD/4QB4RXhpZgAATU0AKgAAAAgAAgEPAAIAAABJAAAAJgESAAMAAAABAAYAAAAA"
        "AABDYW1lcmFDYW1lcmFDYW1lcmFDYW1lcmFDYW1lcmFDYW1lcmFDYW1lcmFDYW1lcmFDYW1lcmFDYW1lcmFDYW1l"
        "cmFDYW1lcmEAAP/bAEMAGxIUFxQRGxcWFx4cGyAoQisoJSUoUTo9MEJgVWVkX1VdW2p4mYFqcZBzW12FtYaQnqOr"
        "ratngLzJuqbHmairpP/bAEMBHB4eKCMoTisrTqRuXW6kpKSkpKSkpKSkpKSkpKSkpKSkpKSkpKSkpKSkpKSkpKSk"
        "pKSkpKSkpKSkpKSkpKSkpP/AABEIABUAJQMBIgACEQEDEQH/xAAfAAABBQEBAQEBAQAAAAAAAAAAAQIDBAUGBwgJ"
        "Cgv/xAC1EAACAQMDAgQDBQUEBAAAAX0BAgMABBEFEiExQQYTUWEHInEUMoGRoQgjQrHBFVLR8CQzYnKCCQoWFxgZ"
        "GiUmJygpKjQ1Njc4OTpDREVGR0hJSlNUVVZXWFlaY2RlZmdoaWpzdHV2d3h5eoOEhYaHiImKkpOUlZaXmJmaoqOk"
        "paanqKmqsrO0tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4eLj5OXm5+jp6vHy8/T19vf4+fr/xAAfAQADAQEBAQEB"
        "AQEBAAAAAAAAAQIDBAUGBwgJCgv/xAC1EQACAQIEBAMEBwUEBAABAncAAQIDEQQFITEGEkFRB2FxEyIygQgUQpGh"
        "scEJIzNS8BVictEKFiQ04SXxFxgZGiYnKCkqNTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqC"
        "g4SFhoeIiYqSk5SVlpeYmZqio6Slpqeoqaqys7S1tre4ubrCw8TFxsfIycrS09TV1tfY2dri4+Tl5ufo6ery8/T1"
        "9vf4+fr/2gAMAwEAAhEDEQA/AM/7n+7/ACp1FN+5/u/yrH4vU9b4fQUjIoB5wev86WkIyKE+jG11QtFN3AcMQD/O"
        "ijkl0QuZdx1FFFSUNHytt7EZHtTqKKqXRkx6oKKKKko//9k="
    ),
    "jpeg_progressive": (
        "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDABsSFBcUERsXFhceHBsgKEIrKCUlKFE6PTBCYFVlZF9VXVtqeJmBanGQ"
        "c1tdhbWGkJ6jq62rZ4C8ybqmx5moq6T/2wBDARweHigjKE4rK06kbl1upKSkpKSkpKSkpKSkpKSkpKSkpKSkpKSk"
        "pKSkpKSkpKSkpKSkpKSkpKSkpKSkpKSkpKT/wgARCAAVACUDASIAAhEBAxEB/8QAFgABAQEAAAAAAAAAAAAAAAAA"
        "AAEE/8QAFwEBAQEBAAAAAAAAAAAAAAAAAQACBP/aAAwDAQACEAMQAAABz1MdZZVRVAyiAP8A/8QAFBABAAAAAAAA"
        "AAAAAAAAAAAAMP/aAAgBAQABBQJ//8QAFxEBAAMAAAAAAAAAAAAAAAAAEAERMf/aAAgBAwEBPwHCyD//xAAXEQEB"
        "AQEAAAAAAAAAAAAAAAAQAREx/9oACAECAQE/AemUp//EABQQAQAAAAAAAAAAAAAAAAAAADD/2gAIAQEABj8Cf//E"
        "ABoQAAICAwAAAAAAAAAAAAAAABAxEXEBIFH/2gAIAQEAAT8hVbKjPSswf//aAAwDAQACAAMAAAAQA1AAAA//xAAa"
        "EQACAgMAAAAAAAAAAAAAAAAAARBBEVGh/9oACAEDAQE/EOBq0Ybiyj//xAAZEQACAwEAAAAAAAAAAAAAAAAAARBB"
        "UaH/2gAIAQIBAT8Q6E6Zkoo4/8QAHhABAAIBBAMAAAAAAAAAAAAAARARACFRsfAxYXH/2gAIAQEAAT8Q7bQlmDrT"
        "55nttCWZQ0QPMnwJZ6n/2Q=="
    ),
    "webp_lossy": (
        "UklGRroAAABXRUJQVlA4IK4AAAAQBQCdASolABUAPw1urFAsJiQitVQMAYAhiWxp90ACJ1KH3AOknBnXlr6whS3Z"
        "84iMAP7qb8xlY+LRHN2r/vrqmkezATPeENaQjktZY94Q1pC/9xJtUR/4FfgVbD+oCxuyuTHuNvXKEEmuEfoeneUp"
        "qjJDbUJg2bK8tl91DWN9uemUmtcsVp0UYoP3frRrXiZBF72OS1RoYZoU/mAxnv4IXUGNhv49Th/kc0AAAAA="
    ),
    "webp_lossless": (
        "UklGRloAAABXRUJQVlA4TE0AAAAvJAAFAA8wHoP8j//5Dx44iiQ5jiD4ee82VEETFEHQ07eTRkT/49PkVeVWZOdL"
        "503jTmVPocenxavGrcTOX+ensaqMCgOf8Aq3sAtdAAA="
    ),
    "webp_alpha": (
        "UklGRmgAAABXRUJQVlA4WAoAAAAQAAAAJAAAFAAAQUxQSAoAAAABB1DAiAhERP8DVlA4IDgAAAAwAwCdASolABUA"
        "PxGGu1csKSYjpWgBgCIJZwDOsA8KmggAAP7l+jxhNJbd/7g/UH8QT1oxixAAAA=="
    ),
}
SIZE = (37, 21)
MEDIA_TYPES = {"png": "png", "gif": "gif", "jpeg": "jpeg", "webp": "webp"}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def url(name: str) -> str:
    return f"data:image/{MEDIA_TYPES[name.split('_')[0]]};base64,{IMAGES[name]}"


def reader(data: bytes) -> Any:
    return lambda offset, size: data[offset : offset + size]


def entry(messages: Any, tools: Any = (), **extra: Any) -> dict[str, Any]:
    """A request entry as the middleware builds it (docs/events.md §1)."""
    return {
        "request_id": "req_budget",
        "account_id": "acct_budget",
        "model": "gpt-4o",
        "stream": True,
        "include_usage": True,
        "reserved_micros": 12_345,
        "created_at": "2026-12-06T12:00:00.000Z",
        "messages": messages,
        "tools": list(tools),
        "n": 2,
        "max_tokens": 100,
        "temperature": 0.5,
        "seed": 7,
        "idempotency_key": None,
        "provider": "openai",
        **extra,
    }


def money(meta: RequestMeta) -> tuple[Any, ...]:
    return (
        meta.request_id, meta.account_id, meta.model, meta.stream, meta.include_usage,
        meta.reserved_micros, meta.created_at, meta.n, meta.max_tokens, meta.temperature,
        meta.seed, meta.provider,
    )  # fmt: skip


MONEY = money(parse_request(orjson.dumps(entry([]))))


# -------------------------------------------------------------------------------- image headers


def test_the_budget_is_below_what_the_worker_accepts() -> None:
    assert REQUEST_BUDGET_BYTES == 768 << 10 < MAX_ENTRY_BYTES


@pytest.mark.parametrize("name", IMAGES)
def test_the_size_of_images_made_by_a_real_encoder(name: str) -> None:
    raw = base64.b64decode(IMAGES[name])
    assert image_size(reader(raw)) == SIZE
    assert image_size(Base64Bytes(IMAGES[name]).read) == SIZE
    # MIME's line breaks, the URL-safe alphabet without padding: the same bytes.
    for text in (base64.encodebytes(raw).decode(), base64.urlsafe_b64encode(raw).decode()):
        for variant in (text, text.rstrip("=\n")):
            assert image_size(Base64Bytes(variant).read) == SIZE
            assert len(Base64Bytes(variant)) == len(raw)
    media, data = data_url(url(name))  # type: ignore[misc]
    assert media.startswith("image/") and image_size(data.read) == SIZE


@pytest.mark.parametrize("name", IMAGES)
def test_a_cut_or_damaged_image_gives_its_size_or_none_never_another(name: str) -> None:
    raw = base64.b64decode(IMAGES[name])
    for end in range(len(raw)):
        assert image_size(reader(raw[:end])) in (None, SIZE)
    for at in range(min(len(raw), 64)):
        for value in (0x00, 0xFF):
            damaged = raw[:at] + bytes([value]) + raw[at + 1 :]
            size = image_size(reader(damaged))
            assert size is None or (size[0] > 0 and size[1] > 0)


def test_jpeg_fill_bytes_and_segments_before_the_frame_header() -> None:
    raw = base64.b64decode(IMAGES["jpeg_exif"])
    assert raw[20:22] == b"\xff\xe1"  # the EXIF segment after APP0: walked by its length
    filled = raw[:20] + b"\xff\xff\xff" + raw[20:]
    assert image_size(reader(filled)) == SIZE


@pytest.mark.parametrize(
    "data",
    [b"", b"hello", b"GIF89a", b"\x89PNG\r\n\x1a\n", b"RIFF\0\0\0\0WEBPVP8 ", b"\xff\xd8\xff\xd9"],
)
def test_what_is_not_a_known_image_has_no_size(data: bytes) -> None:
    assert image_size(reader(data)) is None


def test_data_urls() -> None:
    assert data_url("https://example.com/a.png") is None
    assert data_url("data:text/plain,hello") is None  # not base64
    assert data_url("data:image/png;base64" + "A" * 400) is None  # no comma in the header
    media, data = data_url("data:Image/PNG;charset=x;base64,aGVsbG8=")  # type: ignore[misc]
    assert (media, data.read(0, 99), len(data)) == ("image/png", b"hello", 5)


# -------------------------------------------------------------------------------- placeholders


def test_every_image_part_is_its_placeholder_whatever_its_size() -> None:
    text = {"type": "text", "text": "What is in these?"}
    messages = [
        {
            "role": "user",
            "content": [
                text,
                {"type": "image_url", "image_url": {"url": url("png"), "detail": "low"}},
                {"type": "image_url", "image_url": {"url": url("webp_lossy")}},
                {"type": "image_url", "image_url": {"url": "https://example.com/c.png",
                                                    "detail": "high", "width": 1, "height": 1}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,bm90IGFuIGltYWdl"}},
                {"type": "image_url", "image_url": url("gif")},  # a bare string, as some send
            ],
        }
    ]  # fmt: skip
    sized = {"width": 37, "height": 21}
    assert slim_messages(messages) == [
        {
            "role": "user",
            "content": [
                text,
                {"type": "image_url", "image_url": {"detail": "low", **sized}},
                {"type": "image_url", "image_url": {"detail": "auto", **sized}},
                {"type": "image_url", "image_url": {"detail": "high"}},
                {"type": "image_url", "image_url": {"detail": "auto"}},
                {"type": "image_url", "image_url": {"detail": "auto", **sized}},
            ],
        }
    ]


def test_audio_and_file_parts_keep_how_many_bytes_they_held() -> None:
    wav, pdf = bytes(range(256)) * 40, b"%PDF-1.7" + b"x" * 1000
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "input_audio", "input_audio": {"data": b64(wav), "format": "wav"}},
                {"type": "file", "file": {"file_data": "data:application/pdf;base64," + b64(pdf),
                                          "filename": "contract.pdf"}},
                {"type": "file", "file": {"file_id": "file-abc123"}},
            ],
        }
    ]  # fmt: skip
    slim = slim_messages(messages)
    assert slim[0]["content"] == [  # type: ignore[index]
        {"type": "input_audio", "input_audio": {"format": "wav", "omitted_bytes": 10_240}},
        {"type": "file", "file": {"omitted_bytes": 1_008}},
        {"type": "file", "file": {"file_id": "file-abc123", "omitted_bytes": 0}},
    ]
    assert slim_messages(slim) == slim  # a placeholder stays what it is


def test_the_messages_given_are_never_changed_and_an_omitted_chars_sent_is_dropped() -> None:
    messages = [
        {"role": "user", "omitted_chars": -5, "content": [
            {"type": "text", "text": "hi", "omitted_chars": -1_000_000},
            {"type": "image_url", "image_url": {"url": url("png")}},
        ]},
        {"role": "user", "content": "x" * 5_000},
    ]  # fmt: skip
    before = copy.deepcopy(messages)
    slim = slim_messages(messages)
    assert slim[0] == {  # type: ignore[index]
        "role": "user",
        "content": [
            {"type": "text", "text": "hi"},
            {"type": "image_url", "image_url": {"detail": "auto", "width": 37, "height": 21}},
        ],
    }
    assert slim[1] is messages[1]  # type: ignore[index]  # nothing to change: not copied
    entry_body(entry(messages), budget=2_048)
    assert messages == before


# -------------------------------------------------------------------------------- the budget


def test_a_vision_call_with_an_image_of_several_mb_fits_with_the_images_size() -> None:
    raw = base64.b64decode(IMAGES["jpeg_exif"])
    big = raw[:-2] + os.urandom(3 << 20) + raw[-2:]  # the scan data padded to 3 MiB
    image = {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + b64(big)}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "Describe it."}, image]}]
    body = entry_body(entry(messages))
    assert len(body) < 1_000
    meta = parse_request(body)  # the worker's own reader
    assert money(meta) == MONEY
    assert meta.messages[0]["content"][1] == {
        "type": "image_url",
        "image_url": {"detail": "auto", "width": 37, "height": 21},
    }


def test_past_the_budget_the_longest_strings_are_cut_to_one_prefix_and_counted() -> None:
    long, medium = "word " * 300_000, "x" * 200_000
    arguments = json.dumps({"blob": "y" * 400_000})
    description = "d" * 300_000
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": long},
        {"role": "user", "content": [{"type": "text", "text": medium},
                                     {"type": "text", "text": "short"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "lookup", "arguments": arguments}}]},
    ]  # fmt: skip
    tools = [{"type": "function", "function": {"name": "lookup", "description": description,
                                               "parameters": {"type": "object"}}}]  # fmt: skip
    body = entry_body(entry(messages, tools))
    assert REQUEST_BUDGET_BYTES - 4 * MARK_BYTES - 64 <= len(body) <= REQUEST_BUDGET_BYTES
    meta = parse_request(body)
    assert money(meta) == MONEY
    system, user, parts, assistant = meta.messages
    assert system == messages[0]
    (cut_long,) = user["content"]
    cap = len(cut_long["text"])
    assert 0 < cap < len(medium)
    assert cut_long == {"type": "text", "text": long[:cap], "omitted_chars": len(long) - cap}
    assert parts["content"] == [
        {"type": "text", "text": medium[:cap], "omitted_chars": len(medium) - cap},
        {"type": "text", "text": "short"},
    ]
    function = assistant["tool_calls"][0]["function"]
    assert function == {
        "name": "lookup",
        "arguments": arguments[:cap],
        "omitted_chars": len(arguments) - cap,
    }
    (tool,) = meta.tools
    assert tool["function"] == {
        "name": "lookup",
        "description": description[:cap],
        "parameters": {"type": "object"},
        "omitted_chars": len(description) - cap,
    }


def test_a_prompt_too_large_even_cut_goes_with_its_money_and_omitted_messages() -> None:
    messages = [{"role": "user", "content": "hi"}] * 60_000  # 1.6 MB of short messages
    body = entry_body(entry(messages, [{"type": "function"}]))
    assert len(body) <= REQUEST_BUDGET_BYTES
    meta = parse_request(body)
    assert (meta.messages, meta.tools) == ((), ())
    assert orjson.loads(body)["omitted_messages"] is True
    assert money(meta) == MONEY


def test_past_that_only_the_money_fields_go() -> None:
    body = entry_body(entry([], idempotency_key="k" * (800 << 10)))
    meta = parse_request(body)
    assert money(meta) == MONEY and meta.idempotency_key is None
    assert len(body) <= REQUEST_BUDGET_BYTES


def test_what_orjson_cannot_write_is_made_writable() -> None:
    deep: Any = "bottom"
    for _ in range(300):
        deep = [deep]
    messages = [
        {"role": "user", "content": "a\ud800b", "x": 10**30, "\udfffkey": [10**400], "deep": deep}
    ]
    meta = orjson.loads(entry_body(entry(messages)))
    (message,) = meta["messages"]
    assert (message["content"], message["x"], message["\ufffdkey"]) == (
        "a\ufffdb",
        1e30,
        [str(10**400)],
    )
    assert json.dumps(message["deep"]).count("[") < 300
    assert clean({1: (1, 2), "a": object()}) == {"1": [1, 2], "a": None}


# -------------------------------------------------------------------------------- hypothesis


def _text(max_size: int) -> st.SearchStrategy[str]:
    return st.text(alphabet=st.characters(exclude_categories=()), max_size=max_size)


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | _text(40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text(8), inner, max_size=4),
    max_leaves=20,
)
_parts = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, _text(3_000)),
    st.builds(
        lambda name, detail: {"type": "image_url", "image_url": {"url": url(name), **detail}},
        st.sampled_from(sorted(IMAGES)),
        st.sampled_from([{}, {"detail": "low"}, {"detail": "high"}]),
    ),
    st.builds(
        lambda data: {"type": "input_audio", "input_audio": {"data": b64(data), "format": "mp3"}},
        st.binary(max_size=2_000),
    ),
    _json,
)
_messages = st.lists(
    st.one_of(
        st.builds(
            lambda role, content: {"role": role, "content": content},
            st.sampled_from(["system", "user", "assistant", "tool"]),
            _text(3_000) | st.lists(_parts, max_size=5),
        ),
        _json,
    ),
    max_size=10,
)
_tools = st.lists(
    st.builds(
        lambda name, description, extra: {
            "type": "function",
            "function": {"name": name, "description": description, "parameters": extra},
        },
        _text(30),
        _text(3_000),
        _json,
    ),
    max_size=3,
)


@settings(max_examples=300, deadline=None)
@given(_messages, _tools, st.integers(1_024, 12_000), st.none() | _text(2_000))
def test_any_messages_give_an_entry_within_its_budget_with_its_money(
    messages: list[Any], tools: list[Any], budget: int, key: str | None
) -> None:
    before = copy.deepcopy(messages)
    body = entry_body(entry(messages, tools, idempotency_key=key), budget)
    assert len(body) <= budget
    meta = parse_request(body)
    assert money(meta) == MONEY
    assert b'"url"' not in body or b"data:" not in body  # no image left whole
    assert messages == before
    published = orjson.loads(body)
    if not published.get("omitted_messages") and b'"omitted_chars"' not in body:
        # Nothing was cut: the messages are the slim ones, as they were.
        assert published["messages"] == orjson.loads(orjson.dumps(clean(slim_messages(messages))))


@settings(max_examples=100, deadline=None)
@given(_messages)
def test_slimming_twice_changes_nothing(messages: list[Any]) -> None:
    once = slim_messages(messages)
    assert slim_messages(once) == once


# -------------------------------------------------------------------------------- reading a request

BODY = '{"model": "gpt-4o", "messages": [{"role": "user", "content": "Say hé."}]}'


@pytest.mark.parametrize(
    "raw",
    [
        b"\xef\xbb\xbf" + BODY.encode(),
        *(BODY.encode(codec) for codec in ("utf-16", "utf-16-le", "utf-16-be")),
        *(BODY.encode(codec) for codec in ("utf-32", "utf-32-le", "utf-32-be")),
    ],
)
def test_bodies_pythons_json_reads_and_orjson_refuses_are_read(raw: bytes) -> None:
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(raw)
    assert read_body(raw) == json.loads(BODY)


def test_a_lone_surrogate_escape_is_read_as_the_replacement_character() -> None:
    raw = b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "a\\ud800b"}], "n": 1}'
    body = read_body(raw)
    assert body["messages"][0]["content"] == "a\ufffdb"
    orjson.dumps(body)  # publishable
    huge = read_body(b'{"seed": 100000000000000000000000, "temperature": NaN}')
    assert huge["seed"] == 1e23


@pytest.mark.parametrize("raw", [b"", b"model=gpt-4o", b'{"model":', b"\xff\xfe\x00\xd8"])
def test_what_is_not_json_at_all_is_none(raw: bytes) -> None:
    assert read_body(raw) is None


@pytest.mark.parametrize(
    ("value", "streamed"),
    [
        (True, True), ("true", True), ("false", True), ("1", True), (1, True), (0.5, True),
        ([0], True), (False, False), (None, False), ("", False), (0, False), ([], False),
    ],
)  # fmt: skip
def test_stream_is_read_as_the_app_reads_it(value: Any, streamed: bool) -> None:
    body = {"model": "o1-pro", "messages": [], "stream": value}
    assert asks_to_stream(body) is streamed
    assert (refusal(body, "key-1", ()) is not None) is streamed
    assert (refusal(body, None, ("o1-pro",)) is not None) is streamed
    body["stream_options"] = {"include_usage": "yes"}
    assert include_usage(body) is True
    body["stream_options"] = {"include_usage": 0}
    assert include_usage(body) is not streamed


@pytest.mark.parametrize(
    ("account", "reason"),
    [
        ("acct_1", None),
        ("a\x07b", "account_id: holds a control character or an unpaired surrogate"),
        ("a\ud800", "account_id: holds a control character or an unpaired surrogate"),
        ("x" * 201, "account_id: longer than 200 characters"),
        (" acct_1 ", "account_id: starts or ends with whitespace"),
        ("", "account_id: empty"),
        (7, "account_id: not a string but int"),
    ],
)
def test_an_account_the_worker_would_refuse_goes_to_the_fallback(
    account: Any, reason: str | None
) -> None:
    expected = ("acct_1" if reason is None else "fallback", reason)
    assert usable_account(account, "fallback") == expected


def test_inflate_undoes_the_content_encodings_a_client_may_send() -> None:
    import gzip
    import zlib

    from worker.gateway.metadata import MAX_INFLATED_BYTES, inflate

    text = b'{"model": "gpt-4o", "messages": []}'
    assert inflate(text, None) == inflate(text, "identity") == text
    assert inflate(gzip.compress(text), "gzip") == text
    assert inflate(zlib.compress(text), "deflate") == text
    raw_deflate = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    assert inflate(raw_deflate.compress(text) + raw_deflate.flush(), "deflate") == text
    assert inflate(gzip.compress(zlib.compress(text)), "deflate, gzip") == text
    assert inflate(text, "br") is None  # not known here: refused, never served unbilled
    assert inflate(b"not gzip", "gzip") is None
    assert inflate(gzip.compress(text)[:-6], "gzip") is None  # cut short
    bomb = gzip.compress(b"\0" * (MAX_INFLATED_BYTES + 1))
    assert len(bomb) < 1 << 20 and inflate(bomb, "gzip") is None
