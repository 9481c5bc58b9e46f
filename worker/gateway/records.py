"""The spool file's framing (pure): a length and a CRC-32 around each record, so a torn or damaged
record is found and skipped, never replayed as something else.

A record is ``MAGIC`` (4 bytes), the payload's length and its CRC-32 (zlib's; each 4 bytes,
big-endian), then the payload. A reader that meets a bad header or checksum looks for the next
``MAGIC`` that begins a good record (``worker.gateway.spool``).
"""

from __future__ import annotations

import struct
import zlib

MAGIC = b"BTS1"
_HEADER = struct.Struct(">4sII")
HEADER_BYTES = _HEADER.size
# A batch is bounded by the tee's queue; a header claiming more is damaged.
MAX_RECORD_BYTES = 256 << 20


def frame(payload: bytes) -> bytes:
    """The record holding ``payload``."""
    return _HEADER.pack(MAGIC, len(payload), zlib.crc32(payload)) + payload


def header(data: bytes) -> tuple[int, int] | None:
    """(length, crc) of a record header, or None when ``data`` is not a plausible one."""
    if len(data) < HEADER_BYTES:
        return None
    magic, length, crc = _HEADER.unpack_from(data)
    if magic != MAGIC or length > MAX_RECORD_BYTES:
        return None
    return length, crc


def intact(payload: bytes, length: int, crc: int) -> bool:
    return len(payload) == length and zlib.crc32(payload) == crc
