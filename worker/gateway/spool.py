"""The tee's spool: one append-only file per process, holding what could not reach Redis yet.

Files are ``tee-<host>-<pid>.spool`` in the spool directory. A process holds an exclusive ``flock``
on its own file for its lifetime, so a file nobody holds was left by a process that is gone: any
tee may adopt it (``orphans``), replay it and delete it. A restarted process with the same name
(a container's pid 1) finds its own file again and replays it first.

Records are framed by ``worker.gateway.records``. ``append`` writes whole records with one
``write`` and only then counts them in ``size``, so the reader never reads past what was written;
a record torn by a crash or a full disk is skipped by ``read`` up to the next good one, and counted.

Durability: ``append`` puts the bytes in the kernel (they survive the process); ``sync`` (fsync)
makes them survive the machine. The tee syncs on a timer, not per append (docs/gateway.md).
"""

from __future__ import annotations

import fcntl
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from worker.gateway.records import HEADER_BYTES, MAGIC, frame, header, intact

_SCAN_BYTES = 64 << 10


def spool_name() -> str:
    return f"tee-{socket.gethostname().replace('/', '-')}-{os.getpid()}.spool"


class Spool:
    """One spool file, locked by this process. Not thread-safe: the tee serialises access."""

    def __init__(self, path: Path, *, blocking: bool = True) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            flags = fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB
            fcntl.flock(self._fd, flags)
        except OSError:
            os.close(self._fd)
            raise
        self.size = os.fstat(self._fd).st_size
        self.dirty = False

    @classmethod
    def own(cls, directory: Path) -> Spool:
        directory.mkdir(parents=True, exist_ok=True)
        return cls(directory / spool_name())

    def append(self, payloads: list[bytes]) -> int:
        """Write ``payloads`` as records at the end; returns the bytes written. On an error nothing
        is counted (a partial write is a torn record the reader skips)."""
        data = b"".join(frame(payload) for payload in payloads)
        view = memoryview(data)
        written = 0
        try:
            while written < len(data):
                written += os.write(self._fd, view[written:])
        finally:
            if written < len(data):
                # What was written is torn: account for it so later records are found after it.
                self.size = os.fstat(self._fd).st_size
        self.size += len(data)
        self.dirty = True
        return len(data)

    def sync(self) -> None:
        if self.dirty:
            os.fsync(self._fd)
            self.dirty = False

    def _pread(self, length: int, offset: int) -> bytes:
        return os.pread(self._fd, length, offset)

    def _record_at(self, offset: int, end: int) -> tuple[bytes, int] | None:
        parsed = header(self._pread(HEADER_BYTES, offset))
        if parsed is None:
            return None
        length, crc = parsed
        stop = offset + HEADER_BYTES + length
        if stop > end:
            return None
        payload = self._pread(length, offset + HEADER_BYTES)
        return (payload, stop) if intact(payload, length, crc) else None

    def _resync(self, offset: int, end: int) -> int:
        """The offset of the next good record after ``offset``, or ``end``."""
        at = offset + 1
        while at < end:
            chunk = self._pread(min(_SCAN_BYTES, end - at) + len(MAGIC) - 1, at)
            found = chunk.find(MAGIC)
            while found != -1:
                if self._record_at(at + found, end) is not None:
                    return at + found
                found = chunk.find(MAGIC, found + 1)
            at += _SCAN_BYTES
        return end

    def read(self, offset: int, budget: int) -> tuple[list[bytes], int, int]:
        """Records from ``offset`` up to about ``budget`` bytes (at least one record): their
        payloads, the offset after them, and how many torn stretches were skipped."""
        end = self.size
        payloads: list[bytes] = []
        torn = 0
        start = offset
        while offset < end and (offset - start < budget or not payloads):
            found = self._record_at(offset, end)
            if found is None:
                torn += 1
                offset = self._resync(offset, end)
                continue
            payload, offset = found
            payloads.append(payload)
        return payloads, offset, torn

    def reset(self) -> None:
        """Empty the file: everything in it was replayed."""
        os.ftruncate(self._fd, 0)
        self.size = 0
        self.dirty = False

    def close(self, *, delete: bool = False) -> None:
        if delete:
            self.path.unlink(missing_ok=True)
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)


def orphans(directory: Path, own: Path) -> Iterator[Spool]:
    """Spool files of processes that are gone, each locked for the caller (who must close it)."""
    for path in sorted(directory.glob("tee-*.spool")):
        if path == own:
            continue
        try:
            spool = Spool(path, blocking=False)
        except (BlockingIOError, FileNotFoundError):
            continue  # its process is alive, or another tee adopted it first
        if not path.exists():  # adopted, replayed and deleted by another tee meanwhile
            spool.close()
            continue
        yield spool
