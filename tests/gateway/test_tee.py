"""The tee against the real Redis: what it writes, the spool when Redis is unreachable, the replay
(in order, nothing written twice), a torn record, and the bounded queue."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import REGISTRY
from redis.backoff import NoBackoff
from redis.retry import Retry

from worker.gateway.records import frame
from worker.gateway.spool import spool_name
from worker.gateway.tee import Tee, coalesce, wire
from worker.pipeline.entries import decode_call
from worker.pipeline.keys import Keys
from worker.pipeline.publisher import (
    Command,
    Publisher,
    XAdd,
    close_commands,
    frame_commands,
    open_commands,
    queue_commands,
    response_commands,
)

pytestmark = pytest.mark.redis


def metric(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def unreachable() -> redis.Redis:
    return redis.Redis(
        port=closed_port(),
        socket_connect_timeout=0.2,
        socket_timeout=0.2,
        retry=Retry(NoBackoff(), 0),
    )


def meta(rid: str, stream: bool = True) -> dict[str, object]:
    return {
        "request_id": rid,
        "account_id": "acct_1",
        "model": "gpt-4o",
        "stream": stream,
        "reserved_micros": 1000,
        "created_at": "2026-11-30T12:00:00Z",
        "messages": [{"role": "user", "content": "hi"}],
    }


def publish(target: Publisher | Tee, rid: str, frames: int = 3) -> None:
    target.open(meta(rid))
    for i in range(frames):
        target.frames(rid, [f'data: {{"i":{i}}}\n\n'.encode()])
    target.frames(rid, [b"data: [DONE]\n\n"])
    target.close(rid, "done")


def shape(client: redis.Redis, keys: Keys, rid: str) -> list[dict[bytes, bytes]]:
    """A call's stream with its frames joined: the tee may merge frames into fewer entries."""
    out: list[dict[bytes, bytes]] = []
    for _id, fields in client.xrange(keys.request(rid)):
        if out and fields[b"kind"] == b"frame" == out[-1][b"kind"]:
            out[-1] = {b"kind": b"frame", b"body": out[-1][b"body"] + fields[b"body"]}
        else:
            out.append(fields)
    return out


def notes(client: redis.Redis, keys: Keys) -> list[tuple[bytes, bytes]]:
    return [(f[b"kind"], f[b"request_id"]) for _id, f in client.xrange(keys.events())]


@pytest.fixture
def spool_dir(tmp_path: Path) -> Path:
    return tmp_path / "spool"


@pytest.fixture
def tee(redis_client: redis.Redis, prefix: str, spool_dir: Path) -> Iterator[Tee]:
    tee = Tee(redis_client, Keys(prefix), spool_dir=spool_dir, retry_seconds=0.05)
    yield tee
    tee.stop(timeout=5)


def test_the_tee_writes_what_the_publisher_writes(
    tee: Tee, redis_client: redis.Redis, prefix: str
) -> None:
    keys, sync = Keys(prefix), Keys(f"{prefix}:sync")
    publish(Publisher(redis_client, sync), "tee")
    publish(tee, "tee")
    assert tee.flush(timeout=10)
    assert shape(redis_client, keys, "tee") == shape(redis_client, sync, "tee")
    assert notes(redis_client, keys) == notes(redis_client, sync) == [
        (b"open", b"tee"), (b"close", b"tee"),
    ]  # fmt: skip
    entries = redis_client.xrange(keys.request("tee"))
    record = decode_call(entries, "tee")
    assert b"".join(record.frames).endswith(b"data: [DONE]\n\n")
    ids = [entry_id for entry_id, _ in entries]
    assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split(b"-"))))
    assert 0 < redis_client.ttl(keys.request("tee")) <= 86_400


def test_unreachable_redis_spools_and_the_next_start_replays_in_order(
    redis_client: redis.Redis, prefix: str, spool_dir: Path
) -> None:
    keys = Keys(prefix)
    spooled, replayed = (
        metric("billing_gateway_spooled_total"),
        metric("billing_gateway_replayed_total"),
    )
    down = Tee(unreachable(), keys, spool_dir=spool_dir, retry_seconds=0.05)
    for rid in ("a", "b", "c"):
        publish(down, rid)
    assert not down.stop(timeout=1)
    assert metric("billing_gateway_spooled_total") > spooled
    assert (spool_dir / spool_name()).stat().st_size > 0
    assert redis_client.exists(keys.request("a")) == 0
    back = Tee(redis_client, keys, spool_dir=spool_dir)
    assert back.flush(timeout=10)
    back.stop()
    assert metric("billing_gateway_replayed_total") > replayed
    sync = Keys(f"{prefix}:sync")
    for rid in ("a", "b", "c"):
        publish(Publisher(redis_client, sync), rid)
        assert shape(redis_client, keys, rid) == shape(redis_client, sync, rid)
    assert notes(redis_client, keys) == [
        (kind, rid.encode()) for rid in "abc" for kind in (b"open", b"close")
    ]
    assert not (spool_dir / spool_name()).exists()


def spool_of_calls(spool_dir: Path, prefix: str, rids: str) -> bytes:
    """The spool file a tee leaves when Redis was unreachable for the calls ``rids``."""
    down = Tee(unreachable(), Keys(prefix), spool_dir=spool_dir, retry_seconds=0.05)
    for rid in rids:
        publish(down, rid)
    down.stop(timeout=0.5)
    return (spool_dir / spool_name()).read_bytes()


def test_a_replay_of_what_is_already_written_writes_no_entry_twice(
    redis_client: redis.Redis, prefix: str, spool_dir: Path
) -> None:
    keys = Keys(prefix)
    data = spool_of_calls(spool_dir, prefix, "ab")
    first = Tee(redis_client, keys, spool_dir=spool_dir)
    assert first.flush(timeout=10)
    first.stop()
    before = {rid: redis_client.xrange(keys.request(rid)) for rid in "ab"}
    # The worker settled call b and deleted its stream; the same batches come again (a write
    # whose reply was lost), from a file left by a process that is gone.
    redis_client.delete(keys.request("b"))
    (spool_dir / "tee-gone-1.spool").write_bytes(data)
    duplicates = metric("billing_gateway_duplicate_entries_total")
    again = Tee(redis_client, keys, spool_dir=spool_dir, adopt_seconds=0)
    assert again.flush(timeout=10)
    # Adoption runs when the thread is idle: wait until the file is gone.
    for _ in range(200):
        if not (spool_dir / "tee-gone-1.spool").exists():
            break
        threading.Event().wait(0.05)
    again.stop()
    assert not (spool_dir / "tee-gone-1.spool").exists()
    assert redis_client.xrange(keys.request("a")) == before["a"]
    assert metric("billing_gateway_duplicate_entries_total") - duplicates == len(before["a"])
    # b's stream comes back under the same entry ids: the worker's digest of its request entry
    # is the one its reservation recorded, so the repeated notifications are duplicates.
    assert redis_client.xrange(keys.request("b")) == before["b"]


def test_a_torn_record_is_skipped_and_the_rest_replayed(
    redis_client: redis.Redis, prefix: str, spool_dir: Path
) -> None:
    keys = Keys(prefix)
    spool_of_calls(spool_dir, prefix, "a")
    with (spool_dir / spool_name()).open("ab") as file:
        file.write(frame(b"a batch cut short by a crash")[:-3])
    torn = metric("billing_gateway_torn_records_total")
    back = Tee(redis_client, keys, spool_dir=spool_dir)
    assert back.flush(timeout=10)
    back.stop()
    assert metric("billing_gateway_torn_records_total") == torn + 1
    assert len(redis_client.xrange(keys.request("a"))) == 5  # replays never merge


class SilentServer:
    """Accepts connections and never answers: a Redis that hangs."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)

    def close(self) -> None:
        for conn in self.conns:
            conn.close()
        self.sock.close()


def test_a_full_queue_spools_never_drops_and_memory_stays_bounded(
    redis_client: redis.Redis, prefix: str, spool_dir: Path
) -> None:
    keys = Keys(prefix)
    server = SilentServer()
    hung = redis.Redis(
        port=server.port,
        socket_timeout=0.5,
        socket_connect_timeout=0.5,
        retry=Retry(NoBackoff(), 0),
    )
    bound = 4_000
    tee = Tee(hung, keys, spool_dir=spool_dir, max_queue_bytes=bound, retry_seconds=0.05)
    spooled = metric("billing_gateway_spooled_total")
    rids = [f"r{i}" for i in range(30)]
    for rid in rids:
        publish(tee, rid, frames=5)
        assert tee._queued_bytes <= bound
        assert metric("billing_gateway_queue_bytes") <= bound
    assert metric("billing_gateway_spooled_total") > spooled
    tee.stop(timeout=0)
    server.close()
    back = Tee(redis_client, keys, spool_dir=spool_dir)
    assert back.flush(timeout=20)
    back.stop()
    for rid in rids:
        assert len(shape(redis_client, keys, rid)) == 2, rid
        assert shape(redis_client, keys, rid)[1][b"body"].count(b"data: ") == 6
    assert notes(redis_client, keys) == [
        (kind, rid.encode()) for rid in rids for kind in (b"open", b"close")
    ]


def test_a_replay_after_a_merged_live_write_appends_nothing(
    redis_client: redis.Redis, prefix: str, spool_dir: Path
) -> None:
    keys = Keys(prefix)
    tee = Tee(unreachable(), keys, spool_dir=spool_dir)  # only to number the entries
    commands = []
    ids = tee._next_id("m")
    commands += open_commands(keys, "m", b"{}", 60, ids)
    for i in range(6):
        commands += frame_commands(keys, "m", [b"data: %d\n\n" % i], ids)
    tee.stop(timeout=0)
    merged = coalesce(commands)
    assert len(merged) == 4  # request, expire, open, one frame entry
    # Live: the first four frames merged; then the spool's unmerged replay of all of them.
    live = coalesce(commands[:7])
    pipe = redis_client.pipeline(transaction=False)
    queue_commands(pipe, live)
    pipe.execute()
    pipe = redis_client.pipeline(transaction=False)
    queue_commands(pipe, commands)
    results = pipe.execute(raise_on_error=False)
    refused = [r for r in results if isinstance(r, redis.ResponseError)]
    assert len(refused) == 5  # the request entry and the four merged frames
    bodies = [f[b"body"] for _id, f in redis_client.xrange(keys.request("m"))[1:]]
    assert b"".join(bodies) == b"".join(b"data: %d\n\n" % i for i in range(6))


@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(["frame", "response", "note"])),
        max_size=30,
    )
)
def test_coalesce_keeps_every_stream_in_order(ops: list[tuple[str, str]]) -> None:
    keys = Keys("k")
    counters: dict[str, int] = {}
    commands: list[Command] = []
    for number, (rid, kind) in enumerate(ops):
        seq = counters[rid] = counters.get(rid, 0) + 1
        if kind == "frame":
            commands += frame_commands(keys, rid, [b"%d;" % number], lambda s=seq: f"1-{s}")
        elif kind == "response":
            commands += response_commands(keys, rid, 200, b"%d;" % number, lambda s=seq: f"1-{s}")
        else:
            commands += close_commands(keys, rid)

    def streams(cmds: list[Command]) -> dict[str, list[tuple[bytes, bytes]]]:
        out: dict[str, list[tuple[bytes, bytes]]] = {}
        for c in cmds:
            assert isinstance(c, XAdd)
            out.setdefault(c.key, []).append((c.fields["kind"], c.fields.get("body", b"")))
        return out

    def joined(cmds: list[Command]) -> dict[str, list[bytes]]:
        out: dict[str, list[bytes]] = {}
        for key, items in streams(cmds).items():
            flat = out.setdefault(key, [])
            for kind, body in items:
                flat.append(kind + b":" + body if kind != b"frame" else body)
        return {key: [b"".join(items)] for key, items in out.items()}

    merged = coalesce(commands)
    assert joined(merged) == joined(commands)
    for key in streams(merged):
        ids = [
            c.entry_id for c in merged if isinstance(c, XAdd) and c.key == key and c.entry_id != "*"
        ]
        assert ids == sorted(ids, key=lambda i: int(i.split("-")[1]))


def test_the_wire_form_is_what_redis_py_queues() -> None:
    """The tee writes commands' wire form itself; redis-py's own ``xadd``/``expire`` (through
    ``queue_commands`` on a pipeline) are the oracle for the arguments."""
    keys = Keys("w")
    commands = [
        *open_commands(keys, "r", b'{"a":1}', 60, lambda: "5-0"),
        *frame_commands(keys, "r", [b"data: 1\n\n", "data: 2\n\n"], lambda: "5-1"),
        *response_commands(keys, "r", 200, b"{}"),
        *close_commands(keys, "r", "timeout"),
    ]
    pipe = redis.Redis().pipeline(transaction=False)
    queue_commands(pipe, commands)
    expected = [tuple(args) for args, _options in pipe.command_stack]

    def normal(args: tuple[object, ...]) -> tuple[bytes, ...]:
        return tuple(a if isinstance(a, bytes) else str(a).encode() for a in args)

    assert [normal(wire(c)) for c in commands] == [normal(a) for a in expected]
