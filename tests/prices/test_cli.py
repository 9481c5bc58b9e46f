"""``billing prices`` against a SQLite file: import (TOML and LiteLLM), list, which."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from worker.cli import main

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "prices" / "litellm_excerpt.json"


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    runner = CliRunner()
    result = runner.invoke(main, ["db", "upgrade"])
    assert result.exit_code == 0, result.output
    return runner


def _which(runner: CliRunner, *args: str) -> dict:
    result = runner.invoke(main, ["prices", "which", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_which_says_which_row_prices_a_model_and_why(runner: CliRunner) -> None:
    mini = _which(runner, "o3-mini", "--at", "2026-12-01T00:00:00Z")
    assert mini["priced"] and mini["row"]["model"] == "o3-mini"
    assert (mini["row"]["input"], mini["row"]["output"]) == ("1.1", "4.4")
    assert mini["context_window"] == 300_000 and mini["list_snapshot"].startswith("litellm 1.110.2")
    audio = _which(runner, "gpt-4o-audio-preview")
    assert not audio["priced"] and "no row names gpt-4o-audio-preview" in audio["why"]
    scale = _which(runner, "gpt-4o", "--tier", "scale")
    assert not scale["priced"] and "no scale tier" in scale["why"]
    azure = _which(runner, "gpt-4o", "--provider", "azure")
    assert azure["row"]["provider"] == "azure"
    early = _which(runner, "o3", "--at", "2025-05-01T00:00:00Z")
    assert early["row"]["layer"] == "override" and early["row"]["input"] == "10.00"
    text = runner.invoke(main, ["prices", "which", "gpt-4o-audio-preview-2024-12-17"])
    assert "audio_input 40" in text.output and "not priced" in text.output
    bad = runner.invoke(main, ["prices", "which", "gpt-4o", "--at", "yesterday"])
    assert bad.exit_code == 2


def test_import_litellm_merges_and_keeps_everything_else_priced(
    runner: CliRunner, tmp_path: Path
) -> None:
    one = tmp_path / "one.json"
    one.write_text(
        '{"gpt-4.1": {"mode": "chat", "litellm_provider": "openai",'
        ' "input_cost_per_token": 1.5e-06, "output_cost_per_token": 6e-06}}'
    )
    args = ["prices", "import", "--format", "litellm", "--effective-from", "2030-01-01T00:00:00Z"]
    result = runner.invoke(main, [*args, str(one)])
    assert result.exit_code == 0, result.output
    assert "imported 1 new prices (0 already present)" in result.output
    # the rest of the book is still priced (issue 13 item 6), and the new row starts when it says
    assert _which(runner, "gpt-4o", "--at", "2030-01-02T00:00:00Z")["priced"]
    assert _which(runner, "gpt-4.1", "--at", "2030-01-02T00:00:00Z")["row"]["input"] == "1.5"
    assert _which(runner, "gpt-4.1", "--at", "2029-12-31T00:00:00Z")["row"]["input"] == "2"
    listed = json.loads(runner.invoke(main, ["prices", "list", "--json"]).output)
    assert [(r["model"], r["layer"], r["input"], r["source"]) for r in listed] == [
        ("gpt-4.1", "list", "1.5", "one.json gpt-4.1")
    ]
    whole = json.loads(
        runner.invoke(main, ["prices", "list", "--all", "--json", "--model", "gpt-4.1"]).output
    )
    default = [r for r in whole if r["tier"] == "default" and r["provider"] is None]
    assert [(r["effective_from"][:4], r["layer"]) for r in default] == [
        ("1970", "list"),
        ("2030", "list"),
    ]
    fixture = runner.invoke(main, ["prices", "import", "--format", "litellm", str(FIXTURE)])
    assert fixture.exit_code == 0, fixture.output
    assert "2 entries of FILE not chat models" in fixture.output


def test_import_refuses_the_past_without_a_reason_and_absurd_prices(
    runner: CliRunner, tmp_path: Path
) -> None:
    book = tmp_path / "prices.toml"
    book.write_text(
        '[[price]]\nmodel = "m"\neffective_from = 2025-01-01T00:00:00Z\ninput = "1.25"\noutput = "10"\n'
    )
    past = runner.invoke(main, ["prices", "import", str(book)])
    assert past.exit_code == 2 and past.stderr.count("\n") == 1 and "--backdate" in past.stderr
    half = runner.invoke(main, ["prices", "import", "--backdate", str(book)])
    assert half.exit_code == 2 and "go together" in half.stderr
    ok = runner.invoke(
        main, ["prices", "import", "--backdate", "--reason", "contract signed 2025", str(book)]
    )
    assert ok.exit_code == 0 and "1 backdated" in ok.output
    (row,) = json.loads(runner.invoke(main, ["prices", "list", "--json"]).output)
    assert (row["model"], row["reason"], row["cached_input"]) == (
        "m",
        "contract signed 2025",
        "1.25",
    )
    big = tmp_path / "big.toml"
    big.write_text('[[price]]\nmodel = "n"\ninput = "1E+30"\noutput = "1"\n')
    refused = runner.invoke(main, ["prices", "import", str(big)])
    assert refused.exit_code == 2 and refused.stderr.count("\n") == 1
    assert "above the bound of 10000" in refused.stderr
    prefix = tmp_path / "prefix.toml"
    prefix.write_text('[[price]]\nmodel = "gpt-4o*"\ninput = "1"\noutput = "1"\n')
    assert "prefix patterns" in runner.invoke(main, ["prices", "import", str(prefix)]).stderr
    missing = runner.invoke(main, ["prices", "import", str(tmp_path / "nope.toml")])
    assert missing.exit_code == 2 and missing.stderr.count("\n") == 1


def test_which_reads_the_override_file_the_worker_reads(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    book = tmp_path / "negotiated.toml"
    book.write_text(
        '[[price]]\nmodel = "gpt-4o"\neffective_from = 2026-01-01T00:00:00Z\n'
        'input = "2.00"\noutput = "8.00"\n'
    )
    monkeypatch.setenv("BILLING_PRICE_BOOK", str(book))
    found = _which(runner, "gpt-4o", "--at", "2026-06-01T00:00:00Z")
    assert (found["row"]["layer"], found["row"]["input"]) == ("override", "2.00")
    assert _which(runner, "gpt-4o-mini")["row"]["layer"] == "list"  # the list still applies
    book.write_text('[[price]]\nmodel = "x"\ninput = "oops"\noutput = "1"\n')
    broken = runner.invoke(main, ["prices", "which", "gpt-4o"])
    assert broken.exit_code == 2 and "not a decimal" in broken.stderr


def test_which_shows_every_dimension_it_applied(runner: CliRunner) -> None:
    # the fine-tune row ft:gpt-4o-mini-2024-07-18 of the bundled LiteLLM 1.110.2 list (retrieved
    # 2026-12-02): input 3e-07, cache read 1.5e-07, output 1.2e-06 USD per token
    tuned = _which(runner, "ft:gpt-4o-mini-2024-07-18:acme::AbC123", "--at", "2026-12-01T00:00:00Z")
    assert tuned["priced"] and tuned["row"]["model"] == "ft:gpt-4o-mini-2024-07-18"
    assert (tuned["row"]["input"], tuned["row"]["output"]) == ("0.3", "1.2")
    path = {step["dimension"]: step["decided"] for step in tuned["path"]}
    assert list(path) == ["name", "layer", "provider", "tier", "time", "kinds", "fees", "unapplied"]
    assert "fine-tuned id of gpt-4o-mini-2024-07-18, priced by its fine-tune rows" in path["name"]
    assert path["tier"] == "no service tier reported: the default tier"
    assert tuned["kinds"] == {
        "priced": {"input": "0.3", "cached_input": "0.15", "output": "1.2"},
        "reasoning_at_output_price": True,
        "unpriced": [
            "cache_write",
            "cache_write_1h",
            "audio_input",
            "audio_output",
            "citation",
            "image_output",
        ],
        "prompt_limit": None,
        "bands": [],
        "unpriced_prompts": None,
    }
    assert tuned["context_window"] == 128_000 + 16_384
    # no fine-tune row for the base: unpriced, and why (gpt-4o-mini's own price is never used)
    bare = _which(runner, "ft:gpt-4o-mini:acme::AbC123")
    assert not bare["priced"] and "no fine-tune row prices it" in bare["why"]
    # o3's launch row dates the default tier; priority has no row of its own then
    flex = _which(runner, "o3", "--tier", "priority", "--at", "2025-05-01T00:00:00Z")
    assert not flex["priced"] and "default-tier row from 2025-04-16" in flex["why"]
    text = runner.invoke(
        main, ["prices", "which", "o3", "--tier", "flex", "--at", "2025-07-01T00:00:00Z"]
    ).output
    for line in ("  name: ", "  layer: list rows of o3", "  provider: ", "  tier: ", "  time: "):
        assert line in text, line
    assert "reasoning tokens at the output price (4)" in text
    assert "not priced (a call with these tokens is unsettled unpriced_component): cache_wr" in text
