"""Leakage priced at the tier of the export line it is on (issue 49, point 4), on both engines, and
an export that cannot be matched per model refused at import.

The oracles are the providers' published per-million prices, multiplied out by hand:

* OpenAI gpt-4o-mini through the Batch API: $0.075 per 1M input tokens, $0.30 per 1M output tokens
  (half the standard $0.15 / $0.60). The batch line's 600 input and 23,000 output tokens:
  600 x 0.075 + 23,000 x 0.30 = 45 + 6,900 = **6,945** micro-USD. (Valued as a share of the
  model's standard and batch lines together, as before, the same leak came to 7,215.)
* Anthropic Claude Sonnet 4.5 through Message Batches: $1.50 per 1M input, $7.50 per 1M output
  (half the standard $3 / $15). The batch line's 20,000 input and 12,480 output tokens:
  20,000 x 1.5 + 12,480 x 7.5 = 30,000 + 93,600 = **123,600** micro-USD.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from ledger.factories import make_meta, settled
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from models import UpstreamUsage
from worker.cli import main
from worker.core.prices import load_price_book
from worker.core.result import Usage
from worker.ledger.operations import apply_result, hold
from worker.reports.upstream import section_dict, unpriced_lines
from worker.upstream.exports import ExportError, read_export
from worker.upstream.query import reconciliation
from worker.upstream.routes import record_routes
from worker.upstream.store import import_export
from worker.upstream.tiers import ANY_TIER, line_tier

FIXTURES = Path(__file__).parent.parent / "fixtures" / "upstream"
DAY = datetime(2025, 10, 1, tzinfo=UTC)
AT = DAY.replace(hour=9)
BOOK = load_price_book()


def _call(session: Session, request_id: str, model: str, provider: str, key: str | None,
          usage: Usage, tier: str) -> None:  # fmt: skip
    result = replace(
        settled(request_id, model=model, usage=usage, charge=1000, created_at=AT),
        provider=provider, service_tier=tier,
    )  # fmt: skip
    meta = replace(
        make_meta(request_id, model=model, created_at=AT), provider=provider, upstream_key=key
    )
    hold(session, meta, now=AT)
    record_routes(session, [meta])
    apply_result(session, result, now=AT, grace=timedelta(hours=1))


def _import(session: Session, provider: str, name: str) -> None:
    export = read_export(provider, (FIXTURES / name).read_bytes(), name)
    import_export(session, export, name, AT)


def _rows(session: Session) -> dict[tuple[str, str, str, str], object]:
    found = reconciliation(session.connection(), DAY, DAY + timedelta(days=1), BOOK)
    return {(r.provider, r.model, r.upstream_key, r.tier): r for r in found.rows}


def test_an_openai_batch_line_leaks_at_the_batch_price(session: Session, unique_id: str) -> None:
    # the gateway's three standard calls: the export's standard line, 3,300 in and 800 out
    for i, (prompt, completion) in enumerate(((1100, 300), (1100, 250), (1100, 250))):
        _call(session, f"{unique_id}-{i}", "gpt-4o-mini", "openai", "key_abc",
              Usage(prompt, completion), "default")  # fmt: skip
    _import(session, "openai", "openai_usage_tiers.json")
    rows = _rows(session)
    standard = rows[("openai", "gpt-4o-mini", "key_abc", "default")]
    assert (standard.leaks, standard.over_input, standard.over_output) == (False, 0, 0)
    batch = rows[("openai", "gpt-4o-mini", "key_abc", "batch")]
    assert (batch.ledger.calls, batch.leak_requests, batch.leak_input, batch.leak_output) == (
        0, 2, 600, 23_000,
    )  # fmt: skip
    assert batch.leak_cost == 6_945
    assert batch.unpriced is None


def test_an_anthropic_batch_line_leaks_at_the_batch_price(session: Session, unique_id: str) -> None:
    for i in range(2):
        _call(session, f"{unique_id}-{i}", "claude-sonnet-4-5", "anthropic", None,
              Usage(20_000, 1_000), "standard")  # fmt: skip
    _import(session, "anthropic", "anthropic_usage_tiers.json")
    rows = _rows(session)
    standard = rows[("anthropic", "claude-sonnet-4-5", "*", "default")]
    assert (standard.leaks, standard.over_input, standard.over_output) == (False, 0, 0)
    batch = rows[("anthropic", "claude-sonnet-4-5", "*", "batch")]
    assert (batch.leak_input, batch.leak_output, batch.leak_requests) == (20_000, 12_480, None)
    assert batch.leak_cost == 123_600


def test_a_tier_the_book_or_the_provider_does_not_price_is_flagged(
    session: Session, unique_id: str
) -> None:
    _import(session, "openai", "openai_usage_tiers.json")
    _import(session, "anthropic", "anthropic_usage_tiers.json")
    found = reconciliation(session.connection(), DAY, DAY + timedelta(days=1), BOOK)
    rows = {(r.provider, r.model, r.tier): r for r in found.rows}
    turbo = rows[("openai", "gpt-4o", "turbo")]  # not a tier OpenAI documents
    assert (turbo.leak_input, turbo.leak_output, turbo.leak_cost) == (1000, 100, None)
    assert turbo.unpriced == "service tier 'turbo' is not one openai documents"
    priority = rows[("anthropic", "claude-sonnet-4-5", "priority")]  # documented, no book row
    assert priority.leak_cost is None
    assert priority.unpriced == (
        "the price book has no priority row for claude-sonnet-4-5-20250929 at anthropic on "
        "2025-10-01"
    )
    lines = unpriced_lines(found)
    assert len(lines) == 2 and all(line.startswith("UNPRICED: 2025-10-01 ") for line in lines)
    assert any("gpt-4o key * tier turbo: 1000 input and 100 output tokens leaked" in line
               for line in lines)  # fmt: skip
    flagged = {r["tier"]: r["unpriced"] for r in section_dict(found)["rows"]}  # type: ignore[attr-defined]
    assert flagged["batch"] is None and flagged["turbo"] == turbo.unpriced


def test_an_export_not_grouped_by_tier_is_matched_by_tokens_and_flagged(
    session: Session, unique_id: str
) -> None:
    """OpenAI without group_by=batch: a line's usage may be of any tier. Both sides' tiers are
    summed (the ledger's default and flex calls), and the leak is not priced at the standard tier."""
    _call(session, f"{unique_id}-d", "gpt-4o-mini", "openai", None, Usage(1000, 100), "default")
    _call(session, f"{unique_id}-f", "gpt-4o-mini", "openai", None, Usage(500, 50), "flex")
    page = orjson.loads((FIXTURES / "openai_usage_tiers.json").read_bytes())
    results = page["data"][0]["results"]
    del results[1:]
    results[0].update(batch=None, service_tier="default", input_tokens=2000, output_tokens=150)
    export = read_export("openai", orjson.dumps(page), "ungrouped.json")
    import_export(session, export, "ungrouped.json", AT)
    (row,) = [r for r in _rows(session).values() if r.model == "gpt-4o-mini"]
    assert (row.tier, row.ledger.calls, row.leak_input, row.leak_output) == (ANY_TIER, 2, 500, 0)
    assert row.leak_cost is None
    assert row.unpriced is not None and "not grouped by batch and service_tier" in row.unpriced


@pytest.mark.parametrize(
    ("provider", "service_tier", "batch", "tier", "flagged"),
    [
        ("openai", "default", "false", "default", False),
        ("openai", "default", "true", "batch", False),  # batch whatever its service tier
        ("openai", "flex", "false", "flex", False),
        ("openai", "priority", "false", "priority", False),
        ("openai", "scale", "false", "scale", False),
        ("openai", "auto", "false", "auto", True),  # a request's choice, not a served tier
        ("openai", "", "false", ANY_TIER, True),  # not grouped by service_tier
        ("openai", "default", "", ANY_TIER, True),  # not grouped by batch
        ("anthropic", "standard", "", "default", False),
        ("anthropic", "batch", "", "batch", False),
        ("anthropic", "priority", "", "priority", False),
        ("anthropic", "flex_discount", "", "flex_discount", False),
        ("anthropic", "", "", ANY_TIER, True),
        ("anthropic", "Batch", "", "batch", True),  # the report's values are lower case
    ],
)
def test_the_tier_of_a_line(
    provider: str, service_tier: str, batch: str, tier: str, flagged: bool
) -> None:
    found = line_tier(provider, service_tier, batch)
    assert (found.name, found.unpriced is not None) == (tier, flagged)


@pytest.mark.parametrize(
    ("provider", "name", "how"),
    [
        ("openai", "openai_usage_tiers.json", "group_by=model"),
        ("anthropic", "anthropic_usage_tiers.json", "group_by[]=model"),
    ],
)
def test_an_export_not_grouped_by_model_is_refused(provider: str, name: str, how: str) -> None:
    page = orjson.loads((FIXTURES / name).read_bytes())
    page["data"][0]["results"][1]["model"] = None
    with pytest.raises(ExportError) as raised:
        read_export(provider, orjson.dumps(page), "by-key.json")
    assert str(raised.value) == (
        "by-key.json: $.data[0].results[1].model: no model: the export is not grouped by model, so "
        "its usage cannot be matched to the ledger per model; download it with "
        f"{how} (billing upstream pull does)"
    )


def test_openai_batch_must_be_a_boolean() -> None:
    page = orjson.loads((FIXTURES / "openai_usage_tiers.json").read_bytes())
    page["data"][0]["results"][0]["batch"] = "yes"
    with pytest.raises(ExportError, match=r"results\[0\]\.batch: expected a boolean or null, got"):
        read_export("openai", orjson.dumps(page), "f.json")


def test_import_refuses_a_file_not_grouped_by_model_and_writes_nothing(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both engines: one file of the command is not grouped by model, so none is imported."""
    good = tmp_path / "grouped.json"
    good.write_bytes((FIXTURES / "openai_usage_tiers.json").read_bytes())
    page = orjson.loads(good.read_bytes())
    for row in page["data"][0]["results"]:
        row["model"] = None
    bad = tmp_path / "by-project.json"
    bad.write_bytes(orjson.dumps(page))
    monkeypatch.setenv("DATABASE_URL", engine.url.render_as_string(hide_password=False))
    result = CliRunner().invoke(
        main, ["upstream", "import", "--provider", "openai", str(good), str(bad)]
    )
    assert result.exit_code == 2
    assert f"{bad}: $.data[0].results[0].model: no model: the export is not grouped" in (
        result.output
    )
    assert "download it with group_by=model" in result.output
    with Session(engine) as session:
        stored = session.scalar(
            select(func.count())
            .select_from(UpstreamUsage)
            .where(UpstreamUsage.source.in_((str(good), str(bad))))
        )
    assert stored == 0
