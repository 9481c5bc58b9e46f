"""The tee never drops a write: Redis out of memory, a read-only replica, a key of the wrong type,
an unwritable spool directory, a dead process's spool adopted under load, two processes of the
same pid and host name, and the spool's age. Real ``redis-server`` processes throughout (private
ones, on free loopback ports, for the faults; the machine's for the rest)."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from prometheus_client import REGISTRY
from redis.backoff import NoBackoff
from redis.retry import Retry

from devtools.localservers.processes import wait_for
from devtools.localservers.redis_server import PrivateRedis
from worker.contract.keys import Keys
from worker.contract.publisher import Publisher
from worker.gateway import spool as spool_module
from worker.gateway.tee import Tee

from .test_tee import notes, shape

pytestmark = pytest.mark.redis

REPO = Path(__file__).resolve().parents[2]
SECRET = "never-in-a-log"  # in every prompt and completion: the logs must not show it


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels or None) or 0.0


def meta(rid: str) -> dict[str, object]:
    return {
        "request_id": rid,
        "account_id": "acct_faults",
        "model": "gpt-4o",
        "stream": True,
        "reserved_micros": 1000,
        "created_at": "2026-11-30T12:00:00Z",
        "messages": [{"role": "user", "content": f"hi {SECRET}"}],
    }


def publish(target: Publisher | Tee, rid: str, frames: int = 3) -> None:
    target.open(meta(rid))
    for i in range(frames):
        target.frames(rid, [f'data: {{"i":{i},"text":"{SECRET}"}}\n\n'.encode()])
    target.frames(rid, [b"data: [DONE]\n\n"])
    target.close(rid, "done")


def assert_all_arrived(client: redis.Redis, keys: Keys, rids: list[str], frames: int = 3) -> None:
    """Each call is in Redis as the synchronous ``Publisher`` writes it, notes in order."""
    reference = Keys(f"{keys.prefix}-reference")
    for rid in rids:
        publish(Publisher(client, reference), rid, frames)
        assert shape(client, keys, rid) == shape(client, reference, rid), rid
    assert notes(client, keys) == [
        (kind, rid.encode()) for rid in rids for kind in (b"open", b"close")
    ]


def quick(server: PrivateRedis) -> redis.Redis:
    return redis.Redis(
        port=server.port, socket_timeout=1, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0)
    )


def unreachable() -> redis.Redis:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return redis.Redis(
        port=port, socket_connect_timeout=0.2, socket_timeout=0.2, retry=Retry(NoBackoff(), 0)
    )


@pytest.fixture
def server(tmp_path: Path) -> Iterator[PrivateRedis]:
    private = PrivateRedis(tmp_path / "redis", appendonly=False)
    private.start()
    yield private
    private.stop()


@pytest.fixture
def spool_dir(tmp_path: Path) -> Path:
    return tmp_path / "spool"


# ---------------------------------------------------------------- leak 4: refused, never dropped


def test_out_of_memory_spools_and_every_call_arrives_once_memory_is_raised(
    server: PrivateRedis, spool_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``maxmemory`` far below what Redis holds, ``noeviction``: every write is refused with OOM.
    The tee spools and retries; raised with CONFIG SET, every call arrives whole and in order,
    also the one begun before the refusals and finished during them."""
    keys = Keys("oom")
    admin = server.client()
    admin.config_set("maxmemory-policy", "noeviction")
    refused, quarantined = (
        metric("billing_gateway_refused_total", error="OOM"),
        metric("billing_gateway_quarantined_total"),
    )
    tee = Tee(quick(server), keys, spool_dir=spool_dir, retry_seconds=0.05)
    try:
        tee.open(meta("before"))
        tee.frames("before", [f'data: {{"i":0,"text":"{SECRET}"}}\n\n'.encode()])
        assert tee.flush(timeout=10)
        admin.config_set("maxmemory", 1)
        for i in range(1, 3):
            tee.frames("before", [f'data: {{"i":{i},"text":"{SECRET}"}}\n\n'.encode()])
        tee.frames("before", [b"data: [DONE]\n\n"])
        tee.close("before", "done")
        rids = [f"oom-{i}" for i in range(20)]
        for rid in rids:
            publish(tee, rid)
        assert not tee.flush(timeout=1.5)  # refused: kept, retried
        assert tee.spooling
        assert metric("billing_gateway_refused_total", error="OOM") > refused
        assert admin.exists(*[keys.request(rid) for rid in rids]) == 0
        assert len(shape(admin, keys, "before")) == 2  # the request and the first frame only
        admin.config_set("maxmemory", 0)
        assert tee.flush(timeout=20)
    finally:
        tee.stop(timeout=5)
    assert_all_arrived(admin, keys, ["before", *rids])
    assert metric("billing_gateway_quarantined_total") == quarantined
    assert not list(spool_dir.glob("*.spool"))
    assert SECRET not in caplog.text


def test_a_read_only_replica_spools_until_it_is_promoted(tmp_path: Path, spool_dir: Path) -> None:
    """The tee's Redis became a replica (a failover): READONLY for every write. Promoted with
    ``REPLICAOF NO ONE``, it gets every call."""
    primary = PrivateRedis(tmp_path / "primary", appendonly=False)
    replica = PrivateRedis(tmp_path / "replica", appendonly=False)
    primary.start()
    replica.start()
    keys = Keys("ro")
    try:
        primary.client().config_set("repl-diskless-sync-delay", 0)  # the link up at once
        admin = replica.client()
        admin.replicaof("127.0.0.1", str(primary.port))
        wait_for(
            lambda: admin.info("replication")["master_link_status"] == "up", 20, "the replica link"
        )
        refused = metric("billing_gateway_refused_total", error="READONLY")
        tee = Tee(quick(replica), keys, spool_dir=spool_dir, retry_seconds=0.05)
        try:
            rids = [f"ro-{i}" for i in range(10)]
            for rid in rids:
                publish(tee, rid)
            assert not tee.flush(timeout=1.5)
            assert metric("billing_gateway_refused_total", error="READONLY") > refused
            assert admin.exists(*[keys.request(rid) for rid in rids]) == 0
            admin.replicaof("NO", "ONE")
            assert tee.flush(timeout=20)
        finally:
            tee.stop(timeout=5)
        assert_all_arrived(admin, keys, rids)
        assert primary.client().exists(keys.events()) == 0
    finally:
        replica.stop()
        primary.stop()


def test_a_write_refused_for_good_is_quarantined_not_lost_and_blocks_nothing(
    redis_client: redis.Redis,
    prefix: str,
    spool_dir: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A call's stream key holds a string (WRONGTYPE): its entries go to the quarantine file,
    logged with the key only; the calls around it are written. Fixed by hand and renamed into
    the spool directory as docs/gateway.md says, the quarantine is replayed by a tee."""
    keys = Keys(prefix)
    redis_client.set(keys.request("bad"), "not a stream")
    quarantined = metric("billing_gateway_quarantined_total")
    caplog.set_level(logging.INFO, logger="worker.gateway.tee")
    tee = Tee(redis_client, keys, spool_dir=spool_dir, retry_seconds=0.05)
    try:
        publish(tee, "good-1")
        publish(tee, "bad")
        publish(tee, "good-2")
        assert tee.flush(timeout=10)  # nothing retried forever
        publish(tee, "good-3")  # and nothing spooled after it
        assert tee.flush(timeout=10)
        assert not tee.spooling
    finally:
        tee.stop(timeout=5)
    # The request entry and four frames (the frames of one batch are merged into one entry).
    assert 2 <= metric("billing_gateway_quarantined_total") - quarantined <= 5
    [held] = list(spool_dir.glob("tee-*.quarantine"))
    assert held.stat().st_size > 0
    assert not list(spool_dir.glob("*.spool"))
    for rid in ("good-1", "good-2", "good-3"):
        assert [f[b"kind"] for f in shape(redis_client, keys, rid)] == [b"request", b"frame"]
    assert redis_client.type(keys.request("bad")) == b"string"
    assert keys.request("bad") in caplog.text and "WRONGTYPE" in caplog.text
    assert SECRET not in caplog.text
    # What it holds, without a body (``python -m worker.gateway.spool FILE``).
    assert spool_module.main([str(held)]) == 0
    listing = capsys.readouterr().out
    assert f"XADD {keys.request('bad')} " in listing and "kind=request" in listing
    assert SECRET not in listing
    # The operator's replay: fix the key, rename the file to a spool name; a tee adopts it.
    redis_client.delete(keys.request("bad"))
    held.rename(spool_dir / f"tee-requeued-{held.stem}.spool")
    again = Tee(redis_client, keys, spool_dir=spool_dir)
    try:
        assert again.flush(timeout=10)
    finally:
        again.stop()
    reference = Keys(f"{prefix}-reference")
    publish(Publisher(redis_client, reference), "bad")
    assert shape(redis_client, keys, "bad") == shape(redis_client, reference, "bad")
    assert not list(spool_dir.glob("tee-*"))


# ---------------------------------------------------------------- leak 7: the spool opened lazily


def test_an_unwritable_spool_directory_costs_nothing_while_redis_takes_the_writes(
    redis_client: redis.Redis, prefix: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The directory cannot be made (a file is in its way; as root, permissions would not stop
    it): the tee starts anyway, says so (``ready``, the gauge, an error logged), and bills every
    call through Redis. Only a spill would need the disk: counted as lost, and logged."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    keys = Keys(prefix)
    tee = Tee(redis_client, keys, spool_dir=blocker / "spool")
    try:
        assert not tee.ready
        assert metric("billing_gateway_spool_writable") == 0
        assert "cannot be written" in caplog.text
        rids = [f"w-{i}" for i in range(5)]
        for rid in rids:
            publish(tee, rid)
        assert tee.flush(timeout=10)
    finally:
        tee.stop()
    assert_all_arrived(redis_client, keys, rids)
    lost = metric("billing_gateway_lost_total")
    down = Tee(unreachable(), keys, spool_dir=blocker / "spool", max_queue_bytes=300)
    try:
        publish(down, "nowhere")
    finally:
        down.stop(timeout=0.5)
    assert metric("billing_gateway_lost_total") > lost
    fine = Tee(redis_client, keys, spool_dir=tmp_path / "spool")
    try:
        assert fine.ready
        assert metric("billing_gateway_spool_writable") == 1
        assert not (tmp_path / "spool").exists() or not list((tmp_path / "spool").iterdir())
    finally:
        fine.stop()


def test_the_litellm_hook_refuses_to_start_with_an_unwritable_spool(tmp_path: Path) -> None:
    """The proxy loads the hook at start-up: an unwritable ``BILLING_SPOOL_DIR`` stops it there,
    loudly, instead of a proxy that would lose its calls once Redis is away."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "BILLING_SPOOL_DIR": str(blocker / "spool"),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    done = subprocess.run(
        [sys.executable, "-c", "import worker.gateway.litellm_hook"],
        env=env, capture_output=True, text=True, timeout=180, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode != 0
    assert "BILLING_SPOOL_DIR" in done.stderr and str(blocker / "spool") in done.stderr


# ---------------------------------------------------------------- leak 8: the spool's age


def test_the_spool_age_is_that_of_the_oldest_write_not_replayed(
    tmp_path: Path, spool_dir: Path
) -> None:
    """Redis stopped (and started again, its append-only file keeping what it had): the gauge
    is the age of the first write spooled, then 0 once the spool is replayed."""
    keys = Keys("age")
    server = PrivateRedis(tmp_path / "redis")
    server.start()
    tee = Tee(quick(server), keys, spool_dir=spool_dir, retry_seconds=0.05)
    try:
        publish(tee, "warm")
        assert tee.flush(timeout=10)
        assert metric("billing_gateway_spool_age_seconds") == 0
        server.stop()
        publish(tee, "first")
        wait_for(lambda: tee.spooling, 10, "the tee spooling")
        time.sleep(1.2)
        publish(tee, "second")
        time.sleep(0.3)
        age = metric("billing_gateway_spool_age_seconds")
        assert 1.2 <= age < 30
        server.start()
        assert tee.flush(timeout=20)
        time.sleep(0.2)  # the thread reports the age after its pass
        assert metric("billing_gateway_spool_age_seconds") == 0
        assert_all_arrived(server.client(), keys, ["warm", "first", "second"])
    finally:
        tee.stop(timeout=5)
        server.stop()


def test_an_orphan_that_cannot_be_replayed_reports_its_age(
    redis_client: redis.Redis, prefix: str, spool_dir: Path
) -> None:
    """An adopted file holds no times: its age is at least that of its last write."""
    down = Tee(unreachable(), Keys(prefix), spool_dir=spool_dir, retry_seconds=0.05)
    publish(down, "old")
    assert not down.stop(timeout=0.5)
    [left] = list(spool_dir.glob("tee-*.spool"))
    an_hour_ago = time.time() - 3600
    os.utime(left, (an_hour_ago, an_hour_ago))
    tee = Tee(unreachable(), Keys(prefix), spool_dir=spool_dir, retry_seconds=0.05)
    try:
        wait_for(lambda: metric("billing_gateway_spool_age_seconds") >= 3600, 10, "the age")
        assert metric("billing_gateway_spool_age_seconds") < 3700
    finally:
        tee.stop(timeout=0.2)
    assert metric("billing_gateway_spool_age_seconds") == 0
    assert left.exists()  # let go, for the next tee


# ---------------------------------------------------------------- leak 9: adoption under load


def test_a_dead_process_spool_is_adopted_while_calls_keep_coming(
    redis_client: redis.Redis, prefix: str, spool_dir: Path, tmp_path: Path
) -> None:
    """Another tee publishes without a pause (its queue is never empty when its thread looks):
    the spool file of a process that died is still adopted within a few ``adopt_seconds``, in
    slices with the live batches between them, and every call of both arrives."""
    keys = Keys(prefix)
    elsewhere = tmp_path / "elsewhere"
    down = Tee(unreachable(), keys, spool_dir=elsewhere, retry_seconds=0.05)
    dead = [f"dead-{i}" for i in range(300)]
    for rid in dead:
        publish(down, rid, frames=6)
    assert not down.stop(timeout=0.5)
    [left] = list(elsewhere.glob("tee-*.spool"))
    assert left.stat().st_size > 4 * (64 << 10)  # several replay budgets

    tee = Tee(redis_client, keys, spool_dir=spool_dir, adopt_seconds=0.2, adopt_slice_seconds=0.01)
    live: list[str] = []
    stop = threading.Event()

    def keep_publishing() -> None:
        while not stop.is_set():
            rid = f"live-{len(live)}"
            publish(tee, rid, frames=2)
            live.append(rid)
            time.sleep(0.001)

    publisher = threading.Thread(target=keep_publishing)
    publisher.start()
    try:
        wait_for(lambda: len(live) > 50, 20, "the live calls")
        orphan = spool_dir / "tee-deadhost-1-0badc0de.spool"
        left.rename(orphan)  # as a process that died left it
        wait_for(lambda: not orphan.exists(), 30, "the dead process's spool adopted")
        assert publisher.is_alive()
    finally:
        stop.set()
        publisher.join()
    try:
        assert tee.flush(timeout=30)
    finally:
        tee.stop()
    order = [rid.decode() for kind, rid in notes(redis_client, keys) if kind == b"open"]
    assert sorted(order) == sorted(dead + live)
    first, last = order.index(dead[0]), order.index(dead[-1])
    assert [rid for rid in order[first:last] if rid.startswith("live-")]  # not starved
    for rid in (dead[0], dead[-1], live[0], live[-1]):
        assert shape(redis_client, keys, rid)[-1][b"body"].endswith(b"data: [DONE]\n\n")


# ---------------------------------------------------------------- leak 10: unique spool names


def test_two_tees_of_the_same_pid_and_host_never_share_a_file(
    redis_client: redis.Redis, prefix: str, spool_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two containers, both pid 1 on hosts of one name, sharing the directory (in one process
    here, with ``os.getpid`` and ``socket.gethostname`` faked): each tee gets a file of its own,
    neither waits for the other's lock, and a third, restarted as pid 1 while the first's file is
    still there, never writes into that one."""
    keys = Keys(prefix)
    monkeypatch.setattr(os, "getpid", lambda: 1)
    monkeypatch.setattr(socket, "gethostname", lambda: "pod")
    made: list[Tee] = []

    def spooling_tee(rid: str) -> None:
        tee = Tee(unreachable(), keys, spool_dir=spool_dir, retry_seconds=0.05)
        made.append(tee)
        publish(tee, rid)
        tee.flush(timeout=0.5)

    for rid in ("one", "two"):
        worker = threading.Thread(target=spooling_tee, args=(rid,), daemon=True)
        worker.start()
        worker.join(timeout=10)
        assert not worker.is_alive(), "a tee waits for another's lock"
    first, second = made
    assert first._spool is not None and second._spool is not None
    assert first._spool.path != second._spool.path
    assert {p.name for p in spool_dir.glob("tee-pod-1-*.spool")} == {
        first._spool.path.name,
        second._spool.path.name,
    }
    first_path = first._spool.path
    assert not first.stop(timeout=0.2)  # its file stays: an orphan now
    spooling_tee("three")  # the restarted pid 1
    third = made[-1]
    assert third._spool is not None and third._spool.path != first_path
    assert first_path.exists()
    assert not second.stop(timeout=0.2)
    assert not third.stop(timeout=0.2)
    monkeypatch.undo()
    back = Tee(redis_client, keys, spool_dir=spool_dir)
    try:
        assert back.flush(timeout=20)
    finally:
        back.stop()
    reference = Keys(f"{prefix}-reference")
    for rid in ("one", "two", "three"):
        publish(Publisher(redis_client, reference), rid)
        assert shape(redis_client, keys, rid) == shape(redis_client, reference, rid), rid
    assert not list(spool_dir.glob("tee-*.spool"))


def test_a_forked_child_draws_its_own_token() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its name, then out without running anything else of pytest's
        os.write(write, spool_module.spool_name().encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = pipe.read()
    os.waitpid(pid, 0)
    mine = spool_module.spool_name()
    assert child.rsplit("-", 1)[1] != mine.rsplit("-", 1)[1]
