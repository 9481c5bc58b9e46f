from pathlib import Path

import orjson
from click.testing import CliRunner

from worker.cli import main

EXAMPLES = Path(__file__).parent.parent / "worker" / "data" / "examples"
KEYS = {
    "request_id", "model", "stream", "outcome", "reason", "usage_source", "usage", "estimate",
    "charge_micros", "exposure_micros", "choices", "id", "system_fingerprint", "anomalies",
}  # fmt: skip


def test_replay_directory_prints_one_result_per_body() -> None:
    result = CliRunner().invoke(main, ["replay", str(EXAMPLES)])
    assert result.exit_code == 0, result.output
    lines = [orjson.loads(line) for line in result.stdout.splitlines()]
    bodies = [p for p in EXAMPLES.iterdir() if not p.name.endswith(".request.json")]
    assert len(lines) == len(bodies)
    for doc in lines:
        assert doc.keys() >= KEYS
        assert set(doc["estimate"]) == {"prompt_tokens", "completion_tokens", "approximate"}
    by_id = {doc["request_id"]: doc for doc in lines}
    assert by_id["settled"]["charge_micros"] == 58
    assert by_id["settled"]["choices"][0]["content"] == "Hello there."
    assert by_id["unpriced"]["anomalies"] == ["unpriced"]
    # The outcome the ledger records for an unpriced model: unsettled unpriced, not settled.
    unpriced = by_id["unpriced"]
    assert (unpriced["outcome"], unpriced["reason"], unpriced["charge_micros"]) == (
        "unsettled",
        "unpriced",
        None,
    )


def test_bare_body_without_metadata_is_inferred(tmp_path: Path) -> None:
    body = tmp_path / "capture.sse"
    body.write_bytes((EXAMPLES / "settled.sse").read_bytes())
    result = CliRunner().invoke(main, ["replay", str(body)])
    doc = orjson.loads(result.stdout)
    assert doc["model"] == "gpt-4o-2024-08-06" and doc["outcome"] == "settled"


def test_bad_metadata_is_one_line_and_exit_2(tmp_path: Path) -> None:
    meta = tmp_path / "meta.json"
    meta.write_text('{"request_id": "r"}')
    result = CliRunner().invoke(
        main, ["replay", "--request", str(meta), str(EXAMPLES / "settled.sse")]
    )
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "meta.json" in result.stderr
    assert "Traceback" not in result.output


def test_missing_and_bad_files_are_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    (tmp_path / "bad.request.json").write_text((EXAMPLES / "non_streamed.request.json").read_text())
    result = CliRunner().invoke(
        main, ["replay", str(tmp_path / "missing.sse"), str(bad), str(EXAMPLES / "settled.sse")]
    )
    assert result.exit_code == 2
    assert "missing.sse" in result.stderr and "bad.json: response body is not JSON" in result.stderr
    assert orjson.loads(result.stdout)["request_id"] == "settled"
