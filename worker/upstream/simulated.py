"""The upstream export of a simulated run (``make demo``, the tests): what OpenAI's Usage API would
show for the calls the simulated gateway sent there, plus calls it "forgot" to publish.

How the simulated provider counts (docs/reports.md, "The simulated export"):

* one request per call routed to ``openai`` whose request the gateway sent (every call with
  metadata; an HTTP error is a request of 0 tokens);
* its tokens: the usage block the gateway received when the call settled from reported usage (the
  provider and the gateway agree on it); for a call whose usage never reached the worker (billed at
  the estimate, unsettled, void) what the ledger holds for it (``ledger_counts``). The simulator
  cannot run the worker's estimator ahead of it, and a real provider's count of such a call is
  unknowable to the worker anyway: reading it back makes every difference the reconciliation finds
  one this simulation injected;
* the **injected** leakage: ``forgotten`` calls, which the gateway served but never published, and
  calls whose request entry the worker could not read (dead letters before any hold): both used
  the provider, and neither has a call in the ledger.

Pure except ``ledger_counts`` (one read-only query). The model is the provider's dated id
(``ModelSpec.served``), so the reconciliation's name matching is exercised.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from models import Failure, Reservation, UsageRecord
from worker.core.result import Outcome, Reason, UsageSource
from worker.simulation.calls import SimCall, iter_calls
from worker.simulation.conversation import MODELS
from worker.simulation.faults import NO_FAULTS

PROVIDER = "openai"
PROJECT = "proj_sim"
_SERVED = {spec.name: spec.served for spec in MODELS}

# (day ISO, gateway model name, upstream key): the oracle's grain, in the simulation's own terms.
Cell = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class Counted:
    requests: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Counted) -> Counted:
        return Counted(
            self.requests + other.requests,
            self.input_tokens + other.input_tokens,
            self.cached_tokens + other.cached_tokens,
            self.output_tokens + other.output_tokens,
        )


def _cell(call: SimCall) -> Cell:
    """A routed call's (UTC day, gateway model, upstream key); ``routed`` calls carry metadata."""
    meta = call.meta or {}
    return (str(meta["created_at"])[:10], str(meta["model"]), str(meta["upstream_key"]))


def routed(calls: Iterable[SimCall]) -> list[SimCall]:
    """The calls with metadata that the simulated gateway sent to OpenAI."""
    return [c for c in calls if c.meta is not None and c.meta.get("provider") == PROVIDER]


def forgotten_calls(count: int, seed: int, start: datetime, run_id: str) -> list[SimCall]:
    """``count`` clean calls the gateway served upstream but never published: generated like a run
    without faults, keeping those routed to OpenAI that would have settled from reported usage."""
    found: list[SimCall] = []
    for call in iter_calls(4 * count + 20, seed, NO_FAULTS, start=start, run_id=run_id):
        e = call.expected
        if (
            routed([call])
            and e.outcome is Outcome.SETTLED
            and e.usage_source is UsageSource.REPORTED
            and e.usage is not None
        ):
            found.append(call)
            if len(found) == count:
                break
    return found


def _reported(call: SimCall) -> Counted | None:
    e = call.expected
    if e.outcome is Outcome.SETTLED and e.usage_source is UsageSource.REPORTED and e.usage:
        return Counted(1, e.usage.prompt_tokens, e.usage.cached_tokens, e.usage.completion_tokens)
    return None


def needs_ledger(calls: Iterable[SimCall]) -> list[str]:
    """Request ids whose count the export reads back from the ledger (see the module docstring)."""
    return [c.request_id for c in routed(calls) if c.expected.outcome and not _reported(c)]


def ledger_counts(session: Session, request_ids: Iterable[str]) -> dict[str, Counted]:
    """What the ledger holds for each call: its usage record, else its failure's estimate (a void
    call: 0 tokens). Read-only."""
    r, u, f = Reservation.__table__, UsageRecord.__table__, Failure.__table__
    ids = list(request_ids)
    found: dict[str, Counted] = {}
    for start in range(0, len(ids), 500):
        rows = session.execute(
            select(
                r.c.request_id,
                u.c.prompt_tokens,
                u.c.cached_tokens,
                u.c.completion_tokens,
                f.c.estimate_prompt_tokens,
                f.c.estimate_completion_tokens,
            )
            .select_from(
                r.outerjoin(u, u.c.reservation_id == r.c.id).outerjoin(
                    f, f.c.reservation_id == r.c.id
                )
            )
            .where(r.c.request_id.in_(ids[start : start + 500]))
        )
        for row in rows:
            if row.prompt_tokens is not None:
                counted = Counted(1, row.prompt_tokens, row.cached_tokens, row.completion_tokens)
            else:
                counted = Counted(
                    1, row.estimate_prompt_tokens or 0, 0, row.estimate_completion_tokens or 0
                )
            found[row.request_id] = counted
    return found


def provider_counts(
    published: Iterable[SimCall], forgotten: Iterable[SimCall], ledger: Mapping[str, Counted]
) -> dict[tuple[str, str, str], Counted]:
    """Per (day, served model id, upstream key): what the simulated provider counted."""
    cells: dict[tuple[str, str, str], Counted] = defaultdict(Counted)
    for call in routed(published):
        counted = _reported(call) or ledger.get(call.request_id) or Counted(1)
        day, model, key = _cell(call)
        cells[(day, _SERVED.get(model, model), key)] += counted
    for call in routed(forgotten):
        day, model, key = _cell(call)
        cells[(day, _SERVED.get(model, model), key)] += _reported(call) or Counted(1)
    return dict(cells)


def injected(published: Iterable[SimCall], forgotten: Iterable[SimCall]) -> dict[Cell, Counted]:
    """The oracle: per (day, gateway model, key), the requests and tokens no call in the ledger
    accounts for — the forgotten calls, and the routed calls never reconciled (a request entry the
    worker could not read), which the provider counts as a request of 0 tokens. Every simulated
    call carries a key label, so a leak is expected under its key where the ledger holds a call of
    that day and model, and under ``*`` (every key summed) where it holds none."""
    published = list(published)
    held = {_cell(c)[:2] for c in routed(published) if _as_itself(c)}
    cells: dict[Cell, Counted] = defaultdict(Counted)

    def add(call: SimCall, counted: Counted) -> None:
        day, model, key = _cell(call)
        cells[(day, model, key if (day, model) in held else "*")] += counted

    for call in routed(forgotten):
        add(call, _reported(call) or Counted(1))
    for call in routed(published):
        if not _as_itself(call):
            add(call, Counted(1))
    return dict(cells)


def _as_itself(call: SimCall) -> bool:
    """Whether the ledger holds ``call`` under its own model and key: not when it was never
    reconciled, nor when its request entry was unreadable (recorded ``unreadable`` under the
    account ``unattributed`` and the model ``unknown``: docs/events.md §4)."""
    return call.expected.outcome is not None and call.expected.reason is not Reason.UNREADABLE


def usage_page(cells: Mapping[tuple[str, str, str], Counted]) -> dict[str, Any]:
    """The counts as one OpenAI Usage API page (completions, daily buckets, grouped by model,
    project and key), the shape ``worker.upstream.exports`` reads."""
    buckets: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (day, model, key), counted in sorted(cells.items()):
        buckets[day].append(
            {
                "object": "organization.usage.completions.result",
                "input_tokens": counted.input_tokens,
                "output_tokens": counted.output_tokens,
                "input_cached_tokens": counted.cached_tokens,
                "num_model_requests": counted.requests,
                "project_id": PROJECT,
                "user_id": None,
                "api_key_id": key,
                "model": model,
                "batch": False,
                "service_tier": "default",
            }
        )
    data = []
    for day, results in sorted(buckets.items()):
        start = datetime.fromisoformat(day).replace(tzinfo=UTC)
        data.append(
            {
                "object": "bucket",
                "start_time": int(start.timestamp()),
                "end_time": int((start + timedelta(days=1)).timestamp()),
                "results": results,
            }
        )
    return {"object": "page", "data": data, "has_more": False, "next_page": None}


def found_leaks(rows: Iterable[Any]) -> dict[Cell, Counted]:
    """The reconciliation's leaked (requests, input, output) per (day, model, key) of ``openai``
    rows (``matching.Row``), in the oracle's terms (cached tokens are not compared)."""
    cells: dict[Cell, Counted] = {}
    for row in rows:
        if row.provider == PROVIDER and row.leaks:
            cells[(row.day, row.model, row.upstream_key)] = Counted(
                row.leak_requests or 0, row.leak_input, 0, row.leak_output
            )
    return cells


def without_cached(cells: Mapping[Cell, Counted]) -> dict[Cell, Counted]:
    return {
        cell: Counted(c.requests, c.input_tokens, 0, c.output_tokens)
        for cell, c in cells.items()
        if c.requests or c.input_tokens or c.output_tokens
    }
