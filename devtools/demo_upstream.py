"""``make demo``'s upstream step: the simulated provider's export of the run, with calls the gateway
"forgot" to publish, imported and reconciled; prints the reconciliation and whether it found exactly
the leakage injected (``worker.upstream.simulated``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
from rich.console import Console
from sqlalchemy.orm import Session, sessionmaker

from worker.consumer.pricing import effective_book
from worker.reports.render_table import render_upstream
from worker.simulation.calls import SimCall
from worker.upstream import simulated
from worker.upstream.exports import read_export
from worker.upstream.query import reconciliation
from worker.upstream.store import import_export


def show_upstream(
    sessions: sessionmaker[Session],
    calls: Sequence[SimCall],
    console: Console,
    workdir: Path,
    *,
    seed: int,
    forgotten: int = 12,
) -> bool:
    """Write ``workdir/upstream_openai.json``, import it, print the reconciliation; True when the
    leakage found equals the leakage injected to the token (and nothing else differs)."""
    routed = simulated.routed(calls)
    if not routed:
        console.print("upstream: no simulated call was routed to openai")
        return False
    first = min(str((c.meta or {})["created_at"]) for c in routed)
    start = datetime.fromisoformat(first.replace("Z", "+00:00"))
    lost = simulated.forgotten_calls(forgotten, seed, start, f"forgot{seed}")
    with sessions() as session:
        counts = simulated.ledger_counts(session, simulated.needs_ledger(calls))
    page = simulated.usage_page(simulated.provider_counts(calls, lost, counts))
    path = workdir / "upstream_openai.json"
    path.write_bytes(orjson.dumps(page, option=orjson.OPT_INDENT_2))
    export = read_export("openai", path.read_bytes(), str(path))
    days = sorted({str((c.meta or {})["created_at"])[:10] for c in [*routed, *lost]})
    since = datetime.fromisoformat(days[0]).replace(tzinfo=UTC)
    until = datetime.fromisoformat(days[-1]).replace(tzinfo=UTC) + timedelta(days=1)
    with sessions() as session, session.begin():
        stats = import_export(session, export, str(path), datetime.now(UTC))
    with sessions() as session, session.begin():
        found = reconciliation(session.connection(), since, until, effective_book(session))
    console.print(f"upstream: imported {path} ({stats})")
    console.print(
        render_upstream(found, compact=True), end="", markup=False, highlight=False, soft_wrap=True
    )
    want = simulated.without_cached(simulated.injected(calls, lost))
    got = simulated.found_leaks(found.rows)
    over = [
        r
        for r in found.rows
        if r.provider == simulated.PROVIDER and (r.over_input or r.over_output or r.over_requests)
    ]
    total = sum((c for c in want.values()), simulated.Counted())
    console.print(
        f"injected: {len(lost)} calls the gateway never published and "
        f"{total.requests - len(lost)} whose request entry was unreadable: {total.requests} "
        f"requests, {total.input_tokens:,} input and {total.output_tokens:,} output tokens"
    )
    if got == want and not over:
        console.print("[green]upstream reconciliation found exactly the injected leakage[/green]")
        return True
    console.print(
        f"[red]upstream reconciliation differs: found {got}, injected {want}, over-count {over}[/red]"
    )
    return False
