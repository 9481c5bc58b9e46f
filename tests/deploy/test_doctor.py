"""``billing doctor`` against real Redis and SQLite files: healthy, unmigrated, unreachable, backlogged."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner, Result
from conftest import REDIS_URL

from devtools.localservers.ports import free_port
from worker.cli import main
from worker.config import ENV_VARS
from worker.contract.keys import Keys
from worker.ledger.database import downgrade, make_engine, upgrade

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('doctor') / 'billing.db'}"
    upgrade(url)
    return url


def doctor(env: dict[str, str], *args: str) -> tuple[Result, dict[str, list[str]]]:
    """Run the command with exactly ``env`` (every other variable of ours unset)."""
    full: dict[str, str | None] = dict.fromkeys(ENV_VARS) | env
    result = CliRunner().invoke(main, ["doctor", *args], env=full)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    lines = result.output.splitlines()
    found: dict[str, list[str]] = {}
    for index, line in enumerate(lines):
        status, name = line.split()[:2]
        if status in ("ok", "PROBLEM", "skip"):
            if name == "stream":
                name = line.split()[2]
            found[name] = [status, line]
            advice = lines[index + 1] if index + 1 < len(lines) else ""
            # one line of advice for each problem, none otherwise
            assert ("advice:" in advice) == (status == "PROBLEM"), result.output
            if status == "PROBLEM":
                found[name].append(advice)
        else:
            assert status == "advice:", result.output
    return result, found


def base_env(prefix: str, database_url: str) -> dict[str, str]:
    return {"REDIS_URL": REDIS_URL, "DATABASE_URL": database_url, "BILLING_PREFIX": prefix}


def test_healthy_deployment_exits_0(migrated: str, prefix: str) -> None:
    result, found = doctor(base_env(prefix, migrated))
    assert result.exit_code == 0, result.output
    assert {name: v[0] for name, v in found.items()} == {
        "config": "ok",
        "redis": "ok",
        "broker": "ok",
        "database": "ok",
        "migrations": "ok",
        "fingerprint-key": "ok",
        "vocabularies": "ok",
        f"{prefix}:events": "ok",
        "dead-letters": "ok",
        "authorization": "ok",
    }
    assert "at head" in found["migrations"][1]
    assert "spend control off" in found["authorization"][1]


def test_spend_control_without_a_built_store_is_a_problem(
    migrated: str, prefix: str, redis_client: redis.Redis
) -> None:
    env = {**base_env(prefix, migrated), "BILLING_AUTHORIZE": "1"}
    result, found = doctor(env, "--only", "authorization")
    assert result.exit_code == 1
    status, line, advice = found["authorization"]
    assert status == "PROBLEM" and "not built" in line and "BILLING_AUTH_UNREACHABLE=open" in line
    assert "BILLING_AUTHORIZE=1" in advice
    redis_client.set(f"{prefix}:auth:ready", b"1")
    redis_client.hset(f"{prefix}:auth:{{acct-1}}", "funds", "5")
    result, found = doctor(env, "--only", "authorization")
    assert result.exit_code == 0
    assert found["authorization"][1].endswith("store built, 1 accounts")


def test_unmigrated_database_is_a_problem(tmp_path: Path, prefix: str) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    engine = make_engine(url)
    engine.connect().close()  # the file exists, without tables
    engine.dispose()
    result, found = doctor(base_env(prefix, url))
    assert result.exit_code == 1
    status, line, advice = found["migrations"]
    assert status == "PROBLEM" and "not migrated" in line
    assert "billing db upgrade" in advice
    assert found["database"][0] == "ok" and found["redis"][0] == "ok"


def test_database_behind_head_is_a_problem_with_upgrade_advice(tmp_path: Path, prefix: str) -> None:
    """A known revision short of head is behind, not "newer than this release"."""
    url = f"sqlite:///{tmp_path / 'behind.db'}"
    upgrade(url)
    downgrade(url, "-1")
    result, found = doctor(base_env(prefix, url))
    assert result.exit_code == 1
    status, line, advice = found["migrations"]
    assert status == "PROBLEM" and ", head is " in line and "does not know" not in line
    assert "billing db upgrade" in advice


def test_missing_sqlite_file_is_reported_and_not_created(tmp_path: Path, prefix: str) -> None:
    path = tmp_path / "nowhere" / "billing.db"
    result, found = doctor(base_env(prefix, f"sqlite:///{path}"))
    assert result.exit_code == 1
    assert found["database"][0] == "PROBLEM" and "does not exist" in found["database"][1]
    assert found["migrations"][0] == "skip"
    assert not path.exists() and not path.parent.exists()


def test_wrong_redis_port_is_a_problem_with_the_password_redacted(migrated: str) -> None:
    url = f"redis://:s3cret-pw@127.0.0.1:{free_port()}/0"
    env = {"REDIS_URL": url, "DATABASE_URL": migrated, "BILLING_PREFIX": "unused"}
    started = time.monotonic()
    result, found = doctor(env)
    assert time.monotonic() - started < 30
    assert result.exit_code == 1
    assert "s3cret-pw" not in result.output
    status, line, advice = found["redis"]
    assert status == "PROBLEM" and ":***@127.0.0.1" in line
    assert "REDIS_URL" in advice
    assert found["broker"][0] == "skip"  # the same URL: reported once
    assert found["dead-letters"][0] == "skip"
    assert found["database"][0] == "ok" and found["migrations"][0] == "ok"


def test_bad_configuration_is_one_problem(migrated: str) -> None:
    result, found = doctor({"DATABASE_URL": migrated, "BILLING_PARTITIONS": "many"})
    assert result.exit_code == 1
    assert found["config"][0] == "PROBLEM" and "BILLING_PARTITIONS" in found["config"][1]
    assert {v[0] for k, v in found.items() if k not in ("config", "vocabularies")} == {"skip"}


def test_backlog_and_dead_letters(migrated: str, prefix: str, redis_client: redis.Redis) -> None:
    keys = Keys(prefix, partitions=2)
    env = base_env(prefix, migrated) | {"BILLING_PARTITIONS": "2", "BILLING_CLAIM_IDLE_MS": "1"}
    first, second = keys.events(0), keys.events(1)
    for n in range(3):
        redis_client.xadd(first, {"kind": "open", "request_id": f"r{n}", "ts": 0})
        redis_client.xadd(second, {"kind": "open", "request_id": f"r{n}", "ts": 0})
    # the first stream has no group yet: nobody ever read it
    redis_client.xadd(
        keys.dead, {"source": "call", "reason": "close for a stream that does not exist"}
    )

    result, found = doctor(env)
    assert result.exit_code == 1
    assert found[first][0] == "PROBLEM" and "no consumer group" in found[first][1]
    assert found["dead-letters"][0] == "PROBLEM"
    assert f"XRANGE {keys.dead} - +" in found["dead-letters"][2]

    # a worker read one entry of the second stream and never acknowledged it
    redis_client.xgroup_create(first, keys.group, id="$")
    redis_client.xgroup_create(second, keys.group, id="0")
    redis_client.xreadgroup(keys.group, "gone", {second: ">"}, count=1)
    time.sleep(0.05)
    result, found = doctor(env, "--max-dead", "1")
    assert found["dead-letters"][0] == "ok"
    assert found[first][0] == "ok"
    assert found[second][0] == "PROBLEM" and "nobody claims it" in found[second][1]

    redis_client.xack(second, keys.group, *[e for e, _ in redis_client.xrange(second)])
    result, found = doctor(env, "--max-dead", "1", "--max-lag", "1")
    assert found[second][0] == "PROBLEM" and "lag 2" in found[second][1]
    assert "behind" in found[second][1]
    result, found = doctor(env, "--max-dead", "1")
    assert result.exit_code == 0, result.output


def test_only_runs_the_check_and_what_it_needs(prefix: str, migrated: str) -> None:
    result, found = doctor(base_env(prefix, migrated), "--only", "broker")
    assert result.exit_code == 0
    assert set(found) == {"config", "broker"}
