"""A response body's ``Content-Encoding`` undone a chunk at a time, for the billing reader only
(pure).

The client gets the encoded bytes as the app sent them; the publisher must read the JSON or SSE
under them. ``gzip`` (``x-gzip``) and ``deflate`` (zlib-wrapped, or raw as some servers send it)
are undone with the standard library; ``br`` and ``zstd`` when their library (``brotli``,
``zstandard``) is installed. ``ResponseDecoder.for_header`` gives None for a body with no
encoding (or ``identity``), and a decoder whose ``failed`` is set for one it cannot undo: the
middleware then publishes the body as it came, so that the worker records the call unreadable,
its exposure the hold (never nothing).
"""

from __future__ import annotations

import importlib
import zlib
from collections.abc import Callable
from typing import Any

_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def _optional(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


class _Zlib:
    __slots__ = ("_head", "_object")

    def __init__(self, name: str) -> None:
        # deflate: zlib-wrapped or raw, told apart by the first two bytes (held until they came)
        self._head: bytes | None = b"" if name == "deflate" else None
        self._object = zlib.decompressobj(_WBITS[name])

    def __call__(self, data: bytes) -> bytes:
        if self._head is not None:
            data = self._head + data
            if len(data) < 2:
                self._head = data
                return b""
            self._head = None
            cmf, flg = data[0], data[1]
            if cmf & 0x0F != 8 or (cmf << 8 | flg) % 31:  # not a zlib header (RFC 1950)
                self._object = zlib.decompressobj(-zlib.MAX_WBITS)
        return self._object.decompress(data)


def _step(name: str) -> Callable[[bytes], bytes] | None:
    if name in _WBITS:
        return _Zlib(name)
    if name == "br":
        brotli = _optional("brotli") or _optional("brotlicffi")
        return None if brotli is None else brotli.Decompressor().process
    if name == "zstd":
        zstandard = _optional("zstandard")
        return (
            None if zstandard is None else zstandard.ZstdDecompressor().decompressobj().decompress
        )
    return None


class ResponseDecoder:
    """Undoes a list of content codings, last applied first. ``feed`` returns the decoded bytes
    of a chunk (b"" once ``failed``: a coding it does not know, or bytes that do not decode)."""

    __slots__ = ("_steps", "encoding", "failed")

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        names = [name.strip().lower() for name in encoding.split(",") if name.strip()]
        steps = [_step(name) for name in reversed(names) if name != "identity"]
        self._steps = [step for step in steps if step is not None]
        self.failed = len(self._steps) != len(steps)

    @classmethod
    def for_header(cls, encoding: str | None) -> ResponseDecoder | None:
        """None when there is nothing to undo."""
        if not encoding or all(
            name.strip().lower() in ("", "identity") for name in encoding.split(",")
        ):
            return None
        return cls(encoding)

    def feed(self, data: bytes) -> bytes:
        if self.failed:
            return b""
        try:
            for step in self._steps:
                data = step(data)
        except Exception:  # zlib.error, brotli.error, zstandard.ZstdError
            self.failed = True
            return b""
        return data


__all__ = ["ResponseDecoder"]
