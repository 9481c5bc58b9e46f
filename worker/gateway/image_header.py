"""An image's width and height from its header bytes: PNG, JPEG, GIF and WebP (pure; no Pillow).

The request entry keeps an image part's size, not its bytes (``request_budget``): OpenAI prices an
image by its detail and its width and height. Only the header is read, through ``read(offset,
size)``, so a data URL of a few MB is decoded a few bytes at a time (``Base64Bytes``), never whole:

* PNG: the ``IHDR`` chunk, which the format puts first (width, height: 4 bytes big-endian each);
* GIF: the logical screen descriptor after ``GIF87a``/``GIF89a`` (2 bytes little-endian each);
* WebP: the first chunk after ``RIFF…WEBP``: ``VP8 `` (lossy: 14 bits each after the start code
  ``9d 01 2a``), ``VP8L`` (lossless: 14 bits each, minus one, after the signature ``2f``) or
  ``VP8X`` (extended: the canvas, 24 bits each, minus one);
* JPEG: the segments from ``SOI`` on, by their lengths, until a start of frame (``SOF0``-``SOF15``
  but ``DHT``, ``JPG`` and ``DAC``): height and width, 2 bytes big-endian each. The EXIF
  orientation is not applied (the stored size is the one returned).

Anything else, or a header cut short or inconsistent, gives None: the caller omits the size.
"""

from __future__ import annotations

import binascii
from collections.abc import Callable

Reader = Callable[[int, int], bytes]

# JPEG start-of-frame markers: C0-CF but C4 (DHT), C8 (JPG) and CC (DAC).
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# Markers that stand alone, without a length: TEM, RST0-7, SOI.
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD9)})
# A JPEG with more segments than this before its frame header is not read further.
MAX_JPEG_SEGMENTS = 512
# The largest side any of these formats can state (JPEG and GIF: 2^16 - 1; PNG: 2^31 - 1).
MAX_SIDE = 2**31 - 1


def _size(width: int, height: int) -> tuple[int, int] | None:
    if 0 < width <= MAX_SIDE and 0 < height <= MAX_SIDE:
        return width, height
    return None


def _webp(head: bytes) -> tuple[int, int] | None:
    chunk = head[12:16]
    if chunk == b"VP8 " and head[23:26] == b"\x9d\x01\x2a" and len(head) >= 30:
        width = int.from_bytes(head[26:28], "little") & 0x3FFF
        height = int.from_bytes(head[28:30], "little") & 0x3FFF
        return _size(width, height)
    if chunk == b"VP8L" and head[20:21] == b"\x2f" and len(head) >= 25:
        bits = int.from_bytes(head[21:25], "little")
        return _size((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    if chunk == b"VP8X" and len(head) >= 30:
        width = int.from_bytes(head[24:27], "little") + 1
        height = int.from_bytes(head[27:30], "little") + 1
        return _size(width, height)
    return None


def _jpeg(read: Reader) -> tuple[int, int] | None:
    offset = 2
    for _ in range(MAX_JPEG_SEGMENTS):
        head = read(offset, 9)
        if len(head) < 2 or head[0] != 0xFF:
            return None
        marker = head[1]
        if marker == 0xFF:  # a fill byte before the marker
            offset += 1
            continue
        if marker in _STANDALONE:
            offset += 2
            continue
        if marker in _SOF:
            if len(head) < 9:
                return None
            height = int.from_bytes(head[5:7], "big")
            width = int.from_bytes(head[7:9], "big")
            return _size(width, height)
        if marker in (0xD9, 0xDA) or len(head) < 4:  # the image ended, or its data began
            return None
        length = int.from_bytes(head[2:4], "big")
        if length < 2:
            return None
        offset += 2 + length
    return None


def image_size(read: Reader) -> tuple[int, int] | None:
    """(width, height) of the PNG, JPEG, GIF or WebP image whose bytes ``read(offset, size)``
    gives (fewer at the end), else None."""
    head = read(0, 32)
    if head.startswith(b"\x89PNG\r\n\x1a\n") and head[12:16] == b"IHDR" and len(head) >= 24:
        return _size(int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big"))
    if head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        return _size(int.from_bytes(head[6:8], "little"), int.from_bytes(head[8:10], "little"))
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return _webp(head)
    if head[:3] == b"\xff\xd8\xff":
        return _jpeg(read)
    return None


class Base64Bytes:
    """The bytes a base64 text stands for, decoded only where read: byte ``i`` lies in the
    4-character group ``i // 3``. Whitespace (line breaks of MIME-style base64) is dropped first,
    which costs a copy of the text; the URL-safe alphabet is read as the standard one."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        if " " in text or "\n" in text or "\r" in text or "\t" in text:
            text = "".join(text.split())
        if "-" in text or "_" in text:
            text = text.replace("-", "+").replace("_", "/")
        self.text = text

    def __len__(self) -> int:
        """How many bytes the text decodes to (its padding, or a short last group, counted)."""
        text = self.text
        size = len(text) * 3 // 4
        if text.endswith("=="):
            size -= 2
        elif text.endswith("="):
            size -= 1
        return max(size, 0)

    def read(self, offset: int, size: int) -> bytes:
        if offset < 0 or size <= 0:
            return b""
        group = offset // 3
        end = -(-(offset + size) // 3)
        chunk = self.text[group * 4 : end * 4]
        chunk = chunk.rstrip("=")
        chunk += "=" * (-len(chunk) % 4)
        try:
            data = binascii.a2b_base64(chunk)
        except (binascii.Error, ValueError):
            return b""
        skip = offset - group * 3
        return data[skip : skip + size]


def data_url(url: str) -> tuple[str, Base64Bytes] | None:
    """The media type and the bytes of a base64 ``data:`` URL (``data:image/png;base64,…``), else
    None (another URL, or a data URL that is not base64). Only the URL's first 256 characters are
    searched for its header."""
    if not url.startswith(("data:", "DATA:", "Data:")):
        return None
    comma = url.find(",", 5, 256)
    if comma < 0:
        return None
    header = url[5:comma]
    params = header.split(";")
    if "base64" not in (param.strip().lower() for param in params[1:]):
        return None
    return params[0].strip().lower(), Base64Bytes(url[comma + 1 :])
