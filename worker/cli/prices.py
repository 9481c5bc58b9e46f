"""``billing prices``: import the TOML price book into the database, and list it."""

from __future__ import annotations

from pathlib import Path

import click

from worker.cli import main
from worker.cli.db import echo_json, fail, ledger_session
from worker.errors import BillingError
from worker.ledger.pricebook import import_prices, list_prices
from worker.prices import prices_from_toml


@main.group("prices")
def prices_group() -> None:
    """The effective-dated price book (USD per 1M tokens)."""


@prices_group.command("import")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
def import_command(file: Path) -> None:
    """Add the prices of a TOML FILE; existing rows must be identical (prices are history)."""
    try:
        prices = prices_from_toml(file.read_text("utf-8"), str(file))
    except OSError as exc:
        fail("prices import", f"{file}: {exc.strerror}")
    except UnicodeDecodeError:
        fail("prices import", f"{file}: not UTF-8 text")
    except BillingError as exc:
        fail("prices import", str(exc))
    with ledger_session("prices import") as session:
        added = import_prices(session, prices)
    click.echo(f"imported {added} new prices ({len(prices) - added} already present)")


@prices_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON array.")
def list_command(as_json: bool) -> None:
    """Every price row, by model pattern and date."""
    with ledger_session("prices list", readonly=True) as session:
        prices = list_prices(session)
    rows = [
        {
            "model": p.pattern,
            "effective_from": p.effective_from.isoformat(),
            "input": str(p.input),
            "cached_input": str(p.cached_input),
            "output": str(p.output),
        }
        for p in prices
    ]
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("no prices (billing prices import FILE)")
    for row in rows:
        click.echo(
            f"{row['model']:<32} {row['effective_from']:<26} input {row['input']:>8}"
            f"  cached {row['cached_input']:>8}  output {row['output']:>8}"
        )
