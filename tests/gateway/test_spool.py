"""The spool file: records framed by length and CRC, a torn or damaged record skipped and counted."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.gateway.records import frame
from worker.gateway.spool import Spool, orphans


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
