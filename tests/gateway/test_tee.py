"""The tee against the real Redis: what it writes, the spool when Redis is unreachable, the replay
(in order, nothing written twice), a torn record, and the bounded queue."""

from __future__ import annotations

import itertools
import signal
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY
from redis.backoff import NoBackoff
from redis.retry import Retry

from devtools.localservers.redis_server import PrivateRedis
from worker.contract.entries import decode_call
from worker.contract.keys import Keys
from worker.contract.publisher import (
    Command,
    Publisher,
    XAdd,
    close_commands,
    frame_commands,
    open_commands,
    queue_commands,
    response_commands,
)
from worker.gateway.records import frame
from worker.gateway.spool import spool_name
from worker.gateway.tee import Tee, coalesce, wire

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


def test_a_hung_redis_times_out_in_the_kernel_and_the_call_is_spooled(
    redis_client: redis.Redis, prefix: str, spool_dir: Path, tmp_path: Path
) -> None:
    """The thread's socket is blocking with the client's timeout set in the kernel (no poll per
    send and receive): a Redis that stops answering after the tee connected (SIGSTOP) still
    fails the write within the timeout, and the call spools, to be replayed in full."""
    keys = Keys(prefix)
    server = PrivateRedis(tmp_path / "redis", appendonly=False)
    server.start()
    spooled = metric("billing_gateway_spooled_total")
    client = redis.Redis(port=server.port, socket_timeout=0.3, retry=Retry(NoBackoff(), 0))
    tee = Tee(client, keys, spool_dir=spool_dir, retry_seconds=0.05)
    try:
        publish(tee, "warm", frames=1)
        assert tee.flush(timeout=10)
        sock = tee._connection._sock
        assert sock is not None and sock.gettimeout() is None
        timeout = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, 16)
        assert timeout != bytes(len(timeout))  # the receive timeout is the kernel's
        assert server.proc is not None
        server.proc.send_signal(signal.SIGSTOP)
        publish(tee, "h", frames=2)
        assert not tee.flush(timeout=3)
        assert metric("billing_gateway_spooled_total") > spooled
    finally:
        tee.stop(timeout=0)
        if server.proc is not None:
            server.proc.send_signal(signal.SIGCONT)
        server.stop()
    back = Tee(redis_client, keys, spool_dir=spool_dir)
    assert back.flush(timeout=20)
    back.stop()
    assert notes(redis_client, keys) == [(b"open", b"h"), (b"close", b"h")]
    assert shape(redis_client, keys, "h")[1][b"body"].count(b"data: ") == 3


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


sse_bodies = st.lists(
    st.sampled_from(
        [b'data: {"choices":[]}', b"data: [DONE]", b": ping", b"\n", b"\r\n", b"\r", b"\n\n"]
    ),
    min_size=1,
    max_size=20,
).map(b"".join)


def cut(body: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(c % (len(body) + 1) for c in cuts), len(body)]
    return [body[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def assert_frames_are(client: redis.Redis, keys: Keys, rid: str, body: bytes) -> None:
    """The call's frames are ``body`` byte for byte, cut at blank lines, under increasing ids."""
    entries = client.xrange(keys.request(rid))
    assert entries[0][1][b"kind"] == b"request"
    frames = [fields[b"body"] for _id, fields in entries[1:]]
    assert all(fields[b"kind"] == b"frame" for _id, fields in entries[1:])
    assert b"".join(frames) == body
    # Two line ends (CRLF, CR or LF each; a CR then an LF is one CRLF, never two): every pair.
    blank_lines = tuple(a + b for a in (b"\r\n", b"\r", b"\n") for b in (b"\r\n", b"\r", b"\n"))
    blank_lines = tuple(pair for pair in blank_lines if pair != b"\r\n")
    for frame_body in frames[:-1]:
        assert frame_body.endswith(blank_lines)
    ids = [tuple(map(int, entry_id.split(b"-"))) for entry_id, _ in entries]
    assert ids == sorted(set(ids))


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sse_bodies, st.lists(st.integers(0, 400), max_size=8), st.sets(st.integers(0, 8)))
@example(b'\r\r\ndata: {"choices":[]}', [], {0})  # a CR, then a CRLF: one blank line of 3 bytes
def test_chunks_are_published_as_their_events_whatever_the_cut(
    redis_client: redis.Redis, body: bytes, cuts: list[int], flushes: set[int]
) -> None:
    """``chunk``: the thread cuts the chunks into events, also when it takes a call's run in the
    middle of an event (a ``flush`` after chunk i); ``close`` publishes an unfinished last event."""
    keys = Keys(f"t-chunk-{next(chunk_calls)}")
    spool = tempfile.TemporaryDirectory()
    tee = Tee(redis_client, keys, spool_dir=spool.name)
    try:
        tee.open(meta("c"))
        for i, part in enumerate(cut(body, cuts)):
            tee.chunk("c", part)
            if i in flushes:
                assert tee.flush(timeout=10)
        tee.close("c", "done")
        assert tee.flush(timeout=10)
        assert_frames_are(redis_client, keys, "c", body)
        assert notes(redis_client, keys) == [(b"open", b"c"), (b"close", b"c")]
    finally:
        tee.stop()
        spool.cleanup()
        for key in redis_client.scan_iter(match=f"{keys.prefix}:*"):
            redis_client.delete(key)


chunk_calls = iter(range(10**9))


def test_chunks_spooled_while_redis_is_away_replay_as_their_events(
    redis_client: redis.Redis, prefix: str, spool_dir: Path
) -> None:
    """A spilled queue cuts the call's runs in order (each event its own frame in the spool);
    chunks after it are cut as they are spooled; the replay gives the bytes as sent."""
    keys = Keys(prefix)
    body = b"data: 1\n\ndata: 2\r\n\r\n: ping\n\ndata: [DONE]\n\nno blank line"
    parts = cut(body, [3, 12, 13, 25, 40, 47])
    down = Tee(unreachable(), keys, spool_dir=spool_dir, retry_seconds=0.05)
    down.open(meta("s"))
    for part in parts[:3]:
        down.chunk("s", part)
    down.flush(timeout=1)  # the write fails: the queue goes to the spool
    assert down.spooling
    for part in parts[3:]:
        down.chunk("s", part)
    down.close("s", "client_disconnect")
    assert not down.stop(timeout=1)
    back = Tee(redis_client, keys, spool_dir=spool_dir)
    assert back.flush(timeout=10)
    back.stop()
    assert_frames_are(redis_client, keys, "s", body)
    frames = [f[b"body"] for _id, f in redis_client.xrange(keys.request("s"))[1:]]
    assert frames == [b"data: 1\n\n", b"data: 2\r\n\r\n", b": ping\n\n", b"data: [DONE]\n\n",
                      b"no blank line"]  # fmt: skip
    assert notes(redis_client, keys) == [(b"open", b"s"), (b"close", b"s")]


def test_a_full_queue_of_chunks_spools_and_memory_stays_bounded(
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
    body = b"".join(b'data: {"i":%d}\n\n' % i for i in range(40)) + b"data: [DONE]\n\n"
    rids = [f"q{i}" for i in range(20)]
    for rid in rids:
        tee.open(meta(rid))
        for part in cut(body, [7, 100, 101, 300, 420]):
            tee.chunk(rid, part)
            assert tee._queued_bytes <= bound
        tee.close(rid, "done")
    tee.stop(timeout=0)
    server.close()
    back = Tee(redis_client, keys, spool_dir=spool_dir)
    assert back.flush(timeout=20)
    back.stop()
    for rid in rids:
        assert_frames_are(redis_client, keys, rid, body)
    assert notes(redis_client, keys) == [
        (kind, rid.encode()) for rid in rids for kind in (b"open", b"close")
    ]
