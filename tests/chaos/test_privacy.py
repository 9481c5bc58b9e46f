"""Privacy: no prompt or completion text in the database or in Redis after a run, and no secret
from a URL (Redis and database passwords, a webhook token) in a worker's log or a report.

The contract keeps two kinds of call streams on purpose, each with its TTL as a leak guard: those of
unsettled calls (re-read for late usage through the grace period) and quarantined ones (dead-lettered,
kept for an operator). Text is allowed there and nowhere else: not in the ledger, the notification
streams, the dead letters, the recheck and quarantine sets, or the Celery broker.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import orjson
import pytest
from sqlalchemy import text

from devtools.localservers.redis_server import PrivateRedis
from worker.contract.keys import Keys
from worker.core.sse import iter_frames
from worker.ledger.database import make_engine
from worker.simulation.calls import plan
from worker.simulation.driver import play
from worker.simulation.faults import parse_faults
from worker.simulation.wire import Frames, Open, Response

from .fleet import REPO, Fleet, worker_env
from .harness import ChaosRun, assert_clean

pytestmark = [pytest.mark.chaos, pytest.mark.e2e, pytest.mark.postgres]

NEEDLE = 24


def _middle(value: str) -> str | None:
    value = value.strip()
    if len(value) < NEEDLE:
        return None
    start = (len(value) - NEEDLE) // 2
    return value[start : start + NEEDLE]


def needles(calls) -> tuple[set[str], set[str]]:
    """Distinctive substrings of each call's prompt messages and of its completion text."""
    prompts: set[str] = set()
    completions: set[str] = set()
    for call in calls:
        for op in call.ops:
            if isinstance(op, Open) and call.meta is not None:
                for message in call.meta.get("messages") or []:
                    content = message.get("content")
                    if isinstance(content, str) and (needle := _middle(content)):
                        prompts.add(needle)
            elif isinstance(op, Frames):
                parts = []
                for entry in op.entries:
                    for frame in iter_frames(entry):
                        for choice in getattr(frame, "obj", {}).get("choices") or []:
                            delta = choice.get("delta") or {}
                            if isinstance(delta.get("content"), str):
                                parts.append(delta["content"])
                if needle := _middle("".join(parts)):
                    completions.add(needle)
            elif isinstance(op, Response) and op.body.startswith(b"{"):
                body = orjson.loads(op.body)
                for choice in body.get("choices") or []:
                    content = (choice.get("message") or {}).get("content")
                    if isinstance(content, str) and (needle := _middle(content)):
                        completions.add(needle)
    return prompts, completions


def database_text(url: str) -> str:
    """Every text column of every table, as one string."""
    engine = make_engine(url)
    chunks: list[str] = []
    try:
        with engine.connect() as conn:
            columns = conn.execute(
                text(
                    "SELECT table_name, column_name FROM information_schema.columns"
                    " WHERE table_schema = 'public' AND data_type IN"
                    " ('text', 'character varying', 'json', 'jsonb', 'character', 'bytea')"
                )
            ).all()
            for table, column in columns:
                values = conn.execute(text(f'SELECT "{column}"::text FROM "{table}"')).scalars()
                chunks.extend(value for value in values if value)
    finally:
        engine.dispose()
    return "\n".join(chunks)


def redis_text(server: PrivateRedis, db: int, match: str) -> dict[str, bytes]:
    """Each key's content: stream entries, members, values, and its DUMP serialization."""
    client = server.client(db)
    out: dict[str, bytes] = {}
    for key in client.scan_iter(match=match, count=1000):
        kind = client.type(key).decode()
        if kind == "stream":
            parts = [b"%s=%s" % kv for _id, f in client.xrange(key) for kv in f.items()]
        elif kind == "hash":
            parts = [b"%s=%s" % kv for kv in client.hgetall(key).items()]
        elif kind == "list":
            parts = client.lrange(key, 0, -1)
        elif kind == "set":
            parts = list(client.smembers(key))
        elif kind == "zset":
            parts = client.zrange(key, 0, -1)
        else:
            parts = [client.get(key) or b""]
        out[key.decode()] = b"\n".join(parts) + b"\n" + (client.dump(key) or b"")
    return out


def test_no_prompt_or_completion_text_left(scale, private_redis, private_pg, workdir, record):
    calls = plan(scale.pick(600, 5_000), 606, parse_faults("default"), twins=0.05, run_id="priv")
    prompts, completions = needles(calls)
    assert len(prompts) > 100 and len(completions) > 100
    run = ChaosRun("privacy", private_redis, private_pg, workdir, workers=1)
    with run:
        play(calls, private_redis.client(), run.keys)
        run.settle(calls, 240)
        verdict = run.verdict(calls)
        logs = run.fleet.logs()
    assert_clean(verdict, run.figures(verdict, calls, injected=0), logs)
    db = database_text(run.database_url)
    in_db = [n for n in prompts | completions if n in db]
    keys = redis_text(private_redis, 0, f"{run.prefix}:*")
    keys.update({f"broker:{k}": v for k, v in redis_text(private_redis, 1, "*").items()})
    client = private_redis.client()
    quarantined = {m.decode() for m in client.smembers(run.keys.quarantine)}
    with run.sessions() as session:
        unsettled = set(
            session.execute(
                text("SELECT request_id FROM reservations WHERE status = 'unsettled'")
            ).scalars()
        )
    kept, leaks = 0, []
    for key, content in keys.items():
        found = [n for n in prompts | completions if n.encode() in content]
        if not found:
            continue
        rid = key.removeprefix(f"{run.prefix}:req:")
        allowed = key.startswith(f"{run.prefix}:req:") and (rid in unsettled or rid in quarantined)
        if allowed and client.ttl(key) > 0:
            kept += 1
        else:
            leaks.append((key, found[:2]))
    record.append(
        _Line(
            f"privacy calls={len(calls)} needles={len(prompts)}+{len(completions)} "
            f"db_hits={len(in_db)} redis_leaks={len(leaks)} kept_streams_with_ttl={kept} "
            f"(unsettled {len(unsettled)}, quarantined {len(quarantined)})"
        )
    )
    assert not in_db, f"prompt or completion text in the database: {in_db[:3]}"
    assert not leaks, f"prompt or completion text in Redis outside the kept streams: {leaks[:5]}"


SECRET_REDIS = "rEdIsPaSsW0rd-chaos"
SECRET_DB = "dBpAsSw0rd-chaos"
SECRET_HOOK = "T0KENxoxbCHAOS123"


def test_secrets_never_reach_logs(private_pg, workdir, record, scale) -> None:
    """A worker (and ``billing doctor``) with passwords in every URL and a webhook token, against a
    password-protected Redis that restarts under it: no secret in any log line or report."""
    server = PrivateRedis(workdir / "auth-redis", password=SECRET_REDIS)
    server.start()
    try:
        database = private_pg.create_database(f"chaos_secret_{uuid.uuid4().hex[:6]}")
        database = database.replace("postgres@", f"postgres:{SECRET_DB}@")  # trust: any password
        hook = f"http://127.0.0.1:9/services/T000/B000/{SECRET_HOOK}?token={SECRET_HOOK}"
        env = worker_env(
            server.url(0), server.url(1), database, f"chaos-secret-{uuid.uuid4().hex[:6]}",
            BILLING_ALERT_WEBHOOK_URL=hook,
        )  # fmt: skip
        calls = plan(scale.pick(200, 2_000), 707, parse_faults("default"), run_id="secret")
        fleet = Fleet(env, workdir / "secret-fleet", size=1)
        fleet.start()
        try:
            play(calls, server.client(), Keys(env["BILLING_PREFIX"]))
            server.restart(down_seconds=2.0)  # connection errors get logged
            engine = make_engine(database)
            deadline = time.monotonic() + 120
            decided = 0
            while time.monotonic() < deadline and decided < len(calls) // 2:
                time.sleep(1)
                with engine.connect() as conn:
                    decided = conn.execute(
                        text("SELECT count(*) FROM reservations WHERE status <> 'held'")
                    ).scalar_one()
            engine.dispose()
        finally:
            fleet.stop()
        logs = fleet.logs()
        doctor = subprocess.run(
            [sys.executable, "-m", "worker.cli", "doctor"],
            env={**env, "PATH": "/usr/bin:/bin"},
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        reports = doctor.stdout + doctor.stderr
    finally:
        server.stop()
    secrets = (SECRET_REDIS, SECRET_DB, SECRET_HOOK)
    found = [s for s in secrets if s in logs or s in reports]
    record.append(
        _Line(
            f"secrets log_lines={len(logs.splitlines())} doctor_lines={len(reports.splitlines())} "
            f"calls_decided={decided} secrets_found={len(found)}"
        )
    )
    assert decided >= len(calls) // 2, logs[-2000:]  # the worker really ran, after the restart
    assert not found, f"secrets in logs or reports: {found}"


class _Line:
    def __init__(self, text: str) -> None:
        self.text = text

    def line(self) -> str:
        return self.text
