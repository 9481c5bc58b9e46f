"""``make bench``: run the suite, print the table, and write it to BENCHMARKS.md.

    python -m benchmarks [--smoke] [--only NAME[,NAME…]] [--output PATH] [--profile DIR]

Every figure is a ratio against a peer measured in the same run on the same machine (which is
shared), so the ratios are what to compare across runs, never the absolute rates. A full run writes
BENCHMARKS.md; ``--smoke`` and ``--only`` runs write only where ``--output`` says, so a quick check
never overwrites the figures of a full run. Exit status 1 if a benchmark failed to run (a missed
target is a result, not a failure).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
import traceback
from pathlib import Path

from rich.console import Console

from benchmarks import suite
from benchmarks.harness import machine
from benchmarks.harness.table import Row, markdown, render

DEFAULT_OUTPUT = Path("BENCHMARKS.md")


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--smoke", action="store_true", help="every row at a small size (< ~60 s)")
    parser.add_argument(
        "--only", metavar="NAME", help=f"comma-separated subset of: {', '.join(suite.BENCHMARKS)}"
    )
    parser.add_argument("--output", type=Path, help="where to write the markdown table")
    parser.add_argument(
        "--profile", type=Path, metavar="DIR", help="write a pyinstrument profile of the drain here"
    )
    parser.add_argument(
        "--memory-calls",
        metavar="FIRST,LAST",
        help="row 8's checkpoints (default 100000,1000000; --smoke 300,1500)",
    )
    args = parser.parse_args(argv)
    if args.memory_calls:
        try:
            first, last = (int(part) for part in args.memory_calls.split(","))
        except ValueError:
            parser.error("--memory-calls takes two counts, FIRST,LAST")
        if not 0 < first < last:
            parser.error("--memory-calls needs 0 < FIRST < LAST")
        args.memory_calls = (first, last)
    if args.only:
        names = [name.strip() for name in args.only.split(",") if name.strip()]
        unknown = [name for name in names if name not in suite.BENCHMARKS]
        if unknown:
            parser.error(
                f"unknown benchmark {', '.join(unknown)}; known: {', '.join(suite.BENCHMARKS)}"
            )
        args.only = names
    if args.output is None and not args.smoke and not args.only:
        args.output = DEFAULT_OUTPUT
    return args


def write(path: Path, rows: list[Row], about: dict[str, str], seconds: float) -> None:
    notes = [f"- **{row.title}**: {note}" for row in rows for note in row.notes]
    text = "\n".join(
        [
            "# Benchmarks",
            "",
            "Written by `make bench` (`python -m benchmarks`); do not edit by hand. Every figure is",
            "measured against its comparison in the same run on the same machine, which is shared with",
            "other work: compare the ratios across runs, not the absolute rates.",
            "",
            f"- date: {about['date']}",
            f"- command: `{about['command']}` ({seconds:.0f} s)",
            f"- machine: {about['machine']}",
            f"- {about['python']}; {about['redis']}; {about['postgresql']}",
            f"- revision: {about['revision']}",
            "",
            markdown(rows),
            "",
            "## Notes",
            "",
            *notes,
            "",
        ]
    )
    path.write_text(text)


def _stop(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Stopped by SIGTERM, or by SIGINT when started in the background (which ignores it), every
    # benchmark still deletes its keys and drops its database on the way out.
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    args = _parse(argv)
    # The ledger warns on every charge above its hold; the simulated fault mix has plenty.
    logging.getLogger("worker").setLevel(logging.ERROR)
    console = Console()
    about = machine.describe(argv)
    console.print(
        f"[bold]{about['command']}[/bold] — {about['machine']}; {about['python']}; "
        f"{about['redis']}; {about['postgresql']}",
        highlight=False,
    )
    ctx = suite.Context(smoke=args.smoke, profile_dir=args.profile, memory_calls=args.memory_calls)
    made_by: dict[str, list[Row]] = {}
    failed = False
    started = time.perf_counter()
    for name, bench in suite.BENCHMARKS.items():
        if args.only and name not in args.only:
            continue
        began = time.perf_counter()
        with console.status(f"running {name}…"):
            try:
                made = bench(ctx)
            except Exception as exc:
                failed = True
                traceback.print_exc()
                made = [Row(name, "", status=f"error: {type(exc).__name__}: {exc}"[:200])]
        made_by[name] = made
        console.print(f"[dim]{name}: {time.perf_counter() - began:.1f} s[/dim]")
    seconds = time.perf_counter() - started
    rows = [row for name in suite.TABLE for row in made_by.get(name, [])]
    render(
        rows, console, title=f"benchmarks ({'smoke' if args.smoke else 'full'}, {seconds:.0f} s)"
    )
    if args.output is not None:
        write(args.output, rows, about, seconds)
        console.print(f"wrote {args.output}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
