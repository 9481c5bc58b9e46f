"""The bundled list is what the generator makes of the recorded LiteLLM file, and nothing else."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from importlib import resources
from pathlib import Path

from worker.core.prices.bundled import list_prices, snapshot_info
from worker.core.prices.litellm import DESCRIPTIVE, prices_from_litellm, skip_reason
from worker.core.prices.snapshot import PROVIDERS, build, main

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "prices" / "litellm_excerpt.json"
SHA256 = "8943af58bf9f979c6a4bef815687117ffa341e462a41faed9be17b5c33d3dcc2"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _bundled() -> dict:
    text = resources.files("worker.data").joinpath("litellm_prices.json").read_text("utf-8")
    return json.loads(text, parse_float=Decimal)


def test_the_bundled_snapshot_says_where_it_comes_from() -> None:
    info = snapshot_info()
    assert info["version"].startswith("litellm 1.110.2")
    assert info["sha256"] == SHA256
    assert info["retrieved"] == "2026-12-02"
    assert info["generator"] == "python -m worker.core.prices.snapshot"
    assert "litellm_provider in anthropic, azure" in info["filter"]


def test_the_bundled_snapshot_holds_only_what_the_filter_keeps() -> None:
    data = _bundled()
    entries = {k: v for k, v in data.items() if k != "_snapshot"}
    assert len(entries) == data["_snapshot"]["entries"] > 900
    for key, entry in entries.items():
        assert skip_reason(key, entry) is None, key
        assert entry["litellm_provider"] in PROVIDERS, key
        # every key but those that price nothing: a pricing key the book does not apply is kept
        assert not any(
            k in DESCRIPTIVE or k.startswith(("supports_", "supported_")) for k in entry
        ), key


def test_the_bundled_rows_equal_the_real_files_rows() -> None:
    excerpt = prices_from_litellm(FIXTURE.read_bytes(), "excerpt", EPOCH).prices
    bundled = {p.key: p for p in list_prices()}
    assert len(excerpt) > 20
    for row in excerpt:
        assert bundled[row.key].values() == row.values(), row.source


def test_the_generator_is_reproducible_and_floats_free(tmp_path: Path) -> None:
    raw = FIXTURE.read_bytes()
    text = build(raw, "excerpt", "2026-12-02")
    assert build(raw, "excerpt", "2026-12-02") == text
    data = json.loads(text, parse_float=Decimal)
    assert data["_snapshot"]["entries"] == 12  # sample_spec and the embedding model left out
    assert data["gpt-4o-mini"]["input_cost_per_token"] == Decimal("1.5E-7")
    assert "1.5E-7" in text and "deprecation_date" not in text
    again = prices_from_litellm(text, "x", EPOCH).prices
    original = prices_from_litellm(raw, "x", EPOCH).prices
    assert {p.key: p.values() for p in again} == {p.key: p.values() for p in original}
    out = tmp_path / "snap.json"
    main([str(FIXTURE), "--version", "excerpt", "--retrieved", "2026-12-02", "--out", str(out)])
    assert out.read_text("utf-8") == text
