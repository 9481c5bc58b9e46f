"""The spool file: records framed by length and CRC, a torn or damaged record skipped and counted;
names never shared, never reused, and a file deleted under a lock never written nor adopted."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.gateway.records import frame
from worker.gateway.spool import QUARANTINE_SUFFIX, Spool, orphans, probe, spool_name


def read_all(spool: Spool) -> tuple[list[bytes], int]:
    payloads, offset, torn = [], 0, 0
    while offset < spool.size:
        got, offset, skipped = spool.read(offset, 64)
        payloads += got
        torn += skipped
    return payloads, torn


def test_records_come_back_in_order(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "a.spool")
    spool.append([b"one", b"two"])
    spool.append([b"three" * 50])
    assert read_all(spool) == ([b"one", b"two", b"three" * 50], 0)
    spool.close()


def test_a_torn_last_record_is_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "a.spool"
    spool = Spool(path)
    spool.append([b"kept"])
    spool.close()
    with path.open("ab") as file:
        file.write(frame(b"cut short by a crash")[:-5])
    spool = Spool(path)
    assert read_all(spool) == ([b"kept"], 1)
    spool.close()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.binary(min_size=0, max_size=40), min_size=3, max_size=8),
    st.integers(0, 10_000),
    st.binary(min_size=1, max_size=12),
)
def test_damage_in_the_middle_costs_only_the_damaged_record(
    tmp_path_factory: object, payloads: list[bytes], where: int, garbage: bytes
) -> None:
    directory = tmp_path_factory.mktemp("spool")  # type: ignore[attr-defined]
    path = directory / "a.spool"
    records = [frame(p) for p in payloads]
    victim = where % len(records)
    data = bytearray(b"".join(records))
    start = sum(len(r) for r in records[:victim])
    # Overwrite bytes inside the victim record (never past it).
    span = min(len(garbage), len(records[victim]))
    at = start + (where % max(1, len(records[victim]) - span + 1))
    original = bytes(data[at : at + span])
    data[at : at + span] = garbage[:span]
    path.write_bytes(bytes(data))
    spool = Spool(path)
    got, torn = read_all(spool)
    spool.close()
    if bytes(data) == b"".join(records) or original == garbage[:span]:
        assert (got, torn) == (payloads, 0)
        return
    others = payloads[:victim] + payloads[victim + 1 :]
    # Every other record survives, in order; the damaged one is gone (or, when the damage left a
    # record that still checks out, which CRC-32 makes vanishingly rare, it is reported intact).
    assert torn == 1
    assert got == others


def test_orphans_are_files_nobody_holds(tmp_path: Path) -> None:
    mine = Spool(tmp_path / "tee-me.spool")
    held = Spool(tmp_path / "tee-alive.spool")
    left = Spool(tmp_path / "tee-gone.spool")
    left.append([b"x"])
    left.close()
    found = list(orphans(tmp_path, mine.path))
    assert [spool.path.name for spool in found] == ["tee-gone.spool"]
    for spool in found:
        spool.close()
    held.close()
    mine.close()
    assert os.path.exists(tmp_path / "tee-gone.spool")


def test_own_makes_a_new_file_never_one_left_by_a_process_of_the_same_name(tmp_path: Path) -> None:
    """A restarted container (pid 1 again, the same host name) must not take the file its
    predecessor left as its own: that one is an orphan, which another tee may be deleting."""
    left = tmp_path / spool_name()
    left.write_bytes(b"left by a process that is gone")
    spool = Spool.own(tmp_path)
    try:
        assert spool.path != left and spool.path.name.startswith("tee-")
        assert spool.size == 0
        assert left.read_bytes() == b"left by a process that is gone"
    finally:
        spool.close(delete=True)


def test_own_never_writes_to_a_file_deleted_while_it_took_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the open and the lock, another tee adopted the (empty) file, deleted it and let go
    of its lock: the path no longer names the file locked, so another is made."""
    real = fcntl.flock
    deleted: list[str] = []

    def adopted_meanwhile(fd: int, operation: int) -> None:
        if operation & fcntl.LOCK_EX and not deleted:
            path = Path(os.readlink(f"/proc/self/fd/{fd}"))
            path.unlink()
            deleted.append(path.name)
        real(fd, operation)

    monkeypatch.setattr(fcntl, "flock", adopted_meanwhile)
    spool = Spool.own(tmp_path)
    monkeypatch.undo()
    try:
        assert deleted and spool.path.name != deleted[0]
        assert os.stat(spool.path).st_ino == os.fstat(spool._fd).st_ino
        spool.append([b"kept"])
        assert read_all(spool) == ([b"kept"], 0)
        assert (tmp_path / spool.path.name).read_bytes() == frame(b"kept")
    finally:
        spool.close()


def test_an_orphan_replaced_while_it_was_being_locked_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the adopter's open and its lock, another tee replayed and deleted the file and a
    new one of the same name appeared: the adopter holds a file nobody can find, and must neither
    replay it nor delete the new one."""
    left = Spool(tmp_path / "tee-gone-1-aa.spool")
    left.append([b"x"])
    left.close()
    real = fcntl.flock

    def replaced_meanwhile(fd: int, operation: int) -> None:
        if operation & fcntl.LOCK_EX:
            path = tmp_path / "tee-gone-1-aa.spool"
            path.unlink()
            path.write_bytes(frame(b"a new file"))
        real(fd, operation)

    monkeypatch.setattr(fcntl, "flock", replaced_meanwhile)
    found = list(orphans(tmp_path))
    monkeypatch.undo()
    assert found == []
    assert (tmp_path / "tee-gone-1-aa.spool").read_bytes() == frame(b"a new file")


def test_quarantine_and_probe_files_are_never_orphans(tmp_path: Path) -> None:
    quarantine = Spool.own(tmp_path, QUARANTINE_SUFFIX)
    quarantine.append([b"refused for good"])
    quarantine.close()
    probe(tmp_path)
    assert [p.suffix for p in tmp_path.iterdir()] == [".quarantine"]
    assert list(orphans(tmp_path)) == []


def test_the_probe_fails_where_no_file_can_be_made(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(OSError):
        probe(blocker / "spool")
    probe(tmp_path / "made" / "spool")
    assert list((tmp_path / "made" / "spool").iterdir()) == []
