"""``billing prices``: import rows into the effective-dated book, list them, say which row prices a call."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click

from worker.cli import main
from worker.cli.db import echo_json, fail, ledger_session, settings
from worker.consumer.pricing import effective_book, import_prices, stored_prices
from worker.core.errors import BillingError
from worker.core.prices import Price
from worker.core.prices.bundled import file_prices, snapshot_info
from worker.core.prices.litellm import prices_from_litellm
from worker.core.prices.price import KINDS
from worker.core.prices.toml_book import prices_from_toml, timestamp

IMPORT_LEAD = timedelta(minutes=5)
"""How far ahead an import's rows start by default: longer than a worker's price refresh (60 s), so
no call is priced by a worker that has not read the new rows yet."""


def _time(value: str | None, option: str) -> datetime | None:
    if value is None:
        return None
    try:
        return timestamp(value, option)
    except BillingError as exc:
        raise click.BadParameter(str(exc)) from None


def _file_prices(command: str) -> list[Price]:
    """The file rows the worker merges with (``BILLING_PRICE_BOOK`` or the bundled overrides)."""
    try:
        return file_prices(settings(command).price_book)
    except BillingError as exc:
        fail(command, str(exc))


@main.group("prices")
def prices_group() -> None:
    """The effective-dated price book (USD per 1M tokens)."""


@prices_group.command("import")
@click.option(
    "--format",
    "file_format",
    type=click.Choice(["toml", "litellm"]),
    default="toml",
    show_default=True,
    help="toml: the project's override rows; litellm: LiteLLM's model_prices_and_context_window.json.",
)
@click.option(
    "--effective-from",
    "effective_from",
    metavar="TIME",
    help="When the rows start (rows of a TOML file may give their own). Default: now + 5 minutes.",
)
@click.option(
    "--backdate", is_flag=True, help="Allow rows that start in the past (needs --reason)."
)
@click.option("--reason", metavar="TEXT", help="Why rows are backdated; stored with each of them.")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
def import_command(
    file_format: str,
    effective_from: str | None,
    backdate: bool,
    reason: str | None,
    file: Path,
) -> None:
    """Add the prices of FILE to the book. Prices are history: a stored row never changes, rows
    dated in the past are refused unless --backdate --reason, and models FILE does not mention keep
    their prices."""
    if backdate != (reason is not None):
        fail("prices import", "--backdate and --reason go together")
    now = datetime.now(UTC)
    start = _time(effective_from, "--effective-from") or now + IMPORT_LEAD
    try:
        raw = file.read_bytes()
        if file_format == "litellm":
            parsed = prices_from_litellm(raw, file.name, start)
            prices, skipped = parsed.prices, len(parsed.skipped)
        else:
            prices, skipped = (
                prices_from_toml(raw.decode("utf-8"), str(file), default_from=start),
                0,
            )
    except OSError as exc:
        fail("prices import", f"{file}: {exc.strerror}")
    except UnicodeDecodeError:
        fail("prices import", f"{file}: not UTF-8 text")
    except BillingError as exc:
        fail("prices import", str(exc))
    files = _file_prices("prices import")
    with ledger_session("prices import") as session:
        plan = import_prices(session, prices, files=files, now=now, backdate_reason=reason)
    click.echo(
        f"imported {len(plan.new)} new prices ({plan.present} already present"
        + (f", {plan.backdated} backdated" if plan.backdated else "")
        + (f", {skipped} entries of FILE not chat models with token prices" if skipped else "")
        + ")"
    )


def _row(price: Price) -> dict[str, Any]:
    row: dict[str, Any] = {
        "model": price.model,
        "aliases": list(price.aliases),
        "snapshots": price.snapshots,
        "layer": price.layer.value,
        "provider": price.provider,
        "tier": price.tier,
        "effective_from": price.effective_from.isoformat(),
        "until": None if price.until is None else price.until.isoformat(),
    }
    for kind in KINDS:
        value = getattr(price, kind)
        row[kind] = None if value is None else str(value)
    row.update(
        max_input_tokens=price.max_input_tokens,
        max_output_tokens=price.max_output_tokens,
        prompt_limit=price.prompt_limit,
        bands=[{"above": band.above, **band.stated()} for band in price.bands],
        web_search={size: str(value) for size, value in price.web_search},
        off_peak=None if price.off_peak is None else price.off_peak.to_json(),
        unapplied=list(price.unapplied),
        source=price.source,
        reason=price.reason,
    )
    return row


@prices_group.command("list")
@click.option("--all", "with_files", is_flag=True, help="The file rows too (list snapshot, TOML).")
@click.option("--model", "model", metavar="NAME", help="Only rows of this model.")
@click.option("--json", "as_json", is_flag=True, help="One JSON array.")
def list_command(with_files: bool, model: str | None, as_json: bool) -> None:
    """The imported rows (with --all, the effective book), by model, tier and date."""
    with ledger_session("prices list", readonly=True) as session:
        prices = stored_prices(session)
    if with_files:
        stored = {p.key for p in prices}
        prices = [p for p in _file_prices("prices list") if p.key not in stored] + prices
    prices.sort(key=lambda p: (p.model, p.layer, p.provider or "", p.tier, p.effective_from))
    rows = [_row(p) for p in prices if model is None or p.model == model]
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("no prices (billing prices import FILE)")
    for row in rows:
        click.echo(
            f"{row['model']:<32} {row['layer']:<8} {row['provider'] or 'any':<10} "
            f"{row['tier']:<8} {row['effective_from']:<25}  input {row['input']:>8}"
            f"  cached {row['cached_input']:>8}  output {row['output']:>8}"
        )


@prices_group.command("which")
@click.argument("model")
@click.option("--tier", metavar="TIER", help="The service tier the response reported.")
@click.option("--provider", metavar="NAME", help="Where the gateway routed the call.")
@click.option("--at", "at", metavar="TIME", help="The call's created_at (default: now).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
def which_command(
    model: str, tier: str | None, provider: str | None, at: str | None, as_json: bool
) -> None:
    """Which row prices MODEL, and why (or why it is unpriced), in the effective book: each
    dimension the rule applied (name: exact, alias, snapshot or fine-tune base; layer; provider;
    tier; time), and the kinds of token the row prices and those it leaves unpriced, and its
    long-context bands: the rates a prompt over each threshold prices the whole call at."""
    when = _time(at, "--at") or datetime.now(UTC)
    with ledger_session("prices which", readonly=True) as session:
        book = effective_book(session, settings("prices which").price_book)
    found = book.resolve(model, when, tier=tier, provider=provider)
    price = found.price
    document = {
        "model": model,
        "tier": tier,
        "provider": provider,
        "at": when.isoformat(),
        "priced": price is not None,
        "why": found.why,
        "path": [{"dimension": dimension, "decided": text} for dimension, text in found.path],
        "row": None if price is None else _row(price),
        "kinds": None
        if price is None
        else {
            "priced": {
                kind: str(getattr(price, kind))
                for kind in KINDS
                if getattr(price, kind) is not None
            },
            "reasoning_at_output_price": price.reasoning is None,
            "unpriced": list(price.unpriced_kinds),
            "prompt_limit": price.prompt_limit,
            "bands": [price.band_view(band) for band in price.bands],
            "unpriced_prompts": None
            if (gap := price.unpriced_prompts()) is None
            else {"over": gap[0], "up_to": gap[1]},
        },
        "context_window": book.context_window(model, when),
        "list_snapshot": snapshot_info().get("version"),
    }
    if as_json:
        echo_json(document)
        return
    click.echo(f"{model}: {'priced' if price else 'UNPRICED'}")
    click.echo(f"  why: {found.why}")
    for dimension, text in found.path:
        if dimension != "kinds":
            click.echo(f"  {dimension}: {text}")
    if price is not None:
        row = document["row"]
        kinds = "  ".join(f"{k} {row[k]}" for k in KINDS if row[k] is not None)
        click.echo(f"  USD per 1M tokens: {kinds}")
        if price.reasoning is None:
            click.echo(f"  reasoning tokens at the output price ({price.output})")
        if price.image_input is None:
            click.echo(f"  image tokens at the input price ({price.input})")
        if price.unpriced_kinds:
            click.echo(
                "  not priced (a call with these tokens is unsettled unpriced_component): "
                + ", ".join(price.unpriced_kinds)
            )
        for band in document["kinds"]["bands"]:  # type: ignore[index]
            rates = "  ".join(f"{k} {v}" for k, v in band["priced"].items())
            click.echo(f"  prompts over {band['above']} tokens, the whole call: {rates}")
            if band["cached_input_at_input_price"]:
                click.echo("    cached input at the band's input price (the row has no discount)")
            if band["reasoning_at_output_price"]:
                click.echo("    reasoning tokens at the band's output price")
            if band["unpriced"]:
                click.echo(
                    "    not priced over this threshold (a call with these tokens is unsettled "
                    "unpriced_component): " + ", ".join(band["unpriced"])
                )
        gap = price.unpriced_prompts()
        if gap is not None:
            over, upto = gap
            click.echo(
                f"  prompts over {over} tokens"
                + ("" if upto is None else f" up to {upto}")
                + " are unpriced (no long-context rates)"
            )
    if document["context_window"]:
        click.echo(f"  context window: {document['context_window']} tokens")
