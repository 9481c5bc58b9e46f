"""The tee's spool: append-only files holding what could not reach Redis yet, and the quarantine.

**Names.** A tee's spool file is ``tee-<host>-<pid>-<token>.spool`` in the spool directory, where
``token`` is random, drawn once per process (and again in a forked child), so two processes never
share a name: not two containers both running as pid 1 on hosts of the same name sharing the
directory, nor a restarted container and the file its predecessor left. A second tee of the same
process (or a name that is taken anyway) gets a further random suffix. A file is only ever created
new (``O_EXCL``), never reopened as one's own: a file a process left is an orphan, adopted like any
other.

**Locks and orphans.** A tee holds an exclusive ``flock`` on its file for as long as the file is
open, so a file whose lock is free was left by a tee that is gone (stopped, or its process dead):
any tee sharing the directory may adopt it (``orphans``), replay it and delete it. A lock is taken
on an open file, and the name may have been deleted (or deleted and made again) between the open
and the lock, by a tee adopting it meanwhile: after taking the lock, ``Spool`` checks that the path
still names the file it locked (device and inode) and gives it up otherwise (``StaleSpool``), so
nothing is ever written to a file no one will find. An adopter deletes a file before it releases
the lock, so the check after the lock is enough.

**Quarantine.** Commands Redis refuses for good (a wrong type, say: retrying cannot help) are kept
in ``tee-<host>-<pid>-<token>.quarantine`` files in the same directory, in the same record format.
No tee reads them (``orphans`` takes ``.spool`` files only). An operator replays one by fixing
the cause and renaming it to a ``.spool`` name in the directory (docs/gateway.md, *Quarantine*).

Records are framed by ``worker.gateway.records``. ``append`` writes whole records with one
``write`` and only then counts them in ``size``, so the reader never reads past what was written;
a record torn by a crash or a full disk is skipped by ``read`` up to the next good one, and counted.

Durability: ``append`` puts the bytes in the kernel (they survive the process); ``sync`` (fsync)
makes them survive the machine. The tee syncs on a timer, not per append (docs/gateway.md).
"""

from __future__ import annotations

import fcntl
import logging
import os
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path

from worker.gateway.records import HEADER_BYTES, MAGIC, frame, header, intact

log = logging.getLogger(__name__)

_SCAN_BYTES = 64 << 10
SUFFIX = ".spool"
QUARANTINE_SUFFIX = ".quarantine"
# Names ``Spool.own`` tries before it gives up (each but the first with a fresh random suffix).
_ATTEMPTS = 16


def _draw_token() -> str:
    return secrets.token_hex(4)


_token = _draw_token()


def _new_token_in_child() -> None:
    global _token
    _token = _draw_token()


os.register_at_fork(after_in_child=_new_token_in_child)


def spool_name(extra: str = "", suffix: str = SUFFIX) -> str:
    """This process's first spool file name: ``tee-<host>-<pid>-<token><extra><suffix>``."""
    host = socket.gethostname().replace("/", "-")
    return f"tee-{host}-{os.getpid()}-{_token}{extra}{suffix}"


class StaleSpool(FileNotFoundError):
    """The path no longer names the file that was opened and locked (it was deleted meanwhile)."""


def probe(directory: Path) -> None:
    """Raise ``OSError`` unless a file can be created, written, synced and deleted in
    ``directory`` (made if missing): what spooling needs. Leaves nothing behind."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f".probe-{secrets.token_hex(8)}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, b"probe")
        os.fsync(fd)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)


class Spool:
    """One spool file, locked by this process. Not thread-safe: the tee serialises access.

    ``create`` makes the file and fails if it exists (``FileExistsError``); ``False`` opens it as
    it is, and it must exist. ``blocking=False`` fails at once when another holds the lock
    (``BlockingIOError``). After the lock, the path must still name the file (``StaleSpool``
    otherwise). ``lock=False`` opens it to read only, taking no lock."""

    def __init__(
        self, path: Path, *, blocking: bool = True, create: bool | None = None, lock: bool = True
    ) -> None:
        self.path = path
        if not lock:  # to read only (``main``), beside the tee that holds it
            self._fd = os.open(path, os.O_RDONLY)
            self.size = os.fstat(self._fd).st_size
            self.dirty = False
            return
        if create is None:  # the old default: open, making it if missing
            flags = os.O_RDWR | os.O_CREAT | os.O_APPEND
        elif create:
            flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND
        else:
            flags = os.O_RDWR | os.O_APPEND
        self._fd = os.open(path, flags, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
            mine = os.fstat(self._fd)
            try:
                named = os.stat(path)
            except FileNotFoundError:
                named = None
            if named is None or (named.st_dev, named.st_ino) != (mine.st_dev, mine.st_ino):
                raise StaleSpool(f"{path} was deleted while it was being locked")
        except BaseException:
            os.close(self._fd)  # releases the lock, if it was taken
            raise
        self.size = mine.st_size
        self.dirty = False

    @classmethod
    def own(cls, directory: Path, suffix: str = SUFFIX) -> Spool:
        """A new file of this process's own, created and locked (``spool_name``; a further
        random suffix when that name is taken or was deleted under the lock)."""
        directory.mkdir(parents=True, exist_ok=True)
        for attempt in range(_ATTEMPTS):
            extra = "" if attempt == 0 else f"-{secrets.token_hex(3)}"
            try:
                return cls(directory / spool_name(extra, suffix), blocking=False, create=True)
            except (FileExistsError, BlockingIOError, StaleSpool):
                continue
        raise FileExistsError(f"no free spool name in {directory} after {_ATTEMPTS} attempts")

    @property
    def modified(self) -> float:
        """When the file was last written (seconds since the epoch)."""
        return os.fstat(self._fd).st_mtime

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
        """Release the file; ``delete`` unlinks it first, while still holding the lock."""
        if delete:
            self.path.unlink(missing_ok=True)
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)


def orphans(directory: Path, own: Path | None = None) -> Iterator[Spool]:
    """Spool files of tees that are gone (their lock is free), each locked for the caller (who
    must close it). A file deleted or replaced meanwhile is passed over."""
    for path in sorted(directory.glob(f"tee-*{SUFFIX}")):
        if path == own:
            continue
        try:
            spool = Spool(path, blocking=False, create=False)
        except (BlockingIOError, FileNotFoundError):  # alive, or adopted (StaleSpool) by another
            continue
        except OSError as exc:  # not ours to open (its mode, its owner): say so, look at the next
            log.error("spool: the orphaned spool %s cannot be opened: %s", path, exc)
            continue
        yield spool


def main(argv: list[str] | None = None) -> int:
    """``python -m worker.gateway.spool FILE...``: what spool or quarantine files hold, one line a
    command (record number, command, key, entry id, the entry's kind and body size), never a
    body. Reads without a lock, so also a file a running tee holds."""
    import argparse

    import msgspec

    from worker.contract.publisher import Command, XAdd

    parser = argparse.ArgumentParser(
        description=main.__doc__.split("\n\n")[0] if main.__doc__ else ""
    )
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args(argv)
    decode = msgspec.msgpack.Decoder(list[Command]).decode
    for path in args.files:
        spool = Spool(path, lock=False)
        offset, number = 0, 0
        try:
            while offset < spool.size:
                payloads, offset, torn = spool.read(offset, _SCAN_BYTES)
                if torn:
                    print(f"{path}: {torn} torn record(s) skipped")
                for payload in payloads:
                    number += 1
                    try:
                        commands = decode(payload)
                    except msgspec.DecodeError:
                        print(f"{path} #{number}: undecodable ({len(payload)} bytes)")
                        continue
                    for command in commands:
                        if type(command) is XAdd:
                            kind = command.fields.get("kind", b"").decode(errors="replace")
                            size = len(command.fields.get("body", b""))
                            rid = command.fields.get("request_id", b"").decode(errors="replace")
                            print(
                                f"{path} #{number}: XADD {command.key} {command.entry_id}"
                                f" kind={kind}"
                                + (f" request_id={rid}" if rid else "")
                                + f" body={size} bytes"
                            )
                        else:
                            print(f"{path} #{number}: EXPIRE {command.key} {command.seconds}")
        finally:
            os.close(spool._fd)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
