"""``billing simulate``: play realistic gateway calls, with injected faults, into Redis."""

from __future__ import annotations

import re
import secrets
import sys
import time
from datetime import UTC, datetime
from typing import Any, NoReturn

import click
import orjson
import redis
from rich.console import Console
from rich.table import Table

from worker.cli import main
from worker.config import Settings, redact_url
from worker.contract.keys import Keys
from worker.simulation.calls import iter_calls
from worker.simulation.driver import PlayReport, play
from worker.simulation.faults import FaultSpecError, parse_faults

_RUN_ID = re.compile(r"^[A-Za-z0-9-]{1,32}$")


class _OneLineError(click.UsageError):
    """Argument errors as one line on stderr, exit status 2, like every ``billing`` command."""

    def show(self, file: Any = None) -> None:
        click.echo(f"billing simulate: {self.format_message()}", err=True)


class _Command(click.Command):
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except _OneLineError:
            raise
        except click.UsageError as exc:
            raise _OneLineError(exc.format_message(), ctx) from None


def _fail(message: str) -> NoReturn:
    raise _OneLineError(message)


def _connect(settings: Settings) -> redis.Redis:
    where = redact_url(settings.redis_url)
    try:
        client = redis.Redis.from_url(
            settings.redis_url, socket_connect_timeout=5, socket_timeout=30
        )
        client.ping()
    except (redis.RedisError, ValueError, OSError) as exc:
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
        _fail(f"cannot reach Redis at {where}: {reason}")
    return client


def _print_summary(report: PlayReport, head: dict[str, Any]) -> None:
    summary = report.summary.to_json()
    console = Console(highlight=False)
    console.print(
        f"simulated {summary['calls']} calls in {report.elapsed_seconds:.1f} s "
        f"(run {head['run_id']}, seed {head['seed']}, faults {head['faults']}, "
        f"prefix {head['prefix']}): {summary['stream_entries']} stream entries, "
        f"{summary['notifications']} notifications, {report.round_trips} round trips"
    )
    for title, key in (
        ("kind", "by_kind"),
        ("model", "by_model"),
        ("feature", "by_feature"),
        ("fault", "by_fault"),
        ("expected fate", "expected"),
    ):
        table = Table(title=None, show_header=True, box=None, pad_edge=False)
        table.add_column(title)
        table.add_column("calls", justify="right")
        for name, count in summary[key].items():
            table.add_row(name, str(count))
        console.print(table)
    console.print(
        f"late usage: {summary['late']}, swept (no close): {summary['swept']}, "
        f"true-ups: {summary['true_ups']}, expected charges: {summary['expected_charge_micros']} "
        f"micro-USD, holds: {summary['reserved_micros']} micro-USD"
    )


@main.command(cls=_Command)
@click.option("--requests", "-n", type=click.IntRange(min=1), required=True, help="Calls to play.")
@click.option(
    "--concurrency", "-c", default=4, show_default=True, type=click.IntRange(1, 256),
    help="Publishing threads.",
)  # fmt: skip
@click.option("--seed", type=click.IntRange(min=0), help="Random seed (default: a new one).")
@click.option(
    "--faults", default="none", show_default=True,
    help="NAME=RATE,... or 'default' (a realistic mix), optionally followed by overrides.",
)  # fmt: skip
@click.option(
    "--twins", default=0.0, show_default=True, type=click.FloatRange(0, 1),
    help="Share of prompts sent both streamed and not, with identical output and usage.",
)  # fmt: skip
@click.option("--accounts", default=10, show_default=True, type=click.IntRange(min=1))
@click.option("--run-id", help="Request ids are req_<RUN_ID>_<n> (default: from the clock).")
@click.option("--json-summary", is_flag=True, help="Print the summary as one JSON object.")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on a tty).")
def simulate(
    requests: int,
    concurrency: int,
    seed: int | None,
    faults: str,
    twins: float,
    accounts: int,
    run_id: str | None,
    json_summary: bool,
    progress: bool | None,
) -> None:
    """Play simulated gateway calls into Redis (REDIS_URL, BILLING_PREFIX, BILLING_PARTITIONS)."""
    try:
        rates = parse_faults(faults)
    except FaultSpecError as exc:
        _fail(f"--faults: {exc}")
    if run_id is not None and not _RUN_ID.match(run_id):
        _fail("--run-id: use 1 to 32 letters, digits or '-'")
    try:
        settings = Settings.from_env()
    except ValueError as exc:
        _fail(str(exc))
    seed = secrets.randbelow(2**31) if seed is None else seed
    run_id = run_id or format(time.time_ns() // 1_000_000, "x")
    client = _connect(settings)
    keys = Keys(settings.prefix, settings.partitions)
    now = datetime.now(UTC)
    start = now.replace(microsecond=now.microsecond // 1000 * 1000)
    calls = iter_calls(
        requests, seed, rates, twins=twins, accounts=accounts, start=start, run_id=run_id
    )
    try:
        report = play(
            calls,
            client,
            keys,
            ttl_seconds=settings.stream_ttl_seconds,
            concurrency=concurrency,
            progress=progress,
            total=requests,
        )
    except redis.RedisError as exc:
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
        click.echo(
            f"billing simulate: Redis at {redact_url(settings.redis_url)} failed: {reason}",
            err=True,
        )
        sys.exit(1)
    head = {
        "run_id": run_id,
        "seed": seed,
        "faults": rates.spec(),
        "twins": twins,
        "prefix": settings.prefix,
        "elapsed_seconds": round(report.elapsed_seconds, 3),
        "round_trips": report.round_trips,
    }
    if json_summary:
        sys.stdout.buffer.write(orjson.dumps({**head, **report.summary.to_json()}) + b"\n")
        sys.stdout.flush()
    else:
        _print_summary(report, head)
