"""The fingerprint key: no public default; one secret per deployment, unless BILLING_HASH_SALT is set.

Real Redis, SQLite files and PostgreSQL databases, each migrated from empty as a deployment's is.
"""

from __future__ import annotations

import gc
import logging
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
import redis
from click.testing import CliRunner
from conftest import REDIS_URL, create_pg_database, drop_pg_database
from sqlalchemy import delete, select

from models import DeploymentSecret, Reservation
from worker.cli import main
from worker.config import ENV_VARS, Settings
from worker.contract.keys import Keys
from worker.contract.publisher import Publisher
from worker.core.parity import fingerprint
from worker.core.request import request_from_dict
from worker.fingerprint_key import MissingKeyError, stored, with_key
from worker.ledger.database import make_engine, upgrade
from worker.service.runtime import Runtime

OLD_PUBLIC_DEFAULT = "billing-worker"
CONFIGURED = "an-explicit-key-of-this-test-0123456789"
CHUNK = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-4o"}


def sse(obj: dict) -> str:
    return "data: " + orjson.dumps({**CHUNK, **obj}).decode() + "\n\n"


FRAMES = [
    sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Noted."}}]}),
    sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
    sse({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}}),
    "data: [DONE]\n\n",
]


def deterministic_call() -> dict:
    """The issue's example: a temperature-0 prompt, the kind that gets a fingerprint."""
    return {
        "request_id": f"req-{uuid.uuid4().hex[:12]}",
        "account_id": f"acct-{uuid.uuid4().hex[:8]}",
        "model": "gpt-4o",
        "stream": True,
        "reserved_micros": 1000,
        "created_at": "2026-11-30T00:00:00Z",
        "temperature": 0,
        "messages": [{"role": "user", "content": "My card PIN is 4912"}],
    }


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def fresh_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], str]]:
    """Makes empty databases of one engine, migrated to head as ``billing db upgrade`` would."""
    made: list[str] = []

    def make() -> str:
        if request.param == "sqlite":
            url = f"sqlite:///{tmp_path / uuid.uuid4().hex[:8]}.db"
        else:
            name = f"billing_key_{uuid.uuid4().hex[:10]}"
            made.append(name)
            url = create_pg_database(name)
        upgrade(url)
        return url

    yield make
    for name in made:
        drop_pg_database(name)


@pytest.fixture(autouse=True)
def _collector_restored() -> Iterator[None]:
    """``Runtime.build`` tunes the garbage collector for a worker process; not for pytest's."""
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def settle_through_a_runtime(settings: Settings, call: dict, client: redis.Redis) -> str | None:
    """Publish ``call``, drain it with the consumer a worker process builds; its stored fingerprint."""
    runtime = Runtime.build(settings)
    try:
        with Publisher(client, Keys(settings.prefix)).batch() as publisher:
            publisher.open(call)
            publisher.frames(call["request_id"], FRAMES)
            publisher.close(call["request_id"])
        for _ in range(5):
            if not runtime.consumer.poll(block_ms=None).read:
                break
        with runtime.engine.connect() as conn:
            row = conn.execute(
                select(Reservation.status, Reservation.fingerprint).where(
                    Reservation.request_id == call["request_id"]
                )
            ).one()
    finally:
        runtime.close()
    assert row.status == "settled"
    return row.fingerprint


def test_the_same_prompt_fingerprints_differently_in_two_deployments(
    fresh_database: Callable[[], str],
    redis_client: redis.Redis,
    prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    first, second = fresh_database(), fresh_database()
    call = deterministic_call()
    found = []
    for n, url in enumerate((first, second)):
        # Under the fixture's prefix, so its clean-up deletes these deployments' keys too.
        settings = Settings(redis_url=REDIS_URL, database_url=url, prefix=f"{prefix}:{n}")
        found.append(
            settle_through_a_runtime(settings, call | {"request_id": f"r{n}"}, redis_client)
        )
    assert found[0] is not None and found[1] is not None
    assert found[0] != found[1]
    meta = request_from_dict(call)
    assert fingerprint(meta, OLD_PUBLIC_DEFAULT) not in found  # the brute-forceable key is gone
    keys = []
    for url in (first, second):
        engine = make_engine(url)
        with engine.connect() as conn:
            keys.append(stored(conn))
        engine.dispose()
    assert all(key is not None and len(key) == 64 for key in keys)
    assert fingerprint(meta, keys[0]) == found[0]  # each deployment's own stored key was used
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert not any(key and key in logged for key in keys)


def test_an_explicit_key_wins(
    fresh_database: Callable[[], str], redis_client: redis.Redis, prefix: str
) -> None:
    url = fresh_database()
    env = {"BILLING_HASH_SALT": CONFIGURED, "DATABASE_URL": url, "REDIS_URL": REDIS_URL}
    settings = Settings.from_env(env | {"BILLING_PREFIX": prefix})
    call = deterministic_call()
    found = settle_through_a_runtime(settings, call, redis_client)
    assert found == fingerprint(request_from_dict(call), CONFIGURED)


def test_a_worker_without_a_key_refuses_to_start(fresh_database: Callable[[], str]) -> None:
    url = fresh_database()
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(delete(DeploymentSecret))
    try:
        with pytest.raises(MissingKeyError, match="billing db upgrade"):
            Runtime.build(Settings(redis_url=REDIS_URL, database_url=url))
        with pytest.raises(MissingKeyError):
            with_key(Settings(database_url=url), engine)
    finally:
        engine.dispose()


def test_an_unmigrated_database_has_no_key(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'empty.db'}")
    try:
        with pytest.raises(MissingKeyError):
            with_key(Settings(), engine)
    finally:
        engine.dispose()


def cli(env: dict[str, str], *args: str) -> tuple[int, str]:
    full: dict[str, str | None] = dict.fromkeys(ENV_VARS) | env
    result = CliRunner().invoke(main, list(args), env=full)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


def doctor_line(output: str) -> str:
    return next(line for line in output.splitlines() if "fingerprint-key" in line)


def test_doctor_says_where_the_key_comes_from_and_never_prints_it(
    fresh_database: Callable[[], str],
) -> None:
    url = fresh_database()
    engine = make_engine(url)
    with engine.connect() as conn:
        key = stored(conn)
    assert key is not None
    env = {"DATABASE_URL": url}
    only = ("doctor", "--only", "fingerprint-key")

    code, output = cli(env, *only)
    assert code == 0, output
    assert doctor_line(output).split()[0] == "ok" and "stored in the database" in output
    assert key not in output

    code, output = cli(env | {"BILLING_HASH_SALT": CONFIGURED}, *only)
    assert code == 0, output
    assert "configured (BILLING_HASH_SALT" in doctor_line(output)
    assert CONFIGURED not in output and key not in output

    with engine.begin() as conn:
        conn.execute(delete(DeploymentSecret))
    engine.dispose()
    code, output = cli(env, *only)
    assert code == 1, output
    assert doctor_line(output).split()[0] == "PROBLEM"
    assert "billing db upgrade" in output and "BILLING_HASH_SALT" in output

    # `billing db upgrade` stores a new key, says so without printing it, and keeps it afterwards
    code, output = cli(env, "db", "upgrade")
    assert code == 0, output
    assert "fingerprint key: the database (deployment_secrets) (generated now)" in output
    engine = make_engine(url)
    with engine.connect() as conn:
        regenerated = stored(conn)
    assert regenerated is not None and regenerated not in output
    code, output = cli(env, "db", "upgrade")
    assert code == 0 and "generated now" not in output, output
    with engine.connect() as conn:
        assert stored(conn) == regenerated
    engine.dispose()
    code, output = cli(env, *only)
    assert code == 0, output


@pytest.mark.parametrize("value", [OLD_PUBLIC_DEFAULT, "short", "x" * 15])
def test_a_guessable_configured_key_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="BILLING_HASH_SALT must be a secret"):
        Settings.from_env({"BILLING_HASH_SALT": value})


def test_the_key_is_not_in_the_settings_repr() -> None:
    settings = Settings.from_env({"BILLING_HASH_SALT": CONFIGURED})
    assert settings.hash_salt == CONFIGURED
    assert CONFIGURED not in repr(settings)
    assert Settings.from_env({}).hash_salt is None  # no default key
