"""``billing simulate``: one-line argument errors with status 2, and a real run's JSON summary."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import REDIS_URL

from worker.cli import main


def run(args: list[str], env: dict[str, str] | None = None):
    return CliRunner().invoke(main, ["simulate", *args], env=env)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "Missing option '--requests'"),
        (["--requests", "0"], "--requests"),
        (["--requests", "ten"], "'ten' is not a valid integer"),
        (["-n", "5", "--concurrency", "0"], "--concurrency"),
        (["-n", "5", "--faults", "bogus=0.1"], "--faults: unknown fault 'bogus'"),
        (["-n", "5", "--faults", "error_finish=2"], "between 0 and 1"),
        (["-n", "5", "--faults", "error_finish"], "expected NAME=RATE"),
        (["-n", "5", "--twins", "1.5"], "--twins"),
        (["-n", "5", "--accounts", "0"], "--accounts"),
        (["-n", "5", "--run-id", "no spaces"], "--run-id"),
        (["-n", "5", "--seed", "-1"], "--seed"),
        (["-n", "5", "--no-such-option"], "No such option"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args, says):
    result = run(args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("billing simulate: "), result.stderr
    assert says in lines[0]
    assert result.stdout == ""


def test_bad_environment_exits_2():
    result = run(["-n", "1"], env={"BILLING_PARTITIONS": "zero"})
    assert result.exit_code == 2
    assert (
        result.stderr.strip()
        == "billing simulate: BILLING_PARTITIONS must be an integer, got 'zero'"
    )


def test_unreachable_redis_exits_2_with_the_url_redacted():
    result = run(["-n", "1"], env={"REDIS_URL": "redis://ops:s3cret@127.0.0.1:1/0"})
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("billing simulate: cannot reach Redis at redis://ops:***@127.0.0.1:1/0")
    assert "s3cret" not in result.output


@pytest.mark.redis
def test_a_run_prints_its_json_summary(redis_client, prefix):
    env = {"REDIS_URL": REDIS_URL, "BILLING_PREFIX": prefix, "BILLING_STREAM_TTL_SECONDS": "120"}
    args = ["-n", "40", "-c", "2", "--seed", "8", "--faults", "default,malformed=0.2",
            "--twins", "0.1", "--accounts", "3", "--run-id", "cli-1", "--json-summary"]  # fmt: skip
    result = run(args, env)
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["calls"] == 40 and summary["seed"] == 8 and summary["run_id"] == "cli-1"
    assert summary["prefix"] == prefix
    assert sum(summary["by_kind"].values()) == 40
    assert sum(summary["expected"].values()) == 40
    assert summary["by_fault"]["malformed"] > 0
    assert set(summary["by_model"]) and summary["expected_charge_micros"] > 0
    assert redis_client.xlen(f"{prefix}:events") == summary["notifications"]
    stream_keys = list(redis_client.scan_iter(match=f"{prefix}:req:req_cli-1_*"))
    assert len(stream_keys) == 40 - summary["by_kind"].get("orphan", 0)
    assert 0 < redis_client.ttl(stream_keys[0]) <= 120


@pytest.mark.redis
def test_a_run_prints_a_readable_summary(redis_client, prefix):
    result = run(["-n", "5", "--seed", "1", "--no-progress"], {"BILLING_PREFIX": prefix,
                                                              "REDIS_URL": REDIS_URL})  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("simulated 5 calls")
    assert "expected fate" in result.stdout and "settled/" in result.stdout
